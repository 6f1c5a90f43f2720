"""The OpenAI-compatible endpoints of `zoo serve`, as a Starlette app.

    GET  /v1/models              the one model served
    POST /v1/completions         a prompt continued
    POST /v1/chat/completions    a conversation answered, through the
                                 checkpoint's chat template
    GET  /health                 the server's limits, and its queue now

    GET  /tokenizer_info         the tokenizer's special tokens, as vLLM
    POST /tokenize               a text's token ids      states them (what
    POST /detokenize             token ids' text         lm-eval's remote
                                                         tokenizer asks)

Request fields: `model`, `prompt` / `messages`, `max_tokens`
(`max_completion_tokens`), `temperature` (0: greedy), `top_p`, `seed`,
`stop`, `stream`, `stream_options.include_usage`, `n` (1), `user`.
Completions also take a prompt as token ids, a list of up to
`MAX_PROMPTS` prompts (one choice each, in order), `logprobs` (0-5) and
`echo`, as OpenAI's legacy completions define them: `logprobs: {tokens,
token_logprobs, top_logprobs, text_offset}`, each token's log-probability
under the model (before temperature and top-p), its `logprobs` most
likely alternatives (and itself) as `{token: logprob}`, and its offset in
the prompt followed by the answer; `echo: true` returns the prompt before
the answer, its tokens first in `logprobs` (the first one's log-probability
null), and with `max_tokens: 0` scores the prompt alone (what
lm-evaluation-harness's `local-completions` model asks). The
log-probabilities are `zoo.score`'s, of the prompt and the answer's tokens.
Answers carry `usage` and `finish_reason` ("stop" or "length"); with
`stream: true`, server-sent events in OpenAI's chunk format, ending with
`data: [DONE]`. A refused request gets OpenAI's error shape,
`{"error": {"message", "type", "param", "code"}}`: 400 for a bad request,
401 for a wrong or missing API key, 404 for another model's name, 408
for a body that did not arrive within `--read-timeout`, 413 for a body
over `--max-request-bytes`, 429 (with `Retry-After`) when `--max-queue`
requests already wait.

Every request is bounded before the model sees it: the body is read as a
stream up to its limit (`recipes.serve.web`), a prompt is tokenized piece
by piece and refused once it has more tokens than the context holds
(a prompt of millions of characters costs the tokenizing of a few
thousand), a conversation has at most `MAX_MESSAGES` messages of at most
`CHARACTERS_PER_TOKEN` characters per token of context in all, and `stop`
at most 4 strings of at most `MAX_STOP_CHARACTERS`.
"""

import asyncio
import dataclasses
import hmac
import json
import queue
import time
import uuid

from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from recipes.serve import web

from recipes.serve.scheduler import END, ERROR, PIECE, Job, QueueFull, ScoreJob
from recipes.serve.web import Limits, RequestError, is_int, known, number, read_json, short
from zoo.text.tokens import decode

COMMON = ("model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "n", "user",
          "presence_penalty", "frequency_penalty")
COMPLETION_FIELDS = COMMON + ("prompt", "echo", "logprobs")
CHAT_FIELDS = COMMON + ("messages", "max_completion_tokens", "logprobs")
COMPLETION_DEFAULT_TOKENS = 16  # OpenAI's default `max_tokens` of a completion
MAX_MESSAGES = 1024
# A conversation longer than this many characters per token of context
# cannot fit: few tokens of any vocabulary are longer.
CHARACTERS_PER_TOKEN = 64
MAX_STOP_STRINGS, MAX_STOP_CHARACTERS = 4, 256
# A prompt is tokenized in pieces of about this many characters, each
# cut before a space, until it surely has more tokens than the context.
PIECE_CHARACTERS = 4096
RETRY_AFTER_SECONDS = 1
MAX_PROMPTS = 64  # prompts of one completions request
MAX_LOGPROBS = 5  # OpenAI's most `logprobs` of a completion


