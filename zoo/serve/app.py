"""The OpenAI-compatible endpoints of `zoo serve`, as a FastAPI app: one
module per endpoint, the requests and responses declared in
`zoo.serve.protocol`.

    GET  /v1/models              the one model served
    POST /v1/completions         a prompt continued
    POST /v1/chat/completions    a conversation answered, through the
                                 checkpoint's chat template
    POST /v1/embeddings          sentence embeddings (a BERT sentence
                                 encoder served, `zoo.embed`)
    GET  /health                 the server's limits, its queue and slots now,
                                 its times to the first token
    GET  /metrics                the server's measures, in Prometheus' text
                                 format (`zoo.serve.metrics`)

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
`{"error": {"message", "type", "param", "code"}}`, `param` naming the
field at fault: 400 for a bad request (a field the request's model does
not declare, or a value outside its bounds, as `zoo.serve.protocol`
declares them; or one the model served cannot take),
401 for a wrong or missing API key, 404 for another model's name, 408
for a body that did not arrive within `--read-timeout`, 413 for a body
over `--max-request-bytes`, 429 (with `Retry-After`) when `--max-queue`
requests already wait.

Every request is bounded before the model sees it: the body is read as a
stream up to its limit (`zoo.serve.web`), a prompt is tokenized piece
by piece and refused once it has more tokens than the context holds
(a prompt of millions of characters costs the tokenizing of a few
thousand), a conversation has at most `MAX_MESSAGES` messages of at most
`CHARACTERS_PER_TOKEN` characters per token of context in all, and `stop`
at most 4 strings of at most `MAX_STOP_CHARACTERS`.
"""

import hmac

from fastapi import Depends, Request

from zoo.serve import chat, completions, embeddings, health, models, protocol, tokenize, validation
from zoo.serve.web import RequestError


def create_app(service, api_key=None):
    """The FastAPI app of a `zoo.serve.service.Service`; with `api_key`,
    every request but `GET /health`, `GET /metrics` (and the OpenAPI pages) must carry
    `Authorization: Bearer API_KEY`."""
    app = validation.application(
        "zoo serve", f"An OpenAI-compatible server over {service.name}.", service.limits, protocol.REQUESTS)
    app.state.service, app.state.api_key = service, api_key
    app.include_router(health.router)
    for endpoint in (models, completions, chat, embeddings, tokenize):
        app.include_router(endpoint.router, dependencies=[Depends(authorize)])
    return app


def authorize(request: Request):
    """Refuses (401) a request without the API key, where one is set;
    before its body is read."""
    api_key = request.app.state.api_key
    if api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, key = given.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(key.strip().encode(), api_key.encode()):
        return
    message = "missing API key: expected the header Authorization: Bearer KEY" if not given else "wrong API key"
    raise RequestError(message, status=401, code="invalid_api_key")
