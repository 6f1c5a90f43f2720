"""Tool calls in a model's text: the format a model family writes them in,
read back into OpenAI's `tool_calls`, and the grammar that makes a model
write one.

A chat template that takes `tools` tells the model how to call them, and
each family has its own way (the parsers of vLLM's `tool_parsers`):

- `hermes` (Qwen 2.5, Hermes): `<tool_call>\\n{"name": ..., "arguments":
  {...}}\\n</tool_call>`, one block per call;
- `llama3_json` (Llama 3.1 to 3.3): the answer is one JSON object
  `{"name": ..., "parameters": {...}}`;
- `mistral`: `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`;
- `generic`: a JSON object (or a list of them) with `name` and
  `arguments` or `parameters`, anywhere in the answer.

`format_of` picks the family's format from the chat template's text,
`parse` reads a whole answer, `Stream` an answer as it comes, and
`call_grammar` is the Lark grammar (llguidance's, with its `%json`) of one
call of a chosen function in the family's format, so that a constrained
call's arguments always validate against the function's `parameters`.

Example:
```python
parse('<tool_call>\\n{"name": "add", "arguments": {"a": 1}}\\n</tool_call>', "hermes", ["add"])
# (None, [Call(name="add", arguments='{"a": 1}')])
```
"""

import dataclasses
import json
import re
import secrets
import string

FORMATS = ("hermes", "llama3_json", "mistral", "generic")
HERMES_START, HERMES_END = "<tool_call>", "</tool_call>"
MISTRAL_START = "[TOOL_CALLS]"
SEPARATORS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclasses.dataclass(frozen=True)
class Call:
    """One call read from a model's text: a function's name and its
    arguments as JSON text."""

    name: str
    arguments: str


@dataclasses.dataclass(frozen=True)
class Parsing:
    """How an answer's calls are read: the family's format and the names
    of the functions offered."""

    format: str
    names: tuple


def format_of(chat_template):
    """The tool-call format a chat template teaches (one of `FORMATS`):
    Hermes tags, Mistral's `[TOOL_CALLS]`, Llama 3's JSON, else generic."""
    template = chat_template or ""
    if HERMES_START in template:
        return "hermes"
    if MISTRAL_START in template:
        return "mistral"
    if "<|start_header_id|>" in template and "parameters" in template:
        return "llama3_json"
    return "generic"


def call_id(format):
    """A new call's id: Mistral's templates take 9 letters and digits,
    the others OpenAI's `call_...`."""
    if format == "mistral":
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
    return "call_" + secrets.token_hex(12)


def parse(text, format, names):
    """The content and the calls of a model's answer.

    Args:
        text: str, the answer's text.
        format: one of `FORMATS`.
        names: the names of the functions offered; a call of another name
            is not a call (its text stays content).

    Returns:
        `(content, calls)`: the text outside the calls (None where there is
        none but whitespace) and a list of `Call`s (empty: the answer is
        all content, `text` itself).
    """
    names = set(names)
    if format == "hermes":
        calls, outside = [], []
        at = 0
        for match in re.finditer(re.escape(HERMES_START) + r"(.*?)(?:" + re.escape(HERMES_END) + r"|$)", text,
                                 re.DOTALL):
            found = _calls(_json_values(match.group(1)), names)
            if found is None:
                continue
            calls += found
            outside.append(text[at:match.start()])
            at = match.end()
        outside.append(text[at:])
        return (_content("".join(outside)), calls) if calls else (text, [])
    if format == "mistral":
        start = text.find(MISTRAL_START)
        before, rest = (text[:start], text[start + len(MISTRAL_START):]) if start >= 0 else ("", text)
        # `[TOOL_CALLS]` is a special token, left out of a decoded answer: a leading list of calls is the same.
        if start < 0 and not text.lstrip().startswith("["):
            return text, []
        calls = _calls(_json_values(rest), names)
        return (_content(before), calls) if calls else (text, [])
    if format == "llama3_json":
        body = text.strip()
        if body.startswith("<|python_tag|>"):
            body = body[len("<|python_tag|>"):]
        if not body.startswith("{"):
            return text, []
        calls = _calls(_json_values(body), names)
        return (None, calls) if calls else (text, [])
    start = min([i for i in (text.find("{"), text.find("["), text.find("```")) if i >= 0], default=-1)
    if start < 0:
        return text, []
    calls = _calls(_json_values(re.sub(r"```(?:json)?", "", text[start:])), names)
    return (_content(text[:start]), calls) if calls else (text, [])


