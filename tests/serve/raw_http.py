"""A client that sends a request body piece by piece over a plain socket
and stops sending as soon as the server answers, as curl does: what a
server's early 413 or 408 looks like from the client's side."""

import select
import socket
import time
from urllib.parse import urlsplit


class Answer:
    """The server's answer: `status`, `headers` (lower-case names), `body`
    (bytes), and `sent`, the bytes of the request body sent before it came."""

    def __init__(self, status, headers, body, sent):
        self.status, self.headers, self.body, self.sent = status, headers, body, sent

    def json(self):
        import json

        return json.loads(self.body)


def post(url, path, pieces, content_length=None, headers=None, pause=0.0, timeout=60.0):
    """POSTs the bytes of `pieces` (an iterable) to `url` + `path`, chunked
    when `content_length` is None; stops sending once the server answers.

    Args:
        pieces: the body, piece by piece (bytes).
        content_length: the `Content-Length` to declare, or None to send
            the body chunked (`Transfer-Encoding: chunked`).
        headers: more request headers.
        pause: seconds to wait after each piece (a slow client).
        timeout: seconds for the whole exchange.

    Returns:
        An `Answer`, or None when the server closed without answering.
    """
    address = urlsplit(url)
    deadline = time.monotonic() + timeout
    with socket.create_connection((address.hostname, address.port), timeout=timeout) as connection:
        lines = [f"POST {path} HTTP/1.1", f"Host: {address.hostname}", "Content-Type: application/json"]
        lines.append("Transfer-Encoding: chunked" if content_length is None else f"Content-Length: {content_length}")
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        sent = 0
        for piece in pieces:
            if _answered(connection) or time.monotonic() > deadline:
                break
            data = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if content_length is None else piece
            try:
                connection.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
            if pause:
                time.sleep(pause)
        else:
            if content_length is None and not _answered(connection):
                connection.sendall(b"0\r\n\r\n")
        return _read_answer(connection, sent, deadline)


def _answered(connection):
    return bool(select.select([connection], [], [], 0)[0])


def _read_answer(connection, sent, deadline):
    data = b""
    while time.monotonic() < deadline:
        try:
            chunk = connection.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if _ and _complete(head, body):
            break
    if b"\r\n\r\n" not in data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(status_line.split()[1]), headers, body, sent)


def _complete(head, body):
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return len(body) >= int(value)
    return False


def resident_bytes(pid):
    """A process's resident memory (VmRSS), in bytes."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for process {pid}")
