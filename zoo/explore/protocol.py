"""The requests and answers of `zoo explore`'s JSON endpoints, as pydantic
models on `zoo serve`'s `Request` (strict JSON types, no undeclared field).

A request's fields and bounds are declared here, once: the app validates
each body against its model (`zoo.serve.validation.json_body`), and
`/openapi.json` and `/docs` describe them. A field's `description` is what
it expects; a refusal says it: `top_p: expected a number in (0, 1]; got
1.5`. What depends on the model explored (`top_k` and `ids` within its
vocabulary, `position` within `ids`, text its tokenizer knows, the
endpoint of its kind) is checked by `zoo.explore.explorer.Explorer`.
"""

from typing import Annotated, Literal

from pydantic import Field

from zoo.generation.samplers import SAMPLERS as GENERATION_SAMPLERS
from zoo.serve.protocol import Request, Response

SAMPLERS = tuple(s for s in GENERATION_SAMPLERS if s != "beam")  # the page samples one sequence
MAX_NEW_TOKENS = 1024
MAX_CHARACTERS = 10_000  # of a prompt, source or sentence: the page is for reading, not bulk work
MAX_SEED = 2**31 - 1
MAX_BEAMS = 16
DEFAULT_TOP_K = 40  # or the vocabulary's size, where smaller

# A sentence to translate or classify: some character that is not a space.
Sentence = Annotated[str, Field(min_length=1, max_length=MAX_CHARACTERS, pattern=r"\S")]
SENTENCE = f"a non-empty sentence (not only spaces) of at most {MAX_CHARACTERS} characters"


# --- Requests ------------------------------------------------------------------------------


class GenerateRequest(Request):
    """`POST /api/generate`: a language model's prompt continued, token by
    token, as `zoo.generate` samples it."""

    prompt: str = Field(min_length=1, max_length=MAX_CHARACTERS,
                        description=f"a non-empty string of at most {MAX_CHARACTERS} characters")
    max_new_tokens: int = Field(50, ge=1, le=MAX_NEW_TOKENS, description=f"an integer in [1, {MAX_NEW_TOKENS}]")
    sampler: Literal[SAMPLERS] = Field("greedy", description=f"one of {', '.join(SAMPLERS)}")
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False, description="a number > 0")
    top_k: int | None = Field(None, ge=1, description=f"an integer in [1, the vocabulary's size] (null: "
                                                      f"{DEFAULT_TOP_K}, or the vocabulary's size where smaller)")
    top_p: float = Field(0.9, gt=0, le=1, allow_inf_nan=False, description="a number in (0, 1]")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description=f"null or an integer in [0, {MAX_SEED}]")


class InspectRequest(Request):
    """`POST /api/inspect`: a language model's attention and next-token
    probabilities at one position of a sequence."""

    ids: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, description="a non-empty list of token ids, each in [0, the vocabulary's size)")
    position: int = Field(ge=0, description="an integer in [0, len(ids) - 1], the index of a token in ids")


class TranslateRequest(Request):
    """`POST /api/translate`: a translator's translation of a sentence, as
    `zoo.translate` makes it, and its cross-attention."""

    source: Sentence = Field(description=SENTENCE)
    num_beams: int = Field(4, ge=1, le=MAX_BEAMS, description=f"an integer in [1, {MAX_BEAMS}] (1: greedy)")
    length_penalty: float = Field(0.6, allow_inf_nan=False,
                                  description="a number, the exponent of the length that divides a beam's score")


class ClassifyRequest(Request):
    """`POST /api/classify`: a classifier's label probabilities of a
    sentence and its [CLS] attention."""

    text: Sentence = Field(description=SENTENCE)


REQUESTS = (GenerateRequest, InspectRequest, TranslateRequest, ClassifyRequest)


# --- Answers -------------------------------------------------------------------------------


class Card(Response):
    """The model card: family, preset, sizes, tokenizer and, for a run
    folder, its recipe and final figures."""

    family: str
    task: str | None
    preset: str | None
    parameters: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    context: int
    tokenizer: str  # its class and vocabulary size
    recipe: str | None
    results: dict[str, int | float]


class Info(Response):
    """`GET /api/info`: the model's kind and sizes, and its card."""

    card: Card
    kind: Literal["language_model", "translator", "classifier"]
    name: str
    model: str  # its class
    num_layers: int
    num_heads: int
    context: int
    vocabulary_size: int
    labels: list[str] | None  # a classifier's, in class order
    max_new_tokens: int


class Token(Response):
    id: int
    text: str


class Candidate(Token):
    probability: float


class PromptEvent(Response):
    """`/api/generate`'s first event, `prompt`: the prompt's tokens."""

    tokens: list[Token]


class TokenEvent(Candidate):
    """A `token` event of `/api/generate`: a new token, its index in the
    sequence and the model's probability of it."""

    index: int


class DoneEvent(Response):
    """`/api/generate`'s last event, `done`: the whole sequence."""

    ids: list[int]
    text: str


class ErrorEvent(Response):
    """`/api/generate`'s last event where the model failed after the stream
    began (its status was sent): what went wrong."""

    error: str


class InspectResponse(Response):
    """The attention of the token at `position` over its context window
    (`start` its first index, at most the context long), for every block
    and head: (N, h, W) nested lists; the 10 likeliest next tokens, best
    first; the id that came next, or null."""

    position: int
    start: int
    tokens: list[Token]
    attention: list[list[list[float]]]
    top: list[Candidate]
    next: int | None


class TranslateResponse(Response):
    """The translation; the source tokens (S); the token each decoder
    position produced (T); the decoder's cross-attention, (N, h, T, S)
    nested lists."""

    translation: str
    source_tokens: list[Token]
    target_tokens: list[Token]
    cross: list[list[list[list[float]]]]


class ClassifyResponse(Response):
    """The labels and their probabilities, the likeliest label, the tokens
    read ([CLS] ... [SEP]) and the [CLS] position's attention over them,
    (N, h, T) nested lists."""

    labels: list[str]
    probabilities: list[float]
    label: str
    tokens: list[Token]
    attention: list[list[list[float]]]
