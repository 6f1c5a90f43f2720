"""The model behind `zoo serve`'s endpoints: what every endpoint module
shares (the model and its tokenizer, the scheduler, the limits), the
checks that depend on the model served (its context and vocabulary,
`--max-batch`), and the `Job`s of a checked request.

A long prompt is tokenized piece by piece and refused once it surely has
more tokens than the context holds, so a prompt of millions of characters
costs the tokenizing of a few thousand.
"""

import dataclasses
import time

from zoo.serve import protocol
from zoo.serve.scheduler import Job, QueueFull
from zoo.serve.web import Limits, RequestError, short
from zoo.text.tokens import decode

# A conversation longer than this many characters per token of context
# cannot fit: few tokens of any vocabulary are longer.
CHARACTERS_PER_TOKEN = 64
# A prompt is tokenized in pieces of about this many characters, each
# cut before a space, until it surely has more tokens than the context.
PIECE_CHARACTERS = 4096
RETRY_AFTER_SECONDS = 1


class Service:
    """One model behind the endpoints.

    Args:
        model: a decoder-only language model carrying its tokenizer; an
            encoder-decoder carrying its tokenizers (a completion's prompt
            is then the source, and its text the translation, or the
            answer); or a BERT sentence encoder (embeddings).
        name: the model's id in `/v1/models` and in every answer.
        scheduler: the `Scheduler` that decodes its requests.
        limits: the `zoo.serve.web.Limits` of a request's body.
    """

    def __init__(self, model, name, scheduler, limits=Limits()):
        from zoo.models import BertSentenceEncoder, EncoderDecoder

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

    @property
    def max_characters(self):
        """The most characters of a conversation's messages in all."""
        return CHARACTERS_PER_TOKEN * self.context

    def check_model(self, request):
        """Refuses (404) a request that names another model."""
        if request.model is not None and request.model != self.name:
            raise RequestError(f"model: {request.model!r} is not served here; expected {self.name!r} (GET /v1/models)",
                               "model", status=404, code="model_not_found")

    def check_text_model(self):
        """Refuses a completion or a chat of a sentence encoder."""
        if self.encoder:
            raise RequestError(f"{self.name} is a sentence encoder; it answers /v1/embeddings only", "model")

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
            counted += len(self.ids(text[start:end], field))
            pieces, start = pieces + 1, end
            if counted - 2 * pieces > most:
                raise RequestError(
                    f"{field}: more than {most} tokens in its first {start} of {len(text)} characters; this model's "
                    f"context is {self.context} tokens, so a prompt may have at most {most}", field,
                    code="context_length_exceeded",
                )
        return self.ids(text, field)

    def ids(self, text, field):
        """The prompt tokenizer's ids of `text`; a refusal naming `field` for text it cannot read."""
        try:
            return [int(t) for t in self.prompt_tokenizer(text)]
        except ValueError as error:
            raise RequestError(f"{field}: {error}", field) from None

    def check_length(self, ids, field, most=None):
        most = self.max_prompt_tokens if most is None else most
        if len(ids) > most:
            raise RequestError(
                f"the prompt has {len(ids)} tokens; this model's context is {self.context} tokens, so a prompt may "
                f"have at most {most}", field,
            )

    def samples(self, request, best_of=None):
        """`n` and `best_of` (`n` where None), each in [1, --max-batch]: the
        samples of a prompt decode in one batch."""
        most = self.scheduler.max_batch
        n = request.n
        if n > most:
            raise RequestError(f"n: expected an integer in [1, {most}]; got {n}", "n")
        best_of = n if best_of is None else best_of
        if not n <= best_of <= most:
            raise RequestError(f"best_of: expected an integer in [{n}, {most}]; got {best_of}", "best_of")
        if best_of > 1 and request.stream:
            raise RequestError("stream: true takes one sample (n and best_of 1)", "stream")
        return n, best_of

    def check_stream_options(self, request):
        if request.stream_options is not None and not request.stream:
            raise RequestError('stream_options: expected {"include_usage": true or false}, with stream true',
                               "stream_options")

    def job(self, request, ids, max_tokens, default_tokens, field, sample=0, constraint=None):
        """The `Job` of one sample of a prompt: the request's `sample`-th,
        which draws with its seed + `sample`; `max_tokens` None takes
        `default_tokens` (None: the room left) within the context;
        `constraint` the grammar its tokens follow (`zoo.serve.structured`)."""
        self.check_length(ids, field)
        room = self.context - (1 if self.translator else len(ids))  # a translation starts from its start token
        if max_tokens is None:
            max_tokens = min(default_tokens or room, room)
        if not 1 <= max_tokens <= room:  # 0 only with echo: see `completions`
            prompt = "its start token" if self.translator else f"the prompt's {len(ids)}"
            raise RequestError(
                f"max_tokens: expected an integer in [1, {room}] (the context of {self.context} tokens less "
                f"{prompt}); got {short(max_tokens)}", "max_tokens"
            )
        temperature = 1.0 if request.temperature is None else request.temperature
        top_p = 1.0 if request.top_p is None else request.top_p
        if temperature == 0.0:
            sampler, temperature = "greedy", 1.0
        else:
            sampler = "top_p" if top_p < 1.0 else "temperature"
        stop = [request.stop] if isinstance(request.stop, str) else request.stop
        seed = None if request.seed is None else request.seed + sample
        return Job(ids, max_tokens, tuple(stop or ()), sampler, temperature, top_p, seed, self.controls(request),
                   constraint=constraint)

    def controls(self, request):
        """The decoding controls a request sets (`zoo.generation.controls`):
        OpenAI's penalties and `logit_bias`, vLLM's `repetition_penalty`
        and `min_p`."""
        controls = {name: getattr(request, name) for name in
                    ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_p")}
        if request.logit_bias is not None:
            vocabulary = self.model.vocabulary_size
            for token in request.logit_bias:
                if not int(token) < vocabulary:
                    raise RequestError(
                        f"logit_bias: expected token ids in [0, {vocabulary}) (this model's vocabulary); got {token}",
                        "logit_bias")
            controls["logit_bias"] = {int(token): float(value) for token, value in request.logit_bias.items()}
        return {name: value for name, value in controls.items() if value is not None}

    def health(self):
        """The server's limits, its queue now, its times to the first token
        and its speculation (`GET /health`)."""
        scheduler = self.scheduler
        limits = protocol.HealthLimits(
            max_request_bytes=self.limits.max_request_bytes,
            read_timeout_seconds=self.limits.read_timeout,
            context_tokens=self.context,
            max_prompt_tokens=self.max_prompt_tokens,
            max_messages=protocol.MAX_MESSAGES,
            max_message_characters=self.max_characters,
            max_stop_strings=protocol.MAX_STOP_STRINGS,
            max_stop_characters=protocol.MAX_STOP_CHARACTERS,
            max_n=scheduler.max_batch,
            max_prompts=protocol.MAX_PROMPTS,
            max_logprobs=protocol.MAX_LOGPROBS,
            max_top_logprobs=protocol.MAX_TOP_LOGPROBS,
            max_embedding_inputs=protocol.MAX_EMBEDDING_INPUTS,
            max_logit_bias=protocol.MAX_LOGIT_BIAS,
            max_batch=scheduler.max_batch,
            max_batches=scheduler.max_batches,
            max_queue=scheduler.max_queue,
        )
        measures = scheduler.measures
        return protocol.Health(model=self.name, waiting=scheduler.waiting, running=scheduler.running, limits=limits,
                               slots=scheduler.slots_health(), time_to_first_token=measures.percentiles(),
                               speculation=measures.speculation_totals() if scheduler.speculation else None)

    def decode(self, ids):
        return decode(self.tokenizer, ids)


@dataclasses.dataclass
class Plan:
    """What a checked completions or chat request asks of the scheduler:
    per prompt its text (None for token ids), its ids and its `best_of`
    `Job`s (none with `max_tokens: 0`); `echo`, `logprobs` (None, or the
    alternatives asked for), `n` (the choices returned of each prompt's
    samples: those of the highest log-probability per token), whether it
    is chat, whether it streams (with the usage last), and how its calls
    are read (`zoo.serve.tool_calls.Parsing`; None: no tools offered)."""

    texts: list
    prompt_ids: list
    jobs: list
    echo: bool
    logprobs: object
    n: int = 1
    chat: bool = False
    stream: bool = False
    include_usage: bool = False
    tools: object = None


def submit(scheduler, jobs):
    """Queues `jobs`, all or none: a full queue refuses the request (429)."""
    try:
        for job in jobs:
            scheduler.submit(job)
    except QueueFull as error:
        for job in jobs:
            job.cancelled = True  # those already queued leave it
        raise RequestError(f"the server is busy: {error}; retry after {RETRY_AFTER_SECONDS} s", status=429,
                           code="queue_full", headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None


def _cut(text, end):
    """Where to end a piece of `text` near `end`: before the last space of
    the piece's second half, else at `end`."""
    space = max(text.rfind(" ", end - PIECE_CHARACTERS // 2, end), text.rfind("\n", end - PIECE_CHARACTERS // 2, end))
    return space if space > end - PIECE_CHARACTERS // 2 else end
