"""The `zoo explore` web app: the page, its static files and JSON endpoints
over one `Explorer`, as an ASGI app (FastAPI) that uvicorn serves; the
requests and answers declared in `zoo.explore.protocol`.

    GET  /                 the page (static/index.html)
    GET  /static/NAME      its script and style sheet
    GET  /api/info         the model's kind and sizes
    POST /api/generate     language model: a stream of server-sent events,
                           `prompt` (the prompt's tokens), one `token` per
                           new token as it is chosen, then `done`
    POST /api/inspect      language model: attention and next-token
                           probabilities at one position
    POST /api/translate    translator: translation and cross-attention
    POST /api/classify     classifier: label probabilities and [CLS] attention
    GET  /openapi.json     the endpoints, their requests and answers
    GET  /docs             the same as a page (its script comes from a CDN)

A body is validated against its request's model (`zoo serve`'s
`validation.json_body`: strict JSON types, no undeclared field); a request
the model explored cannot answer gets status 400 and `zoo serve`'s error
shape, {"error": {"message": one line naming the field and what was
expected, "type", "param": the field, "code"}}; a body over the limit 413,
one that arrives too slowly 408 (`zoo.serve.web.Limits`).
"""

from pathlib import Path

from fastapi import APIRouter, Depends, Request
from starlette.responses import FileResponse, StreamingResponse
from starlette.staticfiles import StaticFiles

from zoo.explore import protocol
from zoo.explore.protocol import ClassifyRequest, GenerateRequest, InspectRequest, TranslateRequest
from zoo.serve import validation, web

STATIC = Path(__file__).parent / "static"

router = APIRouter()


def create_app(explorer, limits=web.Limits()):
    """The ASGI app of one `zoo.explore.explorer.Explorer`; request
    bodies are read within `limits`."""
    app = validation.application("zoo explore", f"A page over {explorer.name}.", limits, protocol.REQUESTS)
    app.state.explorer = explorer
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


@router.get("/", include_in_schema=False)
async def page():
    return FileResponse(STATIC / "index.html")


@router.get("/api/info", response_model=protocol.Info)
async def info(request: Request):
    """The model's kind and sizes, and its card."""
    return request.app.state.explorer.info()


EVENTS = {200: {"description": "server-sent events: `prompt` (a `PromptEvent`), one `token` (a `TokenEvent`) per "
                               "new token as it is chosen, then `done` (a `DoneEvent`), or `error` (an `ErrorEvent`)",
                "content": {"text/event-stream": {}}}}


@router.post("/api/generate", response_class=StreamingResponse, responses=EVENTS,
             openapi_extra=validation.body_schema(GenerateRequest))
async def generate(request: Request, body: GenerateRequest = Depends(validation.json_body(GenerateRequest))):
    """A language model's prompt continued, token by token."""
    explorer = request.app.state.explorer
    ids = explorer.check_generate(body)
    return StreamingResponse(_events(explorer, body, ids), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


# The model's answers are plain functions: FastAPI runs them in a worker thread, so the server stays responsive.


@router.post("/api/inspect", response_model=protocol.InspectResponse,
             openapi_extra=validation.body_schema(InspectRequest))
def inspect(request: Request, body: InspectRequest = Depends(validation.json_body(InspectRequest))):
    """A language model's attention and next-token probabilities at one position."""
    return request.app.state.explorer.inspect(body)


@router.post("/api/translate", response_model=protocol.TranslateResponse,
             openapi_extra=validation.body_schema(TranslateRequest))
def translate(request: Request, body: TranslateRequest = Depends(validation.json_body(TranslateRequest))):
    """A translator's translation of a sentence and its cross-attention."""
    return request.app.state.explorer.translate(body)


@router.post("/api/classify", response_model=protocol.ClassifyResponse,
             openapi_extra=validation.body_schema(ClassifyRequest))
def classify(request: Request, body: ClassifyRequest = Depends(validation.json_body(ClassifyRequest))):
    """A classifier's label probabilities of a sentence and its [CLS] attention."""
    return request.app.state.explorer.classify(body)


def _events(explorer, body, ids):
    """The server-sent events of one generation (a sync generator: Starlette
    runs each step in a worker thread, so the server stays responsive)."""
    yield _event("prompt", protocol.PromptEvent(tokens=explorer.tokens(ids)))
    sequence = list(ids)
    try:
        for token in explorer.stream(body, ids):
            sequence.append(token.id)
            yield _event("token", token)
    except Exception as error:  # the stream has begun: its status is sent, so the error travels as an event
        yield _event("error", protocol.ErrorEvent(error=f"generation stopped: {type(error).__name__}: {error}"))
        return
    yield _event("done", protocol.DoneEvent(ids=sequence, text=explorer.decode(sequence)))


def _event(name, data):
    return f"event: {name}\ndata: {data.model_dump_json()}\n\n"