class Service:
    """One model behind the endpoints.

    Args:
        model: a decoder-only language model carrying its tokenizer.
        name: the model's id in `/v1/models` and in every answer.
        scheduler: the `Scheduler` that decodes its requests.
        limits: the `recipes.serve.web.Limits` of a request's body.
    """

    def __init__(self, model, name, scheduler, limits=Limits()):
        self.model, self.name, self.scheduler, self.limits = model, name, scheduler, limits
        self.tokenizer = getattr(model, "tokenizer", None) or getattr(getattr(model, "backbone", None), "tokenizer", None)
        self.context = int(getattr(model, "backbone", model).max_sequence_length)
        self.created = int(time.time())

    def health(self):
        """The server's limits and its queue now (`GET /health`)."""
        scheduler = self.scheduler
        return {
            "status": "ok",
            "model": self.name,
            "waiting": scheduler.waiting,
            "running": scheduler.running,
            "limits": {
                "max_request_bytes": self.limits.max_request_bytes,
                "read_timeout_seconds": self.limits.read_timeout,
                "context_tokens": self.context,
                "max_prompt_tokens": self.context - 1,
                "max_messages": MAX_MESSAGES,
                "max_message_characters": self.max_characters,
                "max_stop_strings": MAX_STOP_STRINGS,
                "max_stop_characters": MAX_STOP_CHARACTERS,
                "max_n": 1,
                "max_prompts": MAX_PROMPTS,
                "max_logprobs": MAX_LOGPROBS,
                "max_batch": scheduler.max_batch,
                "max_batches": scheduler.max_batches,
                "max_queue": scheduler.max_queue,
            },
        }

    @property
    def max_characters(self):
        """The most characters of a conversation's messages in all."""
        return CHARACTERS_PER_TOKEN * self.context

    def completion(self, body):
        """The `Completion` of a /v1/completions request; a `RequestError` first if it is wrong."""
        known(body, COMPLETION_FIELDS)
        self._check_common(body)
        echo = body.get("echo", False)
        if not isinstance(echo, bool):
            raise RequestError(f"echo: expected true or false; got {short(echo)}", "echo")
        logprobs = body.get("logprobs")
        if logprobs is not None and (not is_int(logprobs) or not 0 <= logprobs <= MAX_LOGPROBS):
            raise RequestError(f"logprobs: expected null or an integer in [0, {MAX_LOGPROBS}]; got {short(logprobs)}",
                               "logprobs")
        prompts = self._prompts(body.get("prompt"))
        if body.get("stream") and (echo or logprobs is not None or len(prompts) > 1):
            raise RequestError("stream: true takes one prompt, without echo or logprobs", "stream")
        if echo and body.get("max_tokens") == 0:
            jobs = [None] * len(prompts)
        else:
            jobs = [self._job(body, ids, COMPLETION_DEFAULT_TOKENS) for _, ids in prompts]
        return Completion([text for text, _ in prompts], [ids for _, ids in prompts], jobs, echo, logprobs)

    def _prompts(self, prompt):
        """`(text or None, ids)` of each prompt: a string, a list of token
        ids, or a list of either (at most `MAX_PROMPTS`)."""
        expected = ("expected a non-empty string, a list of token ids, or a list of at most "
                    f"{MAX_PROMPTS} of either")
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(is_int(t) for t in prompt)):
            prompt = [prompt]
        if not isinstance(prompt, list) or not 0 < len(prompt) <= MAX_PROMPTS:
            raise RequestError(f"prompt: {expected}; got {short(prompt)}", "prompt")
        prompts = []
        for one in prompt:
            if isinstance(one, str) and one:
                prompts.append((one, self.prompt_ids(one, "prompt")))
                self._check_length(prompts[-1][1], "prompt")
            elif isinstance(one, list) and one and all(is_int(t) for t in one):
                vocabulary = self.model.vocabulary_size
                if len(one) >= self.context or not all(0 <= t < vocabulary for t in one):
                    raise RequestError(
                        f"prompt: expected at most {self.context - 1} token ids, each in [0, {vocabulary}); "
                        f"got {short(one)}", "prompt", code="context_length_exceeded" if len(one) >= self.context
                        else None)
                prompts.append((None, list(one)))
            else:
                raise RequestError(f"prompt: {expected}; got {short(one)}", "prompt")
        return prompts

    def tokenizer_info(self):
        """The tokenizer's special tokens and template (`GET /tokenizer_info`, as vLLM's)."""
        tokenizer = self.tokenizer
        special = {}
        for kind, attribute in (("bos_token", "start_token_id"), ("eos_token", "end_token_id"),
                                ("pad_token", "pad_token_id")):
            value = getattr(tokenizer, attribute, None)
            special[kind] = None if value is None else decode(tokenizer, [int(value)])
        return {**special, "chat_template": getattr(tokenizer, "chat_template", None),
                "model_max_length": self.context, "tokenizer_class": type(tokenizer).__name__}

    def tokenize(self, body):
        """`{tokens, count, max_model_len}` of `{"prompt": text}` (`POST /tokenize`)."""
        known(body, ("model", "prompt", "add_special_tokens"))
        text = body.get("prompt")
        if not isinstance(text, str):
            raise RequestError(f"prompt: expected a string; got {short(text)}", "prompt")
        if not isinstance(body.get("add_special_tokens", False), bool):
            raise RequestError("add_special_tokens: expected true or false", "add_special_tokens")
        tokens = self._ids(text, "prompt") if text else []
        return {"tokens": tokens, "count": len(tokens), "max_model_len": self.context}

    def detokenize(self, body):
        """`{prompt}`: the text of `{"tokens": ids}` (`POST /detokenize`)."""
        known(body, ("model", "tokens"))
        tokens = body.get("tokens")
        vocabulary = self.model.vocabulary_size
        if not isinstance(tokens, list) or not all(is_int(t) and 0 <= t < vocabulary for t in tokens):
            raise RequestError(f"tokens: expected a list of token ids in [0, {vocabulary}); got {short(tokens)}",
                               "tokens")
        return {"prompt": decode(self.tokenizer, tokens)}

    def logprobs(self, completion, answers, scores):
        """OpenAI's `logprobs` object of each choice: `answers[i]` the
        answer's `(text, token ids)`, `scores[i]` the `Score` of the
        choice's tokens (None where there are none)."""
        objects = []
        for text, ids, answer, score in zip(completion.texts, completion.prompt_ids, answers, scores):
            prompt_text = text if text is not None else decode(self.tokenizer, ids)
            new_ids = answer[1]
            shown = (ids if completion.echo else []) + new_ids
            before = [] if completion.echo else ids
            entries = [None] * (len(shown) - (0 if score is None else len(score.token_ids)))
            tokens = [decode(self.tokenizer, [t]) for t in shown]
            token_logprobs, top_logprobs = [None] * len(entries), [None] * len(entries)
            if score is not None:
                for i, (token, value) in enumerate(zip(score.token_ids, score.token_logprobs)):
                    alternatives = {decode(self.tokenizer, [int(t)]): float(v)
                                    for t, v in zip(score.top_ids[i], score.top_logprobs[i])}
                    alternatives.setdefault(decode(self.tokenizer, [int(token)]), float(value))
                    token_logprobs.append(float(value))
                    top_logprobs.append(alternatives)
            start = 0 if completion.echo else len(prompt_text)
            objects.append({"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs,
                            "text_offset": [start + o for o in _offsets(self.tokenizer, before, shown)]})
        return objects

    def prompt_ids(self, text, field):
        """The ids of `text`, refused once it surely has more tokens than a
        prompt may: a long text is tokenized piece by piece (each piece
        cut before a space, so the pieces tokenize as the whole does, give
        or take a token at each cut), and only a text that fits is then
        tokenized whole."""
        most, counted, pieces, start = self.context - 1, 0, 0, 0
        while len(text) - start > PIECE_CHARACTERS:
            end = _cut(text, start + PIECE_CHARACTERS)
            counted += len(self._ids(text[start:end], field))
            pieces, start = pieces + 1, end
            if counted - 2 * pieces > most:
                raise RequestError(
                    f"{field}: more than {most} tokens in its first {start} of {len(text)} characters; this model's "
                    f"context is {self.context} tokens, so a prompt may have at most {most}", field,
                    code="context_length_exceeded",
                )
        return self._ids(text, field)

    def _ids(self, text, field):
        try:
            return [int(t) for t in self.tokenizer(text)]
        except ValueError as error:
            raise RequestError(f"{field}: {error}", field) from None

    def chat_job(self, body):
        """The `Job` of a /v1/chat/completions request."""
        known(body, CHAT_FIELDS)
        self._check_common(body)
        if body.get("logprobs") not in (None, False):
            raise RequestError("logprobs: not supported in chat; expected null or false", "logprobs")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError('messages: expected a non-empty list of {"role", "content"} objects', "messages")
        if len(messages) > MAX_MESSAGES:
            raise RequestError(f"messages: {len(messages)} messages; expected at most {MAX_MESSAGES}", "messages")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not isinstance(
                message.get("content"), str
            ):
                raise RequestError(f'messages[{i}]: expected {{"role": str, "content": str}}; got {short(message)}',
                                   "messages")
        characters = sum(len(m["role"]) + len(m["content"]) for m in messages)
        if characters > self.max_characters:
            raise RequestError(
                f"messages: {characters} characters in all; a context of {self.context} tokens holds at most "
                f"{self.max_characters}", "messages", code="context_length_exceeded",
            )
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise RequestError(
                f"{self.name} has no chat template (a checkpoint's tokenizer_config.json `chat_template`); "
                "use /v1/completions with a plain prompt", "messages"
            )
        try:
            self.prompt_ids(self.tokenizer.render_chat([dict(m) for m in messages]), "messages")
            ids = self.tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True)
        except ValueError as error:
            raise RequestError(f"messages: {error}", "messages") from None
        if body.get("max_completion_tokens") is not None:
            if body.get("max_tokens") is not None:
                raise RequestError("max_tokens and max_completion_tokens: give one", "max_completion_tokens")
            body = {**body, "max_tokens": body["max_completion_tokens"]}
        return self._job(body, ids, None)

    def _check_common(self, body):
        model = body.get("model")
        if model is not None and model != self.name:
            raise RequestError(f"model: {model!r} is not served here; expected {self.name!r} (GET /v1/models)",
                               "model", status=404, code="model_not_found")
        if body.get("n", 1) != 1:
            raise RequestError(f"n: only 1 is supported; got {short(body.get('n'))}", "n")
        for name in ("presence_penalty", "frequency_penalty"):
            if body.get(name) not in (None, 0, 0.0):
                raise RequestError(f"{name}: only 0 is supported; got {short(body.get(name))}", name)
        if not isinstance(body.get("stream", False), bool):
            raise RequestError(f"stream: expected true or false; got {short(body.get('stream'))}", "stream")
        options = body.get("stream_options")
        if options is not None and (
            not body.get("stream") or not isinstance(options, dict) or set(options) - {"include_usage"}
            or not isinstance(options.get("include_usage", False), bool)
        ):
            raise RequestError('stream_options: expected {"include_usage": true or false}, with stream true',
                             "stream_options")
        if body.get("user") is not None and not isinstance(body["user"], str):
            raise RequestError("user: expected a string", "user")

    def _check_length(self, ids, field):
        if len(ids) >= self.context:
            raise RequestError(
                f"the prompt has {len(ids)} tokens; this model's context is {self.context} tokens, so a prompt may "
                f"have at most {self.context - 1}", field,
            )

    def _job(self, body, ids, default_tokens):
        self._check_length(ids, "messages" if default_tokens is None else "prompt")
        room = self.context - len(ids)
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = min(default_tokens or room, room)
        if not is_int(max_tokens) or not 1 <= max_tokens <= room:  # 0 only with echo: see `completion`
            raise RequestError(
                f"max_tokens: expected an integer in [1, {room}] (the context of {self.context} tokens less the "
                f"prompt's {len(ids)}); got {short(max_tokens)}", "max_tokens"
            )
        temperature = number(body, "temperature", 1.0, "a number in [0, 2]", low=0.0, high=2.0)
        top_p = number(body, "top_p", 1.0, "a number in (0, 1]", above=0.0, high=1.0)
        seed = body.get("seed")
        if seed is not None and (not is_int(seed) or not -(2**63) <= seed < 2**63):
            raise RequestError(f"seed: expected an integer; got {short(seed)}", "seed")
        stop = body.get("stop")
        stop = [stop] if isinstance(stop, str) else stop
        if stop is not None and (
            not isinstance(stop, list) or len(stop) > MAX_STOP_STRINGS
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARACTERS for s in stop)
        ):
            raise RequestError(
                f"stop: expected a string or a list of at most {MAX_STOP_STRINGS} non-empty strings of at most "
                f"{MAX_STOP_CHARACTERS} characters; got {short(stop)}", "stop")
        if temperature == 0.0:
            sampler, temperature = "greedy", 1.0
        else:
            sampler = "top_p" if top_p < 1.0 else "temperature"
        return Job(ids, max_tokens, tuple(stop or ()), sampler, temperature, top_p, seed)


