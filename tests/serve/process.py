"""`zoo serve` (or `zoo explore`) started as a process of its own, as a
user starts it, on 127.0.0.1 and a free port; and the small model the
tests serve, saved to a `.keras` file."""

import os
import subprocess
import sys
import threading
import time

import zoo
from tests.serve.raw_http import resident_bytes


class Process:
    """`zoo COMMAND TARGET --port 0 ...` until `stop()`; `url` is the one it prints."""

    def __init__(self, *arguments):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "recipes.cli", *arguments, "--port", "0"], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines = []
        threading.Thread(target=lambda: self.lines.extend(iter(self.process.stdout.readline, "")), daemon=True).start()
        deadline = time.time() + 180
        self.url = None
        while self.url is None and time.time() < deadline and self.process.poll() is None:
            self.url = next((line.split()[2].rstrip("/").removesuffix("/v1") for line in self.lines
                             if "http://127.0.0.1:" in line), None)
            time.sleep(0.1)
        assert self.url, "".join(self.lines)

    @property
    def resident(self):
        """The server's resident memory, in bytes."""
        return resident_bytes(self.process.pid)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


def saved_char_lm(path):
    """`tests.serve.conftest.char_lm()` saved to `path`; returns `path`."""
    from tests.serve.conftest import char_lm

    zoo.save(char_lm(), path)
    return path
