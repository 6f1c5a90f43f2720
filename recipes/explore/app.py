"""The `zoo explore` web app: the page, its static files and JSON endpoints
over one `Explorer`, as an ASGI app (Starlette) that uvicorn serves.

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

A request the model cannot answer gets status 400 and {"error": one line
naming the field and what was expected}; a body over the limit 413, one
that arrives too slowly 408 (`recipes.serve.web.Limits`).
"""

import json
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.responses import FileResponse, JSONResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from recipes.serve import web

STATIC = Path(__file__).parent / "static"


def create_app(explorer, limits=web.Limits()):
    """The ASGI app of one `recipes.explore.explorer.Explorer`; request
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

    routes = [
        Route("/", page),
        Route("/api/info", info),
        Route("/api/generate", generate, methods=["POST"]),
        Route("/api/inspect", answer(explorer.inspect), methods=["POST"]),
        Route("/api/translate", answer(explorer.translate), methods=["POST"]),
        Route("/api/classify", answer(explorer.classify), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return web.create_app(routes, web.plain_error)


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
