"""The OpenAI-compatible endpoints of `zoo serve`, as a Starlette app.

    GET  /v1/models              the one model served
    POST /v1/completions         a prompt continued
    POST /v1/chat/completions    a conversation answered, through the
                                 checkpoint's chat template

Request fields: `model`, `prompt` / `messages`, `max_tokens`
(`max_completion_tokens`), `temperature` (0: greedy), `top_p`, `seed`,
`stop`, `stream`, `stream_options.include_usage`, `n` (1), `user`.
Answers carry `usage` and `finish_reason` ("stop" or "length"); with
`stream: true`, server-sent events in OpenAI's chunk format, ending with
`data: [DONE]`. A refused request gets OpenAI's error shape,
`{"error": {"message", "type", "param", "code"}}`: 400 for a bad request,
401 for a wrong or missing API key, 404 for another model's name.
"""

import asyncio
import hmac
import json
import time
import uuid

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from recipes.serve.scheduler import END, ERROR, PIECE, Job
from recipes.server import BadRequest, read_json

COMMON = ("model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "n", "user",
          "presence_penalty", "frequency_penalty")
COMPLETION_FIELDS = COMMON + ("prompt", "echo", "logprobs")
CHAT_FIELDS = COMMON + ("messages", "max_completion_tokens", "logprobs")
COMPLETION_DEFAULT_TOKENS = 16  # OpenAI's default `max_tokens` of a completion


class NotFound(BadRequest):
    """Another model's name (404)."""


class Service:
    """One model behind the endpoints.

    Args:
        model: a decoder-only language model carrying its tokenizer.
        name: the model's id in `/v1/models` and in every answer.
        scheduler: the `Scheduler` that decodes its requests.
    """

    def __init__(self, model, name, scheduler):
        self.model, self.name, self.scheduler = model, name, scheduler
        self.tokenizer = getattr(model, "tokenizer", None) or getattr(getattr(model, "backbone", None), "tokenizer", None)
        self.context = int(getattr(model, "backbone", model).max_sequence_length)
        self.created = int(time.time())

    def completion_job(self, body):
        """The `Job` of a /v1/completions request; a `BadRequest` first if it is wrong."""
        _known(body, COMPLETION_FIELDS)
        self._check_common(body)
        if body.get("echo"):
            raise BadRequest("echo: only false is supported", "echo")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise BadRequest(f"prompt: expected a non-empty string; got {_short(prompt)}", "prompt")
        try:
            ids = [int(t) for t in self.tokenizer(prompt)]
        except ValueError as error:
            raise BadRequest(f"prompt: {error}", "prompt") from None
        return self._job(body, ids, COMPLETION_DEFAULT_TOKENS)

    def chat_job(self, body):
        """The `Job` of a /v1/chat/completions request."""
        _known(body, CHAT_FIELDS)
        self._check_common(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest('messages: expected a non-empty list of {"role", "content"} objects', "messages")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not isinstance(
                message.get("content"), str
            ):
                raise BadRequest(f'messages[{i}]: expected {{"role": str, "content": str}}; got {_short(message)}',
                                 "messages")
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise BadRequest(
                f"{self.name} has no chat template (a checkpoint's tokenizer_config.json `chat_template`); "
                "use /v1/completions with a plain prompt", "messages"
            )
        try:
            ids = self.tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True)
        except ValueError as error:
            raise BadRequest(f"messages: {error}", "messages") from None
        if body.get("max_completion_tokens") is not None:
            if body.get("max_tokens") is not None:
                raise BadRequest("max_tokens and max_completion_tokens: give one", "max_completion_tokens")
            body = {**body, "max_tokens": body["max_completion_tokens"]}
        return self._job(body, ids, None)

    def _check_common(self, body):
        model = body.get("model")
        if model is not None and model != self.name:
            raise NotFound(f"model: {model!r} is not served here; expected {self.name!r} (GET /v1/models)", "model")
        if body.get("n", 1) != 1:
            raise BadRequest(f"n: only 1 is supported; got {_short(body.get('n'))}", "n")
        for name in ("presence_penalty", "frequency_penalty"):
            if body.get(name) not in (None, 0, 0.0):
                raise BadRequest(f"{name}: only 0 is supported; got {_short(body.get(name))}", name)
        if body.get("logprobs") not in (None, False):
            raise BadRequest("logprobs: not supported; expected null or false", "logprobs")
        if not isinstance(body.get("stream", False), bool):
            raise BadRequest(f"stream: expected true or false; got {_short(body.get('stream'))}", "stream")
        options = body.get("stream_options")
        if options is not None and (
            not body.get("stream") or not isinstance(options, dict) or set(options) - {"include_usage"}
            or not isinstance(options.get("include_usage", False), bool)
        ):
            raise BadRequest('stream_options: expected {"include_usage": true or false}, with stream true',
                             "stream_options")
        if body.get("user") is not None and not isinstance(body["user"], str):
            raise BadRequest("user: expected a string", "user")

    def _job(self, body, ids, default_tokens):
        if len(ids) >= self.context:
            raise BadRequest(
                f"the prompt has {len(ids)} tokens; this model's context is {self.context} tokens, so a prompt may "
                f"have at most {self.context - 1}", "messages" if default_tokens is None else "prompt",
            )
        room = self.context - len(ids)
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = min(default_tokens or room, room)
        if not _is_int(max_tokens) or not 1 <= max_tokens <= room:
            raise BadRequest(
                f"max_tokens: expected an integer in [1, {room}] (the context of {self.context} tokens less the "
                f"prompt's {len(ids)}); got {_short(max_tokens)}", "max_tokens"
            )
        temperature = _number(body, "temperature", 1.0, 0.0, 2.0, "a number in [0, 2]")
        top_p = _number(body, "top_p", 1.0, 0.0, 1.0, "a number in (0, 1]")
        if top_p == 0.0:
            raise BadRequest("top_p: expected a number in (0, 1]; got 0", "top_p")
        seed = body.get("seed")
        if seed is not None and (not _is_int(seed) or not -(2**63) <= seed < 2**63):
            raise BadRequest(f"seed: expected an integer; got {_short(seed)}", "seed")
        stop = body.get("stop")
        stop = [stop] if isinstance(stop, str) else stop
        if stop is not None and (
            not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop)
        ):
            raise BadRequest(f"stop: expected a string or a list of at most 4 non-empty strings; got {_short(stop)}",
                             "stop")
        if temperature == 0.0:
            sampler, temperature = "greedy", 1.0
        else:
            sampler = "top_p" if top_p < 1.0 else "temperature"
        return Job(ids, max_tokens, tuple(stop or ()), sampler, temperature, top_p, seed)


