"""The `zoo explore` web app: the page, its static files and JSON endpoints
over one `Explorer`, as an ASGI app (FastAPI) that uvicorn serves.

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

A request the model cannot answer gets status 400 and `zoo serve`'s error
shape (`zoo.serve.validation`), {"error": {"message": one line naming the
field and what was expected, "type", "param", "code"}}; a body over the
limit 413, one that arrives too slowly 408 (`zoo.serve.web.Limits`).
"""

import json
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.responses import FileResponse, JSONResponse, StreamingResponse
from starlette.staticfiles import StaticFiles

from zoo.serve import validation, web

STATIC = Path(__file__).parent / "static"


def create_app(explorer, limits=web.Limits()):
    """The ASGI app of one `zoo.explore.explorer.Explorer`; request
    bodies are read within `limits`."""

    async def page(request):
        return FileResponse(STATIC / "index.html")

    async def info(request):
        return JSONResponse(explorer.info())

    async def generate(request):
        settings = explorer.check_generate(await web.read_json(request, limits))
        return StreamingResponse(
            _events(explorer, settings), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    def answer(method):
        async def endpoint(request):
            return JSONResponse(await run_in_threadpool(method, await web.read_json(request, limits)))

        return endpoint

    app = validation.application("zoo explore", f"A page over {explorer.name}.", limits)
    app.add_route("/", page)
    app.add_route("/api/info", info)
    app.add_route("/api/generate", generate, methods=["POST"])
    app.add_route("/api/inspect", answer(explorer.inspect), methods=["POST"])
    app.add_route("/api/translate", answer(explorer.translate), methods=["POST"])
    app.add_route("/api/classify", answer(explorer.classify), methods=["POST"])
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _events(explorer, settings):
    """The server-sent events of one generation (a sync generator: Starlette
    runs each step in a worker thread, so the server stays responsive)."""
    yield _event("prompt", {"tokens": explorer.tokens(settings["ids"])})
    ids = list(settings["ids"])
    try:
        for token in explorer.stream(settings):
            ids.append(token["id"])
            yield _event("token", token)
    except Exception as error:  # the stream has begun: its status is sent, so the error travels as an event
        yield _event("error", {"error": f"generation stopped: {type(error).__name__}: {error}"})
        return
    yield _event("done", {"ids": ids, "text": explorer.decode(ids)})


def _event(name, data):
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"
