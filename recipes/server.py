"""What `zoo serve` and `zoo explore` share: opening the model a target names,
listening on an address, running an ASGI app there with uvicorn until
Ctrl-C, and reading a request's JSON body.

Needs the `serve` extra (Starlette, uvicorn; `pip install -e .[serve]`).
"""

import json
import socket
from pathlib import Path


class BadRequest(ValueError):
    """A request refused before any work: the message names what was wrong
    and what was expected; `param` the field, where one is at fault."""

    def __init__(self, message, param=None):
        super().__init__(message)
        self.param = param


def open_target(target):
    """The model of a run folder, a `.keras` file, or a checkpoint folder or handle.

    Args:
        target: a run folder holding `model.keras` (as the recipes write),
            a `.keras` file, or a GPT-2 / BERT / Llama-family checkpoint
            that `zoo.from_pretrained` reads: a folder or a handle
            (`hf://ORG/NAME[@REVISION]`, a keras-hub preset name).
    """
    import zoo

    from recipes.run_folder import MODEL, RUN, load_model, read_run

    if zoo.checkpoints.is_handle(target):  # before Path(), which folds the `//` of `hf://`
        return zoo.from_pretrained(target)
    path = Path(target)
    if path.is_dir() and (path / RUN).is_file():
        read_run(path)  # says what is missing from a run folder
        return load_model(path)
    if path.is_dir() and (path / MODEL).is_file():
        return zoo.load(path / MODEL, compile=False)
    if path.suffix == ".keras":
        if not path.is_file():
            raise ValueError(f"{path}: no such file; expected a .keras file written by zoo.save")
        return zoo.load(path, compile=False)
    if path.is_dir():
        return zoo.from_pretrained(path)
    raise ValueError(
        f"{path}: not found; expected a run folder (holding model.keras), a .keras file, a checkpoint folder "
        "or a handle (hf://ORG/NAME)"
    )


def listen(host, port):
    """A socket listening on (host, port); port 0 picks a free one.

    Listening before the server starts means a client that connects early
    waits in the backlog instead of being refused.
    """
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({error.strerror}); "
                         "expected a free port (--port 0 picks one)") from None
    listener.listen()
    return listener


def url(host, listener):
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{listener.getsockname()[1]}"


def run(app, listener):
    """Serves `app` on `listener` until Ctrl-C."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    except KeyboardInterrupt:  # uvicorn shuts down, then raises the Ctrl-C it caught again
        pass


def is_loopback(host):
    return host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")


async def read_json(request):
    """The request's JSON object; a `BadRequest` saying why it is not one."""
    body = await request.body()
    try:
        value = json.loads(body or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(f"the body is not JSON ({error}); expected a JSON object") from None
    if not isinstance(value, dict):
        raise BadRequest(f"the body is {type(value).__name__}; expected a JSON object")
    return value
