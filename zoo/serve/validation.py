"""A request's body read within bounds and validated against its model of
`zoo.serve.protocol`, and the one exception handler of the apps: a refused
request (a body that failed its model, or a check of an endpoint) in
OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}`,
with `param` naming the field at fault.
"""

import json

from pydantic import ValidationError
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response as HTTPResponse

from zoo.serve.protocol import REQUESTS, ErrorInfo, ErrorResponse
from zoo.serve.web import RequestError, read_body, short


def json_body(model):
    """A FastAPI dependency: the request's body as `model`. The body is read
    as a stream within the app's `Limits` (`app.state.limits`: 413 past
    its size, 408 past its time), then validated."""

    async def read(request: HTTPRequest):
        return parse(model, await read_body(request, request.app.state.limits))

    return read


def parse(model, body):
    """The `model` (a `Request` class) of a JSON `body` (bytes); a
    `RequestError` naming the field at fault and what it expects."""
    try:
        return model.model_validate_json(body or b"null")
    except ValidationError as error:
        raise refusal(error, model, body) from None


def refusal(error, model, body):
    """The `RequestError` of `model`'s `ValidationError` of `body`: one line
    naming the field (its `param`), what it expects and what came."""
    errors = error.errors(include_url=False)
    first = errors[0]
    kind, loc = first["type"], first["loc"]
    if kind == "json_invalid":
        return RequestError(f"the body is not JSON ({first['ctx']['error']}); expected a JSON object")
    if not loc:
        return RequestError(f"the body is {_json_type(body)}; expected a JSON object")
    field = str(loc[0])
    if kind == "extra_forbidden" and len(loc) == 1:
        unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
        return RequestError(f"{', '.join(unknown)}: unknown field{'s' if len(unknown) > 1 else ''}; expected some of "
                            f"{', '.join(model.model_fields)}", field)
    expected = model.model_fields[field].description
    if kind == "missing" and len(loc) == 1:
        return RequestError(f"{field}: missing; expected {expected}", field)
    where, value = field, _field_value(body, field, first["input"])
    if len(loc) > 1 and isinstance(loc[1], int) and isinstance(value, list) and loc[1] < len(value):
        where, value = f"{field}[{loc[1]}]", value[loc[1]]  # the item at fault: messages[2]
    if kind == "extra_forbidden":  # a field of a nested object
        return RequestError(f"{where}.{loc[-1]}: unknown field; expected {expected}", field)
    # A value of the wrong length is said by its length (a union's other branches fail on its type).
    lengths = any(e["type"].endswith(("too_long", "too_short")) and e["loc"][0] == loc[0] for e in errors)
    if lengths and isinstance(value, (str, list, dict)):
        got = f"{len(value)} {'characters' if isinstance(value, str) else 'items'}"
    else:
        got = short(value)
    return RequestError(f"{where}: expected {expected}; got {got}", field)


def _field_value(body, field, fallback):
    try:
        return json.loads(body)[field]
    except (ValueError, KeyError, TypeError, RecursionError):
        return fallback


def _json_type(body):
    try:
        value = json.loads(body or b"null")
    except (ValueError, RecursionError):
        return "not an object"
    return {list: "a list", str: "a string", type(None): "null", bool: "true or false"}.get(type(value), "a number")


def error_body(error):
    """OpenAI's error object of a `RequestError`."""
    kinds = {404: "not_found_error", 408: "timeout_error", 413: "invalid_request_error", 429: "rate_limit_error"}
    info = ErrorInfo(message=str(error), type=kinds.get(error.status, "invalid_request_error"), param=error.param,
                     code=error.code)
    return ErrorResponse(error=info)


async def refused(request, error):
    """The exception handler of every app: a `RequestError` (a body that
    failed its model, or a check of an endpoint) as OpenAI's error shape;
    Starlette's own refusals (an unknown path, a wrong method) too."""
    if isinstance(error, HTTPException):
        error = RequestError(f"{request.method} {request.url.path}: {error.detail}", status=error.status_code,
                             headers=error.headers)
    return HTTPResponse(error_body(error).model_dump_json(), status_code=error.status, headers=error.headers,
                        media_type="application/json")


def server_error(message):
    """A 500 in OpenAI's error shape: the model failed on a request."""
    info = ErrorInfo(message=message, type="server_error", param=None, code=None)
    return HTTPResponse(ErrorResponse(error=info).model_dump_json(), status_code=500, media_type="application/json")


def body_schema(model):
    """A route's `openapi_extra`: its JSON body is `model`, whose schema
    `openapi_components` adds to the document (the body itself is read by
    `json_body`, within bounds)."""
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def openapi_components(models=REQUESTS):
    """The JSON schemas of the request models (and those they hold), for
    `/openapi.json`'s `components.schemas`."""
    _, schema = models_json_schema([(m, "validation") for m in models], ref_template="#/components/schemas/{model}")
    return schema["$defs"]


def application(title, description, limits, requests=()):
    """A FastAPI app whose refusals (`RequestError`) take OpenAI's error
    shape and whose bodies are read within `limits`; with `requests`
    (models), its `/openapi.json` and `/docs` describe their JSON bodies."""
    from fastapi import FastAPI

    import zoo

    pages = {} if requests else dict(docs_url=None, redoc_url=None, openapi_url=None)
    app = FastAPI(title=title, description=description, version=zoo.__version__,
                  exception_handlers={RequestError: refused, HTTPException: refused}, **pages)
    app.state.limits = limits
    build = app.openapi

    def openapi():
        if app.openapi_schema is None:
            build().setdefault("components", {}).setdefault("schemas", {}).update(openapi_components(requests))
        return app.openapi_schema

    if requests:
        app.openapi = openapi
    return app