def create_app(service, api_key=None):
    """The Starlette app of a `Service`; with `api_key`, every request must
    carry `Authorization: Bearer API_KEY`."""

    async def models(request):
        refused = _unauthorized(request, api_key)
        if refused:
            return refused
        card = {"id": service.name, "object": "model", "created": service.created, "owned_by": "zoo"}
        return JSONResponse({"object": "list", "data": [card]})

    def endpoint(make_job, chat):
        async def answer(request):
            refused = _unauthorized(request, api_key)
            if refused:
                return refused
            try:
                body = await read_json(request)
                job = make_job(body)
            except BadRequest as error:
                return _error(error, 404 if isinstance(error, NotFound) else 400)
            service.scheduler.submit(job)
            reply = _Reply(service.name, chat, len(job.prompt_ids))
            if body.get("stream"):
                include_usage = (body.get("stream_options") or {}).get("include_usage", False)
                return StreamingResponse(_stream(job, reply, include_usage), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache"})
            return await run_in_threadpool(_whole, job, reply)

        return answer

    routes = [
        Route("/v1/models", models),
        Route("/v1/completions", endpoint(service.completion_job, chat=False), methods=["POST"]),
        Route("/v1/chat/completions", endpoint(service.chat_job, chat=True), methods=["POST"]),
    ]
    return Starlette(routes=routes)


class _Reply:
    """OpenAI's answer objects for one request."""

    def __init__(self, model, chat, prompt_tokens):
        self.model, self.chat, self.prompt_tokens = model, chat, prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def usage(self, row):
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": row.completion_tokens,
                "total_tokens": self.prompt_tokens + row.completion_tokens}

    def whole(self, text, row):
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": row.finish_reason, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": row.finish_reason, "logprobs": None}
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice], "usage": self.usage(row)}

    def chunk(self, text=None, finish_reason=None, role=False, usage=None):
        if usage is not None:
            choices = []
        elif self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
            choices = [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
        else:
            choices = [{"index": 0, "text": text or "", "finish_reason": finish_reason, "logprobs": None}]
        chunk = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                 "created": self.created, "model": self.model, "choices": choices}
        if usage is not None:
            chunk["usage"] = usage
        return "data: " + json.dumps(chunk, ensure_ascii=False) + "\n\n"


def _whole(job, reply):
    """The non-streamed answer (run in a worker thread: it waits on the model's)."""
    text = []
    for kind, value in job.pieces():
        if kind == PIECE:
            text.append(value)
        elif kind == ERROR:
            return JSONResponse({"error": {"message": value, "type": "server_error", "param": None, "code": None}},
                                status_code=500)
        else:
            return JSONResponse(reply.whole("".join(text), value))


async def _stream(job, reply, include_usage):
    """The server-sent events of a streamed answer. Leaving early (the
    client went away) cancels the job, which stops its decoding."""
    try:
        if reply.chat:
            yield reply.chunk(role=True)
        while True:
            try:
                kind, value = job.events.get_nowait()
            except Exception:  # queue.Empty: the model's thread has not answered yet
                await asyncio.sleep(0.002)
                continue
            if kind == PIECE:
                yield reply.chunk(value)
            elif kind == ERROR:
                yield "data: " + json.dumps({"error": {"message": value, "type": "server_error", "param": None,
                                                       "code": None}}) + "\n\n"
                break
            else:
                yield reply.chunk(finish_reason=value.finish_reason)
                if include_usage:
                    yield reply.chunk(usage=reply.usage(value))
                break
        yield "data: [DONE]\n\n"
    finally:
        job.cancelled = True


def _unauthorized(request, api_key):
    if api_key is None:
        return None
    given = request.headers.get("authorization", "")
    scheme, _, key = given.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(key.strip().encode(), api_key.encode()):
        return None
    message = "missing API key: expected the header Authorization: Bearer KEY" if not given else "wrong API key"
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                   "code": "invalid_api_key"}}, status_code=401)


def _error(error, status):
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    return JSONResponse({"error": {"message": str(error), "type": kind, "param": getattr(error, "param", None),
                                   "code": "model_not_found" if status == 404 else None}}, status_code=status)


def _known(body, fields):
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; expected some of {', '.join(fields)}", unknown[0])


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body, name, default, low, high, expected):
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(f"{name}: expected {expected}; got {_short(value)}", name)
    return float(value)


def _short(value):
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
