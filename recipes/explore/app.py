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
naming the field and what was expected}.
"""

import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.responses import FileResponse, JSONResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from recipes.explore.engine import RequestError
from recipes.server import BadRequest, read_json

STATIC = Path(__file__).parent / "static"


def create_app(explorer):
    """The ASGI app of one `recipes.explore.engine.Explorer`."""

    async def page(request):
        return FileResponse(STATIC / "index.html")

    async def info(request):
        return JSONResponse(explorer.info())

    async def generate(request):
        body = await _json(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            settings = explorer.check_generate(body)
        except RequestError as error:
            return _refused(error)
        return StreamingResponse(
            _events(explorer, settings), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    def answer(method):
        async def endpoint(request):
            body = await _json(request)
            if isinstance(body, JSONResponse):
                return body
            try:
                return JSONResponse(await _in_thread(method, body))
            except RequestError as error:
                return _refused(error)

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
    return Starlette(routes=routes)


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


async def _json(request):
    """The request's JSON object, or the 400 response saying why not."""
    try:
        return await read_json(request)
    except BadRequest as error:
        return _refused(error)


async def _in_thread(method, body):
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(method, body)


def _refused(error):
    return JSONResponse({"error": str(error)}, status_code=400)
