"""Servers of `zoo serve` on 127.0.0.1, in this process (a thread runs uvicorn)."""

import json
import threading
import time

import keras
import pytest

import zoo
from zoo.tokenizers import CharTokenizer

TEXT = "ROMEO: But soft, what light through yonder window breaks?\nJULIET: Ay me!\n\n"
CONTEXT = 32


class Server:
    """`zoo serve`'s app on a free port of 127.0.0.1 until `stop()`."""

    def __init__(self, model, name="lm", api_key=None, max_batch=8, port=0, limits=None, **scheduling):
        import uvicorn

        from zoo.serve import web
        from zoo.serve.app import create_app
        from zoo.serve.scheduler import Scheduler
        from zoo.serve.service import Service

        scheduler = Scheduler(model, max_batch=max_batch, **scheduling)
        self.service = Service(model, name, scheduler, limits or web.Limits())
        listener = web.listen("127.0.0.1", port)
        self.url = web.url("127.0.0.1", listener)
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.service, api_key), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [listener]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started and time.time() < deadline:
            time.sleep(0.05)

    def client(self, api_key="none"):
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=120)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def char_lm():
    keras.utils.set_random_seed(3)
    tokenizer = CharTokenizer.from_text(TEXT)
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(),
                     max_sequence_length=CONTEXT, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def lm():
    return char_lm()


@pytest.fixture(scope="module")
def served(lm):
    server = Server(lm)
    yield server
    server.stop()


def join_mid_stream(server, streamed, joining):
    """Streams the completion body `streamed` and, once its first piece has
    come, posts `joining`, the slots' steps slowed so that it surely joins
    mid-stream. Returns `(the stream's text, the joining request's answer)`."""
    import httpx

    slots = server.service.scheduler.slots
    step = slots.step

    def slow_step():
        time.sleep(0.05)
        return step()

    slots.step = slow_step
    first_piece, texts = threading.Event(), {}

    def stream():
        pieces = []
        with httpx.stream("POST", server.url + "/v1/completions", json={**streamed, "stream": True},
                          timeout=120) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    pieces.extend(choice["text"] for choice in json.loads(line[6:])["choices"])
                    first_piece.set()
        texts["streamed"] = "".join(pieces)

    streaming = threading.Thread(target=stream)
    streaming.start()
    assert first_piece.wait(120)
    answer = httpx.post(server.url + "/v1/completions", json=joining, timeout=120).json()
    streaming.join(120)
    return texts["streamed"], answer