def _json_values(text):
    """The JSON values written one after another in `text` (whitespace,
    `;` or `,` between them), up to the first that is not JSON."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at] in " \t\r\n;,":
            at += 1
        if at >= len(text):
            return values
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return values
        values.append(value)


def _calls(values, names):
    """The `Call`s of parsed JSON values (objects, or lists of them); None
    where any is not a call of one of `names`."""
    objects = [v for value in values for v in (value if isinstance(value, list) else [value])]
    calls = []
    for one in objects:
        if not isinstance(one, dict) or one.get("name") not in names:
            return None
        arguments = one.get("arguments", one.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(arguments, dict):
            return None
        calls.append(Call(one["name"], json.dumps(arguments, ensure_ascii=False)))
    return calls or None


def _content(text):
    return text if text.strip() else None


class Stream:
    """An answer read as it comes: the content to send now, the text that
    may be a call held back until the end, then the calls.

    Args:
        format: one of `FORMATS`.
        names: the names of the functions offered.
    """

    def __init__(self, format, names):
        self.format, self.names = format, list(names)
        self.text, self.sent, self.holding = "", 0, False

    def feed(self, piece):
        """The content of `piece` that is surely not part of a call."""
        self.text += piece
        if self.holding:
            return ""
        rest = self.text[self.sent:]
        begins = not self.text[:self.sent].strip()  # nothing but whitespace sent yet
        at = self._start(rest, begins)
        if at is not None:
            self.holding, out = True, rest[:at]
        elif begins and self.format in ("llama3_json", "mistral") and not rest.strip():
            out = ""  # leading whitespace: a call may follow
        else:
            # Hold back an end of the text that may begin a marker.
            markers = {"hermes": [HERMES_START], "mistral": [MISTRAL_START], "generic": ["```"]}.get(self.format, [])
            keep = max((k for m in markers for k in range(1, len(m)) if rest.endswith(m[:k])), default=0)
            out = rest[:len(rest) - keep]
        self.sent += len(out)
        return out

    def _start(self, rest, begins):
        """Where a call may begin in `rest`, the text not yet sent; None
        where none can."""
        found = []
        if self.format == "hermes":
            found = [rest.find(HERMES_START)]
        elif self.format == "mistral":
            found = [rest.find(MISTRAL_START)]
            if begins and rest.lstrip().startswith("["):
                found.append(len(rest) - len(rest.lstrip()))
        elif self.format == "llama3_json":
            if begins and rest.lstrip()[:1] in ("{", "<"):
                found.append(len(rest) - len(rest.lstrip()))
        else:
            found = [rest.find("{"), rest.find("["), rest.find("```")]
        found = [i for i in found if i >= 0]
        return min(found) if found else None

    def finish(self):
        """`(content, calls)` of what was held back: `parse`'s of it."""
        held = self.text[self.sent:]
        if not held:
            return None, []
        content, calls = parse(held, self.format, self.names)
        return (content if calls else held), calls


def call_schema(function, format):
    """The JSON schema of one call of `function` (an OpenAI `function`
    object: `name`, `parameters`) in the family's format: the name, and
    its arguments under `parameters` (Llama 3) or `arguments`."""
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    key = "parameters" if format == "llama3_json" else "arguments"
    return {"type": "object", "properties": {"name": {"const": function["name"]}, key: parameters},
            "required": ["name", key], "additionalProperties": False}


def call_grammar(functions, format, marker_id=None):
    """The Lark grammar (llguidance's, `%json` taking a JSON schema) of an
    answer that is one call of one of `functions`, in the family's format.

    Args:
        functions: a non-empty list of OpenAI `function` objects.
        format: one of `FORMATS`.
        marker_id: the token id of Mistral's `[TOOL_CALLS]` where the
            tokenizer holds it as a special token (llguidance's `<[id]>`),
            else None (the marker is written as text).

    Returns:
        str, the grammar.
    """
    schemas = [call_schema(function, format) for function in functions]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    # JSON as the templates write it (Jinja's `tojson`): one space after each `,` and `:`, no other.
    schema = {**schema, "x-guidance": SEPARATORS}
    lines = [f"call: %json {json.dumps(schema)}"]
    if format == "hermes":
        start = f'start: "{HERMES_START}\\n" call "\\n{HERMES_END}"'
    elif format == "mistral":
        marker = f"<[{marker_id}]>" if marker_id is not None else f'"{MISTRAL_START}"'
        start = f'start: {marker} " [" call "]"'
    else:
        start = "start: call"
    return "\n".join([start] + lines)
