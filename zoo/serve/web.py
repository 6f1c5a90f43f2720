"""The HTTP side that `zoo serve` and `zoo explore` share: one request
error, a request body read within bounds, and listening on an address
until Ctrl-C.

A body is read as a stream: a `Content-Length` over the limit is refused
before any of it is read, and a body sent without one (chunked) is
refused as soon as it passes the limit, so a client cannot make the
server hold more than `max_request_bytes` of it. uvicorn stops reading
the socket while the app has not taken what came (its flow control), so
a refused body is never buffered whole either.

Needs the `serve` extra (FastAPI, uvicorn; `pip install -e .[serve]`).
"""

import asyncio
import json
import math
import socket
from dataclasses import dataclass

MIB = 2**20


class RequestError(ValueError):
    """A request refused before any work: the message names what was
    wrong and what was expected.

    Args:
        message: one line.
        param: the request field at fault, or None.
        status: the HTTP status (400 a bad request, 404 an unknown model,
            408 a body that came too slowly, 413 a body too large, 429 a
            full queue).
        code: a short machine-readable reason, or None.
        headers: extra response headers (`Retry-After` of a 429).
    """

    def __init__(self, message, param=None, status=400, code=None, headers=None):
        super().__init__(message)
        self.param, self.status, self.code, self.headers = param, status, code, headers


@dataclass(frozen=True)
class Limits:
    """What one request may ask of a server before the model sees it.

    Attributes:
        max_request_bytes: the largest body read; a larger one gets 413.
        read_timeout: seconds a body may take to arrive whole; a slower
            one gets 408.
    """

    max_request_bytes: int = MIB
    read_timeout: float = 30.0

    def __post_init__(self):
        if not is_int(self.max_request_bytes) or self.max_request_bytes < 1024:
            raise ValueError(f"--max-request-bytes {self.max_request_bytes}: expected an integer >= 1024")
        if not isinstance(self.read_timeout, (int, float)) or not 0 < self.read_timeout < math.inf:
            raise ValueError(f"--read-timeout {self.read_timeout}: expected a number of seconds > 0")


async def read_body(request, limits):
    """The request's body, read as a stream within `limits`; a
    `RequestError` (413 or 408) as soon as it cannot be."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError(f"Content-Length: {short(declared)} is not a number of bytes", status=400)
        if int(declared) > limits.max_request_bytes:
            raise _too_large(f"{int(declared)} bytes", limits)
    chunks, size = [], 0

    async def read():
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_request_bytes:
                raise _too_large(f"more than {limits.max_request_bytes} bytes", limits)
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), limits.read_timeout)
    except asyncio.TimeoutError:
        raise RequestError(
            f"the body did not arrive within {limits.read_timeout:g} s ({size} bytes came); expected it whole "
            "within the server's --read-timeout", status=408, code="request_timeout"
        ) from None
    return b"".join(chunks)


def _too_large(size, limits):
    return RequestError(
        f"the body has {size}; this server reads at most {limits.max_request_bytes} bytes (--max-request-bytes)",
        status=413, code="request_too_large",
    )


# --- Fields --------------------------------------------------------------------------


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def short(value):
    """A value as an error message quotes it: at most 60 characters."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- Listening -----------------------------------------------------------------------------


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
