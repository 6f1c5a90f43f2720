"""The OpenAI-compatible endpoints of `zoo serve`, as a Starlette app.

    GET  /v1/models              the one model served
    POST /v1/completions         a prompt continued
    POST /v1/chat/completions    a conversation answered, through the
                                 checkpoint's chat template
    POST /v1/embeddings          sentence embeddings (a BERT sentence
                                 encoder served, `zoo.embed`)
    GET  /health                 the server's limits, and its queue now

    GET  /tokenizer_info         the tokenizer's special tokens, as vLLM
    POST /tokenize               a text's token ids      states them (what
    POST /detokenize             token ids' text         lm-eval's remote
                                                         tokenizer asks)

Request fields: `model`, `prompt` / `messages`, `max_tokens`
(`max_completion_tokens`), `temperature` (0: greedy), `top_p`, `seed`,
`stop`, `stream`, `stream_options.include_usage`, `n` (up to
`--max-batch` samples of each prompt, decoded in one batch; with a `seed`
s, the k-th sample of the request, prompts in order and each prompt's
samples together, draws with seed s + k, as row k of `zoo.generate(...,
seed=s)` does), `user`. Requests with different samplers, temperatures,
`top_p` and seeds decode in one batch, each row by its own.
Both take the decoding controls of `zoo.generate`
(`zoo.generation.controls`): OpenAI's `presence_penalty`,
`frequency_penalty` ([-2, 2]) and `logit_bias` (at most `MAX_LOGIT_BIAS`
token ids to biases in [-100, 100]), and vLLM's extra fields
`repetition_penalty` (> 0) and `min_p` ([0, 1]); requests with different
controls decode in one batch, each row by its own.
Completions also take a prompt as token ids, a list of up to
`MAX_PROMPTS` prompts (one choice each, in order), `logprobs` (0-5) and
`echo`, as OpenAI's legacy completions define them: `logprobs: {tokens,
token_logprobs, top_logprobs, text_offset}`, each token's log-probability
under the model (before temperature and top-p), its `logprobs` most
likely alternatives (and itself) as `{token: logprob}`, and its offset in
the prompt followed by the answer; `echo: true` returns the prompt before
the answer, its tokens first in `logprobs` (the first one's log-probability
null), and with `max_tokens: 0` scores the prompt alone, which may then
fill the whole context (the harness's `local-completions` model asks for
`echo` with `logprobs`); `best_of`
(up to `--max-batch`) samples of which the `n` of the highest
log-probability per token are returned. Chat takes `logprobs: true` and
`top_logprobs` (0-20), in OpenAI's chat shape (`{"content": [{token,
logprob, bytes, top_logprobs}]}`). The log-probabilities are
`zoo.score`'s, of the prompt and the answer's tokens.
An encoder-decoder served (Marian, BART, the zoo's translator) reads a
completion's prompt as its source, tokenized by its source tokenizer, and
answers with the decoder's text (`zoo.stream` of the source, the sampler
and controls as a decoder-only model's), streamed too; it takes no `echo`,
`logprobs` or `best_of` beyond `n`, and no chat.
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
from base64 import b64encode
import hmac
import json
import math
import queue
import time
import uuid

import numpy as np
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from recipes.serve import web

from recipes.serve.scheduler import END, ERROR, PIECE, EmbedJob, Job, QueueFull, ScoreJob
from recipes.serve.web import Limits, RequestError, integer, is_int, known, number, read_json, short
from zoo.models import BertSentenceEncoder, EncoderDecoder
from zoo.text.tokens import decode

COMMON = ("model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "n", "user",
          "presence_penalty", "frequency_penalty", "logit_bias", "repetition_penalty", "min_p")
COMPLETION_FIELDS = COMMON + ("prompt", "echo", "logprobs", "best_of")
CHAT_FIELDS = COMMON + ("messages", "max_completion_tokens", "logprobs", "top_logprobs")
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
MAX_TOP_LOGPROBS = 20  # OpenAI's most `top_logprobs` of a chat answer
MAX_EMBEDDING_INPUTS = 256  # texts of one embeddings request
MAX_LOGIT_BIAS = 300  # OpenAI's most `logit_bias` entries
EMBEDDING_FIELDS = ("model", "input", "encoding_format", "user")


class Service:
    """One model behind the endpoints.

    Args:
        model: a decoder-only language model carrying its tokenizer; an
            encoder-decoder carrying its tokenizers (a completion's prompt
            is then the source, and its text the translation, or the
            answer); or a BERT sentence encoder (embeddings).
        name: the model's id in `/v1/models` and in every answer.
        scheduler: the `Scheduler` that decodes its requests.
        limits: the `recipes.serve.web.Limits` of a request's body.
    """

    def __init__(self, model, name, scheduler, limits=Limits()):
        self.model, self.name, self.scheduler, self.limits = model, name, scheduler, limits
        self.tokenizer = getattr(model, "tokenizer", None) or getattr(getattr(model, "backbone", None), "tokenizer", None)
        self.context = int(getattr(model, "backbone", model).max_sequence_length)
        self.created = int(time.time())
        self.encoder = isinstance(model, BertSentenceEncoder)  # embeddings, not text
        # An encoder-decoder reads the prompt as its source: the source tokenizer's ids, a whole context of them.
        self.translator = isinstance(model, EncoderDecoder)
        self.prompt_tokenizer = (model.source_tokenizer or self.tokenizer) if self.translator else self.tokenizer
        self.prompt_vocabulary = (model.source_vocabulary_size if self.translator
                                  else getattr(model, "vocabulary_size", None))
        self.max_prompt_tokens = self.context if self.translator else self.context - 1  # room for a new token

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
                "max_prompt_tokens": self.max_prompt_tokens,
                "max_messages": MAX_MESSAGES,
                "max_message_characters": self.max_characters,
                "max_stop_strings": MAX_STOP_STRINGS,
                "max_stop_characters": MAX_STOP_CHARACTERS,
                "max_n": scheduler.max_batch,
                "max_prompts": MAX_PROMPTS,
                "max_logprobs": MAX_LOGPROBS,
                "max_top_logprobs": MAX_TOP_LOGPROBS,
                "max_embedding_inputs": MAX_EMBEDDING_INPUTS,
                "max_logit_bias": MAX_LOGIT_BIAS,
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
        # A prompt only scored (echo, max_tokens 0) may fill the context: the model reads all its tokens.
        scoring = echo and body.get("max_tokens") == 0
        if self.translator and (echo or logprobs is not None):
            raise RequestError(f"{'echo' if echo else 'logprobs'}: not taken by an encoder-decoder served (its "
                               "prompt is the source, not the start of its answer)", "echo" if echo else "logprobs")
        prompts = self._prompts(body.get("prompt"), self.context if scoring else self.max_prompt_tokens)
        n, best_of = self._samples(body, chat=False)
        if self.translator and best_of > n:
            raise RequestError("best_of: ranks the samples by their log-probabilities, which an encoder-decoder "
                               "served does not score; ask for n samples", "best_of")
        if len(prompts) * best_of > MAX_PROMPTS:
            raise RequestError(f"prompt: {len(prompts)} prompts of {best_of} samples each; expected at most "
                               f"{MAX_PROMPTS} samples in all", "prompt")
        if body.get("stream") and (echo or logprobs is not None or len(prompts) > 1):
            raise RequestError("stream: true takes one prompt, without echo or logprobs", "stream")
        if scoring:
            jobs = [[] for _ in prompts]
        else:
            jobs = [[self._job(body, ids, COMPLETION_DEFAULT_TOKENS, sample=p * best_of + i) for i in range(best_of)]
                    for p, (_, ids) in enumerate(prompts)]
        return Completion([text for text, _ in prompts], [ids for _, ids in prompts], jobs, echo, logprobs, n)

    def _samples(self, body, chat):
        """`n` and `best_of` (`n` for chat), each in [1, --max-batch]: the
        samples of a prompt decode in one batch."""
        most = self.scheduler.max_batch
        n = integer(body, "n", 1, most, 1)
        best_of = n if chat else integer(body, "best_of", n, most, n)
        if best_of > 1 and body.get("stream"):
            raise RequestError("stream: true takes one sample (n and best_of 1)", "stream")
        return n, best_of

    def embedding_texts(self, body):
        """The texts of a /v1/embeddings request, checked, and their tokens in all."""
        known(body, EMBEDDING_FIELDS)
        self._check_common(body)
        if not self.encoder:
            raise RequestError(f"{self.name} is a language model; /v1/embeddings needs a sentence encoder served",
                               "model")
        if body.get("encoding_format", "float") not in ("float", "base64"):
            raise RequestError(f"encoding_format: expected \"float\" or \"base64\"; got "
                               f"{short(body.get('encoding_format'))}", "encoding_format")
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not 0 < len(texts) <= MAX_EMBEDDING_INPUTS or not all(
            isinstance(t, str) and 0 < len(t) <= self.max_characters for t in texts
        ):
            raise RequestError(
                f"input: expected a non-empty string, or a list of at most {MAX_EMBEDDING_INPUTS}, each of at most "
                f"{self.max_characters} characters; got {short(texts)}", "input")
        tokens = sum(min(len(self._ids(t, "input")) + 2, self.context) for t in texts)  # [CLS] text [SEP]
        return texts, tokens

    def _prompts(self, prompt, most):
        """`(text or None, ids)` of each prompt: a string, a list of token
        ids, or a list of either (at most `MAX_PROMPTS`), each of at most
        `most` tokens."""
        expected = ("expected a non-empty string, a list of token ids, or a list of at most "
                    f"{MAX_PROMPTS} of either")
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(is_int(t) for t in prompt)):
            prompt = [prompt]
        if not isinstance(prompt, list) or not 0 < len(prompt) <= MAX_PROMPTS:
            raise RequestError(f"prompt: {expected}; got {short(prompt)}", "prompt")
        prompts = []
        for one in prompt:
            if isinstance(one, str) and one:
                prompts.append((one, self.prompt_ids(one, "prompt", most)))
                self._check_length(prompts[-1][1], "prompt", most)
            elif isinstance(one, list) and one and all(is_int(t) for t in one):
                vocabulary = self.prompt_vocabulary
                if len(one) > most or not all(0 <= t < vocabulary for t in one):
                    raise RequestError(
                        f"prompt: expected at most {most} token ids, each in [0, {vocabulary}); "
                        f"got {short(one)}", "prompt", code="context_length_exceeded" if len(one) > most else None)
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

    def completion_logprobs(self, text, ids, new_ids, score, echo):
        """OpenAI's legacy `logprobs` object of one choice: `text` the
        prompt's (None for token ids), `score` the `Score` of the choice's
        tokens (None where there are none)."""
        prompt_text = text if text is not None else decode(self.tokenizer, ids)
        shown, before = (ids if echo else []) + new_ids, [] if echo else ids
        missing = len(shown) - (0 if score is None else len(score.token_ids))
        token_logprobs, top_logprobs = [None] * missing, [None] * missing
        for i, (token, value) in enumerate(zip(*(() if score is None else (score.token_ids, score.token_logprobs)))):
            alternatives = {decode(self.tokenizer, [int(t)]): float(v)
                            for t, v in zip(score.top_ids[i], score.top_logprobs[i])}
            alternatives.setdefault(decode(self.tokenizer, [int(token)]), float(value))
            token_logprobs.append(float(value))
            top_logprobs.append(alternatives)
        start = 0 if echo else len(prompt_text)
        return {"tokens": [decode(self.tokenizer, [t]) for t in shown], "token_logprobs": token_logprobs,
                "top_logprobs": top_logprobs,
                "text_offset": [start + o for o in _offsets(self.tokenizer, before, shown)]}

    def chat_logprobs(self, score):
        """OpenAI's chat `logprobs` object of one choice's answer."""
        def entry(token, value):
            text = decode(self.tokenizer, [int(token)])
            return {"token": text, "logprob": float(value), "bytes": list(text.encode("utf-8"))}

        content = []
        if score is not None:
            for i, (token, value) in enumerate(zip(score.token_ids, score.token_logprobs)):
                content.append({**entry(token, value), "top_logprobs": [
                    entry(t, v) for t, v in zip(score.top_ids[i], score.top_logprobs[i])]})
        return {"content": content, "refusal": None}

    def prompt_ids(self, text, field, most=None):
        """The ids of `text`, refused once it surely has more tokens than a
        prompt may (`most`; None: `max_prompt_tokens`): a long text is
        tokenized piece by piece (each piece cut before a space, so the
        pieces tokenize as the whole does, give or take a token at each
        cut), and only a text that fits is then tokenized whole."""
        most = self.max_prompt_tokens if most is None else most
        counted, pieces, start = 0, 0, 0
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
            return [int(t) for t in self.prompt_tokenizer(text)]
        except ValueError as error:
            raise RequestError(f"{field}: {error}", field) from None

    def chat(self, body):
        """The `Completion` of a /v1/chat/completions request."""
        known(body, CHAT_FIELDS)
        self._check_common(body)
        logprobs = body.get("logprobs", False)
        if not isinstance(logprobs, bool) and logprobs is not None:
            raise RequestError(f"logprobs: expected true or false; got {short(logprobs)}", "logprobs")
        top = integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0)
        if body.get("top_logprobs") is not None and not logprobs:
            raise RequestError("top_logprobs: needs logprobs true", "top_logprobs")
        if logprobs and body.get("stream"):
            raise RequestError("stream: true is not taken with logprobs", "stream")
        n, _ = self._samples(body, chat=True)
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
        jobs = [self._job(body, ids, None, sample=i) for i in range(n)]
        return Completion([None], [ids], [jobs], False, top if logprobs else None, n, chat=True)

    def _check_common(self, body):
        model = body.get("model")
        if model is not None and model != self.name:
            raise RequestError(f"model: {model!r} is not served here; expected {self.name!r} (GET /v1/models)",
                               "model", status=404, code="model_not_found")
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

    def _check_length(self, ids, field, most=None):
        most = self.max_prompt_tokens if most is None else most
        if len(ids) > most:
            raise RequestError(
                f"the prompt has {len(ids)} tokens; this model's context is {self.context} tokens, so a prompt may "
                f"have at most {most}", field,
            )

    def _job(self, body, ids, default_tokens, sample=0):
        """The `Job` of one sample of a prompt: the request's `sample`-th,
        which draws with its seed + `sample`."""
        self._check_length(ids, "messages" if default_tokens is None else "prompt")
        room = self.context - (1 if self.translator else len(ids))  # a translation starts from its start token
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = min(default_tokens or room, room)
        if not is_int(max_tokens) or not 1 <= max_tokens <= room:  # 0 only with echo: see `completion`
            prompt = "its start token" if self.translator else f"the prompt's {len(ids)}"
            raise RequestError(
                f"max_tokens: expected an integer in [1, {room}] (the context of {self.context} tokens less "
                f"{prompt}); got {short(max_tokens)}", "max_tokens"
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
        seed = None if seed is None else seed + sample
        return Job(ids, max_tokens, tuple(stop or ()), sampler, temperature, top_p, seed, self._controls(body))

    def _controls(self, body):
        """The decoding controls a request sets (`zoo.generation.controls`):
        OpenAI's penalties and `logit_bias`, vLLM's `repetition_penalty`
        and `min_p`."""
        controls = {}
        for name in ("presence_penalty", "frequency_penalty"):
            controls[name] = number(body, name, None, "a number in [-2, 2]", low=-2.0, high=2.0)
        controls["repetition_penalty"] = number(body, "repetition_penalty", None, "a number > 0", above=0.0)
        controls["min_p"] = number(body, "min_p", None, "a number in [0, 1]", low=0.0, high=1.0)
        bias = body.get("logit_bias")
        if bias is not None:
            vocabulary = self.model.vocabulary_size
            expected = (f"an object of at most {MAX_LOGIT_BIAS} token ids (in [0, {vocabulary})) to biases in "
                        "[-100, 100]")
            if not isinstance(bias, dict) or len(bias) > MAX_LOGIT_BIAS:
                raise RequestError(f"logit_bias: expected {expected}; got {short(bias)}", "logit_bias")
            checked = {}
            for token, value in bias.items():
                if not str(token).isdigit() or not int(token) < vocabulary or not isinstance(
                    value, (int, float)
                ) or isinstance(value, bool) or not -100 <= value <= 100:
                    raise RequestError(f"logit_bias: expected {expected}; got {short({token: value})}", "logit_bias")
                checked[int(token)] = float(value)
            controls["logit_bias"] = checked
        return {name: value for name, value in controls.items() if value is not None}


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

    async def answer(request, make):
        _authorize(request, api_key)
        body = await read_json(request, service.limits)
        if service.encoder:
            raise RequestError(f"{service.name} is a sentence encoder; it answers /v1/embeddings only", "model")
        completion = make(body)
        jobs = [job for jobs in completion.jobs for job in jobs]
        _submit(service.scheduler, jobs)
        if body.get("stream"):
            include_usage = (body.get("stream_options") or {}).get("include_usage", False)
            reply = _Reply(service.name, completion.chat, len(jobs[0].prompt_ids))
            return StreamingResponse(_stream(jobs[0], reply, include_usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await _complete(request, service, completion)

    async def completions(request):
        return await answer(request, service.completion)

    async def chat(request):
        return await answer(request, service.chat)

    async def embeddings(request):
        _authorize(request, api_key)
        body = await read_json(request, service.limits)
        texts, tokens = service.embedding_texts(body)
        job = EmbedJob(texts)
        _submit(service.scheduler, [job])
        disconnected = asyncio.ensure_future(_disconnected(request))
        try:
            result = await _result(job, disconnected)
        finally:
            disconnected.cancel()
            job.cancelled = True
        if result is None:
            return Response(status_code=499)  # the client left: nobody reads this
        if result[0] == ERROR:
            return _server_error(result[1])
        vectors = np.asarray(result[1][1], "float32")
        base64 = body.get("encoding_format") == "base64"  # the `openai` client's default: little-endian float32
        data = [{"object": "embedding", "index": i,
                 "embedding": b64encode(v.astype("<f4").tobytes()).decode() if base64 else v.tolist()}
                for i, v in enumerate(vectors)]
        return JSONResponse({"object": "list", "data": data, "model": service.name,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

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
        Route("/v1/embeddings", embeddings, methods=["POST"]),
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
    """A completions or chat request checked: per prompt its text (None
    for token ids), its ids and its `best_of` `Job`s (none with
    `max_tokens: 0`); `echo`, `logprobs` (None, or the alternatives asked
    for), `n` (the choices returned of each prompt's samples: those of the
    highest log-probability per token), and whether it is chat."""

    texts: list
    prompt_ids: list
    jobs: list
    echo: bool
    logprobs: object
    n: int = 1
    chat: bool = False


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


async def _complete(request, service, completion):
    """The non-streamed answer: each prompt's samples, then (for
    `logprobs` or `best_of`) one `ScoreJob` for the tokens of them all, and
    the `n` choices of each prompt. A client that leaves cancels the jobs,
    which frees their places in the queue or stops their decoding."""
    disconnected = asyncio.ensure_future(_disconnected(request))
    jobs = [job for jobs in completion.jobs for job in jobs]
    try:
        samples, completion_tokens = [], 0  # samples[p]: (text, new ids, finish reason) of each
        for ids, prompt_jobs in zip(completion.prompt_ids, completion.jobs):
            samples.append([("", [], "length")] * completion.n if not prompt_jobs else [])
            for job in prompt_jobs:
                result = await _result(job, disconnected)
                if result is None:
                    return Response(status_code=499)  # the client left: nobody reads this
                if result[0] == ERROR:
                    return _server_error(result[1])
                text, row = result[1]
                prompt = [] if service.translator else ids  # a translation's text is its own
                samples[-1].append((text, _answer_ids(service.tokenizer, prompt, job.token_ids, row, text),
                                    row.finish_reason))
                completion_tokens += row.completion_tokens
        scores = [[None] * len(prompt_samples) for prompt_samples in samples]
        ranked = any(len(prompt_samples) > completion.n for prompt_samples in samples)
        if completion.logprobs is not None or ranked:
            pairs = []
            for p, (ids, prompt_samples) in enumerate(zip(completion.prompt_ids, samples)):
                for c, (_, new_ids, _) in enumerate(prompt_samples):
                    full, split = ids + new_ids, 1 if completion.echo else len(ids)
                    if len(full) > split:
                        pairs.append((p, c, full[:split], full[split:]))
            if pairs:
                job = ScoreJob([pair[2] for pair in pairs], [pair[3] for pair in pairs], completion.logprobs or 0)
                jobs.append(job)
                _submit(service.scheduler, [job])
                result = await _result(job, disconnected)
                if result is None:
                    return Response(status_code=499)
                if result[0] == ERROR:
                    return _server_error(result[1])
                for (p, c, _, _), score in zip(pairs, result[1][1]):
                    scores[p][c] = score
        choices = []
        for p, (ids, prompt_samples) in enumerate(zip(completion.prompt_ids, samples)):
            order = sorted(range(len(prompt_samples)),
                           key=lambda c: -_per_token(scores[p][c], len(prompt_samples[c][1])))[: completion.n]
            for c in order if ranked else range(len(prompt_samples)):
                choices.append(_choice(service, completion, p, len(choices), prompt_samples[c], scores[p][c]))
        prompt_tokens = sum(len(ids) for ids in completion.prompt_ids)
        return JSONResponse({
            "id": ("chatcmpl-" if completion.chat else "cmpl-") + uuid.uuid4().hex,
            "object": "chat.completion" if completion.chat else "text_completion", "created": int(time.time()),
            "model": service.name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })
    finally:
        disconnected.cancel()
        for job in jobs:
            job.cancelled = True


def _per_token(score, new_tokens):
    """A sample's log-probability per token of its answer (-inf for none)."""
    if score is None or not new_tokens:
        return -math.inf
    return float(np.mean(score.token_logprobs[-new_tokens:]))


def _choice(service, completion, p, index, sample, score):
    """One choice of the answer: prompt `p`'s `sample` and its `Score`."""
    text, new_ids, finish_reason = sample
    ids, prompt_text = completion.prompt_ids[p], completion.texts[p]
    if completion.chat:
        logprobs = None if completion.logprobs is None else service.chat_logprobs(score)
        return {"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason,
                "logprobs": logprobs}
    logprobs = None
    if completion.logprobs is not None:
        logprobs = service.completion_logprobs(prompt_text, ids, new_ids, score, completion.echo)
    if completion.echo:
        text = (prompt_text if prompt_text is not None else decode(service.tokenizer, ids)) + text
    return {"index": index, "text": text, "finish_reason": finish_reason, "logprobs": logprobs}


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