def create_app(service, api_key=None):
    """The Starlette app of a `Service`; with `api_key`, every request but
    `GET /health` must carry `Authorization: Bearer API_KEY`."""

    async def models(request):
        _authorize(request, api_key)
        card = {"id": service.name, "object": "model", "created": service.created, "owned_by": "zoo",
                "max_model_len": service.context}
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request):
        return JSONResponse(service.health())

    async def chat(request):
        _authorize(request, api_key)
        body = await read_json(request, service.limits)
        job = service.chat_job(body)
        _submit(service.scheduler, [job])
        reply = _Reply(service.name, True, len(job.prompt_ids))
        if body.get("stream"):
            include_usage = (body.get("stream_options") or {}).get("include_usage", False)
            return StreamingResponse(_stream(job, reply, include_usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await _whole(request, job, reply)

    async def completions(request):
        _authorize(request, api_key)
        body = await read_json(request, service.limits)
        completion = service.completion(body)
        jobs = [job for job in completion.jobs if job is not None]
        _submit(service.scheduler, jobs)
        if body.get("stream"):
            include_usage = (body.get("stream_options") or {}).get("include_usage", False)
            reply = _Reply(service.name, False, len(jobs[0].prompt_ids))
            return StreamingResponse(_stream(jobs[0], reply, include_usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await _complete(request, service, completion)

    async def tokenizer_info(request):
        _authorize(request, api_key)
        return JSONResponse(service.tokenizer_info())

    async def tokenize(request):
        _authorize(request, api_key)
        return JSONResponse(service.tokenize(await read_json(request, service.limits)))

    async def detokenize(request):
        _authorize(request, api_key)
        return JSONResponse(service.detokenize(await read_json(request, service.limits)))

    routes = [
        Route("/health", health),
        Route("/v1/models", models),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/tokenizer_info", tokenizer_info),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
    ]
    return web.create_app(routes)


class _Reply:
    """OpenAI's answer objects for one request."""

    def __init__(self, model, chat, prompt_tokens):
        self.model, self.chat, self.prompt_tokens = model, chat, prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def usage(self, row):
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": row.completion_tokens,
                "total_tokens": self.prompt_tokens + row.completion_tokens}

    def whole(self, text, row):  # one choice
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


class _Events:
    """A job's events, awaited without holding a thread: the model's
    thread wakes this loop after each event."""

    def __init__(self, job):
        loop, self.job, self.ready = asyncio.get_running_loop(), job, asyncio.Event()
        job.wake = lambda: loop.call_soon_threadsafe(self.ready.set)

    async def next(self, disconnected=None):
        """The next `(kind, value)`; None once the future `disconnected` is done."""
        while True:
            self.ready.clear()
            try:
                return self.job.events.get_nowait()
            except queue.Empty:
                pass
            if disconnected is None:
                await self.ready.wait()
                continue
            wake = asyncio.ensure_future(self.ready.wait())
            await asyncio.wait({wake, disconnected}, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            if disconnected.done():
                return None


@dataclasses.dataclass
class Completion:
    """A /v1/completions request checked: per prompt its text (None for
    token ids), its ids and its `Job` (None with `max_tokens: 0`); `echo`
    and `logprobs` (None, or the alternatives asked for)."""

    texts: list
    prompt_ids: list
    jobs: list
    echo: bool
    logprobs: object


def _submit(scheduler, jobs):
    """Queues `jobs`, all or none: a full queue refuses the request (429)."""
    try:
        for job in jobs:
            scheduler.submit(job)
    except QueueFull as error:
        for job in jobs:
            job.cancelled = True  # those already queued leave it
        raise RequestError(f"the server is busy: {error}; retry after {RETRY_AFTER_SECONDS} s", status=429,
                           code="queue_full", headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None


async def _result(job, disconnected):
    """`(END, (text, value))` or `(ERROR, message)` of a job, its pieces
    joined; None once the client has left."""
    events, text = _Events(job), []
    while True:
        event = await events.next(disconnected)
        if event is None:
            return None
        kind, value = event
        if kind == PIECE:
            text.append(value)
        else:
            return (END, ("".join(text), value)) if kind == END else event


def _server_error(message):
    return JSONResponse({"error": {"message": message, "type": "server_error", "param": None, "code": None}},
                        status_code=500)


async def _whole(request, job, reply):
    """The non-streamed answer. A client that leaves before it cancels the
    job, which frees its place in the queue or stops its decoding."""
    disconnected = asyncio.ensure_future(_disconnected(request))
    try:
        result = await _result(job, disconnected)
        if result is None:
            return Response(status_code=499)  # the client left: nobody reads this
        kind, value = result
        return _server_error(value) if kind == ERROR else JSONResponse(reply.whole(*value))
    finally:
        disconnected.cancel()
        job.cancelled = True


async def _complete(request, service, completion):
    """The non-streamed completions: each prompt's answer, then (with
    `logprobs`) one `ScoreJob` for the tokens of them all."""
    disconnected = asyncio.ensure_future(_disconnected(request))
    jobs = [job for job in completion.jobs if job is not None]
    try:
        answers, usage = [], [0, 0]
        for job, ids in zip(completion.jobs, completion.prompt_ids):
            usage[0] += len(ids)
            if job is None:
                answers.append(("", [], "length"))
                continue
            result = await _result(job, disconnected)
            if result is None:
                return Response(status_code=499)
            if result[0] == ERROR:
                return _server_error(result[1])
            text, row = result[1]
            answers.append((text, _answer_ids(service.tokenizer, ids, job.token_ids, row, text), row.finish_reason))
            usage[1] += row.completion_tokens
        logprobs = [None] * len(answers)
        if completion.logprobs is not None:
            pairs = []
            for i, (ids, (_, new_ids, _)) in enumerate(zip(completion.prompt_ids, answers)):
                full, split = ids + new_ids, 1 if completion.echo else len(ids)
                if len(full) > split:
                    pairs.append((i, full[:split], full[split:]))
            scores = [None] * len(answers)
            if pairs:
                job = ScoreJob([p[1] for p in pairs], [p[2] for p in pairs], completion.logprobs)
                jobs.append(job)
                _submit(service.scheduler, [job])
                result = await _result(job, disconnected)
                if result is None:
                    return Response(status_code=499)
                if result[0] == ERROR:
                    return _server_error(result[1])
                for (i, _, _), score in zip(pairs, result[1][1]):
                    scores[i] = score
            logprobs = service.logprobs(completion, answers, scores)
        choices = []
        for i, ((text, _, finish_reason), ids) in enumerate(zip(answers, completion.prompt_ids)):
            if completion.echo:
                prompt = completion.texts[i]
                text = (prompt if prompt is not None else decode(service.tokenizer, ids)) + text
            choices.append({"index": i, "text": text, "finish_reason": finish_reason, "logprobs": logprobs[i]})
        return JSONResponse({
            "id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
            "model": service.name, "choices": choices,
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        })
    finally:
        disconnected.cancel()
        for job in jobs:
            job.cancelled = True


def _answer_ids(tokenizer, prompt_ids, new_ids, row, text):
    """The answer's token ids that its text holds: less an end token, and
    less those past a stop string."""
    ids = list(new_ids)
    if ids and ids[-1] in row.stop_token_ids:
        ids.pop()
    prompt_text = decode(tokenizer, prompt_ids)
    while ids and len(decode(tokenizer, prompt_ids + ids)) - len(prompt_text) > len(text):
        ids.pop()
    return ids


def _offsets(tokenizer, before, ids):
    """Where each of `ids` starts in the text of `before + ids`, counted
    from the end of the text of `before`."""
    base, pieces = decode(tokenizer, before), [decode(tokenizer, [t]) for t in ids]
    if decode(tokenizer, before + ids) == base + "".join(pieces):
        offsets, at = [], 0
        for piece in pieces:
            offsets.append(at)
            at += len(piece)
        return offsets
    return [len(decode(tokenizer, before + ids[:i])) - len(base) for i in range(len(ids))]


async def _disconnected(request):
    """Returns once the client has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _stream(job, reply, include_usage):
    """The server-sent events of a streamed answer. Leaving early (the
    client went away: Starlette cancels this) cancels the job, which stops
    its decoding."""
    events = _Events(job)
    try:
        if reply.chat:
            yield reply.chunk(role=True)
        while True:
            kind, value = await events.next()
            if kind == PIECE:
                yield reply.chunk(value)
                continue
            if kind == ERROR:
                yield "data: " + json.dumps({"error": {"message": value, "type": "server_error", "param": None,
                                                       "code": None}}) + "\n\n"
            else:
                yield reply.chunk(finish_reason=value.finish_reason)
                if include_usage:
                    yield reply.chunk(usage=reply.usage(value))
            break
        yield "data: [DONE]\n\n"
    finally:
        job.cancelled = True


def _authorize(request, api_key):
    """Refuses (401) a request without the API key, where one is set."""
    if api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, key = given.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(key.strip().encode(), api_key.encode()):
        return
    message = "missing API key: expected the header Authorization: Bearer KEY" if not given else "wrong API key"
    raise RequestError(message, status=401, code="invalid_api_key")


def _cut(text, end):
    """Where to end a piece of `text` near `end`: before the last space of
    the piece's second half, else at `end`."""
    space = max(text.rfind(" ", end - PIECE_CHARACTERS // 2, end), text.rfind("\n", end - PIECE_CHARACTERS // 2, end))
    return space if space > end - PIECE_CHARACTERS // 2 else end
