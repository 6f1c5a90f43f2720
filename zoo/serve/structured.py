"""The structure a request asks its answer to follow, as the grammar of
one row of the generation (`zoo.generation.constraints`).

A completions or chat request names at most one of OpenAI's
`response_format` (`json_object`, `json_schema`), vLLM's `guided_json`,
`guided_regex`, `guided_choice`, `guided_grammar`, or its newer
`structured_outputs` (`json`, `regex`, `choice`, `grammar`,
`json_object`). A chat request whose `tool_choice` is `required` or names
a function is constrained to one call in its family's format
(`zoo.serve.tool_calls.call_grammar`). A malformed schema, expression or
grammar is refused (400) in one line naming its field, before any
decoding.
"""

import json

from zoo.serve.web import RequestError

FIELDS = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")


def constraint(request):
    """The grammar text of the one structure `request` asks for, or None;
    a `RequestError` naming the field for two of them or a malformed one."""
    asked = [name for name in FIELDS if getattr(request, name, None) is not None
             and not (name == "response_format" and request.response_format.type == "text")]
    if not asked:
        return None
    if len(asked) > 1:
        raise RequestError(f"{', '.join(asked)}: give at most one structure for the answer", asked[1])
    field = asked[0]
    return grammar(field, **_arguments(field, getattr(request, field)))


def _arguments(field, value):
    """The keyword arguments of `zoo.generation.constraints.grammar` of one field's value."""
    if field == "response_format":
        if value.type == "json_object":
            return {"json_object": True}
        schema = value.json_schema.schema_
        return {"json_schema": {} if schema is None else schema}
    if field == "guided_json":
        return {"json_schema": _schema(field, value)}
    if field == "guided_regex":
        return {"regex": value}
    if field == "guided_choice":
        return {"choices": value}
    if field == "guided_grammar":
        return {"grammar": value}
    chosen = [name for name in ("json_", "regex", "choice", "grammar", "json_object")
              if getattr(value, name) not in (None, False)]
    if len(chosen) != 1:
        raise RequestError('structured_outputs: expected one of "json", "regex", "choice", "grammar" or '
                           f'"json_object"; got {len(chosen)}', field)
    name = chosen[0]
    if name == "json_":
        return {"json_schema": _schema(field, value.json_)}
    return {"choices" if name == "choice" else name: getattr(value, name)}


def _schema(field, schema):
    """A JSON schema given as an object or as its JSON text."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as error:
            raise RequestError(f"{field}: not JSON ({error}); expected a JSON schema", field) from None
    return schema


def grammar(field, **arguments):
    """`zoo.generation.constraints.grammar`'s text of `arguments`; a
    refusal naming `field` where it is malformed."""
    from zoo.generation import constraints

    try:
        return constraints.grammar(**arguments)
    except (ValueError, TypeError) as error:
        raise RequestError(f"{field}: {error}", field.split("[")[0]) from None
