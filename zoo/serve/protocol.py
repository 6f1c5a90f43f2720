"""The requests and responses of `zoo serve`, as pydantic models (vLLM's
`protocol.py` is the model), OpenAI's error shape among them.

A request's fields and their bounds are declared here, once: the server
validates each body against its model (`parse`), `/openapi.json` and the
`/docs` page describe them, and a field the model does not declare is
refused by name, as OpenAI refuses it. What a model cannot declare (a
bound that depends on the model served: its context, vocabulary,
`--max-batch`; a field taken by some models only) is checked by the
endpoint's module.

A field's `description` is what the field expects; a refusal says it
(`zoo.serve.validation`): `temperature: expected a number in [0, 2] (0:
greedy); got "hot"`.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_PROMPTS = 64  # prompts of one completions request
MAX_LOGPROBS = 5  # OpenAI's most `logprobs` of a completion
MAX_TOP_LOGPROBS = 20  # OpenAI's most `top_logprobs` of a chat answer
MAX_EMBEDDING_INPUTS = 256  # texts of one embeddings request
MAX_LOGIT_BIAS = 300  # OpenAI's most `logit_bias` entries
MAX_MESSAGES = 1024
MAX_TOOLS = 128  # OpenAI's most `tools` of a chat request
MAX_STOP_STRINGS, MAX_STOP_CHARACTERS = 4, 256
COMPLETION_DEFAULT_TOKENS = 16  # OpenAI's default `max_tokens` of a completion


class Request(BaseModel):
    """A request body: strict JSON types (no "1" for 1, no true for 1), no
    field that is not declared."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Response(BaseModel):
    pass


# --- Requests ------------------------------------------------------------------------------

Text = Annotated[str, Field(min_length=1)]
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
Stop = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARACTERS)]
Penalty = Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
Bias = dict[Annotated[str, Field(pattern=r"^\d+$")], Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]]


class StreamOptions(Request):
    include_usage: bool = Field(False, description="true or false: a last chunk with the usage")


class JsonSchema(Request):
    """OpenAI's `response_format.json_schema`: a named JSON schema."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: dict | bool | None = Field(None, alias="schema")
    strict: bool | None = None


class TextFormat(Request):
    type: Literal["text"]


class JsonObjectFormat(Request):
    type: Literal["json_object"]


class JsonSchemaFormat(Request):
    type: Literal["json_schema"]
    json_schema: JsonSchema


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]


class StructuredOutputs(Request):
    """vLLM's `structured_outputs`: one of a JSON schema, a regular
    expression, a list of choices, a grammar (Lark or GBNF), or any JSON
    object."""

    json_: dict | bool | str | None = Field(None, alias="json")
    regex: str | None = None
    choice: Annotated[list[str], Field(min_length=1)] | None = None
    grammar: str | None = None
    json_object: bool | None = None


class Sampling(Request):
    """The fields that completions and chat share: the model, the answer's
    length, the sampler, the decoding controls of `zoo.generate`, and the
    structure the answer follows (OpenAI's `response_format`, vLLM's
    `guided_*` and `structured_outputs`: at most one of them)."""

    model: str | None = Field(None, description="the model's id (GET /v1/models)")
    max_tokens: int | None = Field(
        None, ge=0, description="an integer >= 1, the answer's most tokens (0 with echo: the prompt scored alone)")
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False,
                                      description="a number in [0, 2] (0: greedy)")
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False, description="a number in (0, 1]")
    seed: int | None = Field(None, ge=-(2**63), lt=2**63, description="an integer")
    stop: Stop | Annotated[list[Stop], Field(max_length=MAX_STOP_STRINGS)] | None = Field(
        None, description=f"a string or a list of at most {MAX_STOP_STRINGS} non-empty strings of at most "
        f"{MAX_STOP_CHARACTERS} characters")
    stream: bool = Field(False, description="true or false: server-sent events as the tokens come")
    stream_options: StreamOptions | None = Field(None, description='{"include_usage": true or false}, with stream true')
    n: int = Field(1, ge=1, description="an integer in [1, --max-batch], the answers of each prompt")
    user: str | None = Field(None, description="a string")
    presence_penalty: Penalty | None = Field(None, description="a number in [-2, 2]")
    frequency_penalty: Penalty | None = Field(None, description="a number in [-2, 2]")
    logit_bias: Bias | None = Field(
        None, max_length=MAX_LOGIT_BIAS,
        description=f"an object of at most {MAX_LOGIT_BIAS} token ids to biases in [-100, 100]")
    repetition_penalty: float | None = Field(None, gt=0, allow_inf_nan=False, description="a number > 0")
    min_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, description="a number in [0, 1]")
    response_format: ResponseFormat | None = Field(
        None, description='{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": '
        '{"name": str, "schema": {...}, "strict": bool}}')
    guided_json: dict | bool | str | None = Field(None, description="a JSON schema (an object, or its JSON text)")
    guided_regex: str | None = Field(None, description="a regular expression the whole answer matches")
    guided_choice: Annotated[list[str], Field(min_length=1)] | None = Field(
        None, description="a non-empty list of strings, the answers allowed")
    guided_grammar: str | None = Field(None, description="a grammar (Lark or GBNF) the answer follows")
    structured_outputs: StructuredOutputs | None = Field(
        None, description='{"json": schema} or {"regex": str} or {"choice": [str, ...]} or {"grammar": str} or '
        '{"json_object": true}')


class CompletionRequest(Sampling):
    """`POST /v1/completions`: OpenAI's legacy completions."""

    prompt: Text | TokenIds | Annotated[list[Text | TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)] = Field(
        description=f"a non-empty string, a list of token ids, or a list of at most {MAX_PROMPTS} of either")
    echo: bool = Field(False, description="true or false: the prompt before the answer")
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                 description=f"null or an integer in [0, {MAX_LOGPROBS}], the alternatives shown")
    best_of: int | None = Field(None, ge=1, description="an integer in [n, --max-batch], the samples ranked")


class FunctionCall(Request):
    name: str = Field(min_length=1)
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(Request):
    """A call an assistant made (an earlier turn's `tool_calls`)."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message of a conversation: `content` a string (null for an
    assistant turn that made `tool_calls`); a `tool` message answers the
    call named by `tool_call_id`. Other fields reach the chat template."""

    model_config = ConfigDict(extra="allow", strict=True)
    role: str
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content(self):
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("a message's content is a string (null only beside an assistant's tool_calls)")
        return self


class Function(Request):
    """A function a model may call: its JSON schema `parameters`."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class Tool(Request):
    type: Literal["function"]
    function: Function


class FunctionName(Request):
    name: str


class NamedToolChoice(Request):
    type: Literal["function"]
    function: FunctionName


class ChatRequest(Sampling):
    """`POST /v1/chat/completions`: a conversation answered through the
    checkpoint's chat template."""

    messages: list[ChatMessage] = Field(
        min_length=1, max_length=MAX_MESSAGES,
        description=f'a non-empty list of at most {MAX_MESSAGES} {{"role": str, "content": str}} objects')
    max_completion_tokens: int | None = Field(None, ge=1, description="an integer >= 1, the answer's most tokens")
    logprobs: bool | None = Field(False, description="true or false: each token's log-probability")
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS,
                                     description=f"an integer in [0, {MAX_TOP_LOGPROBS}], with logprobs true")
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = Field(
        None, description=f'a list of at most {MAX_TOOLS} {{"type": "function", "function": {{"name": str, '
        '"description": str, "parameters": {...}}} objects')
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description='"none", "auto", "required" or {"type": "function", "function": {"name": str}}, with tools')
    parallel_tool_calls: bool | None = Field(None, description="true or false")


class EmbeddingRequest(Request):
    """`POST /v1/embeddings`: sentence embeddings of a BERT sentence encoder."""

    model: str | None = Field(None, description="the model's id (GET /v1/models)")
    input: Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)] = Field(
        description=f"a non-empty string, or a list of at most {MAX_EMBEDDING_INPUTS} of them")
    encoding_format: Literal["float", "base64"] = Field("float", description='"float" or "base64"')
    user: str | None = Field(None, description="a string")


class TokenizeRequest(Request):
    """`POST /tokenize`, as vLLM's."""

    model: str | None = Field(None, description="the model's id (GET /v1/models)")
    prompt: str = Field(description="a string")
    add_special_tokens: bool = Field(False, description="true or false")


class DetokenizeRequest(Request):
    """`POST /detokenize`, as vLLM's."""

    model: str | None = Field(None, description="the model's id (GET /v1/models)")
    tokens: list[Annotated[int, Field(ge=0)]] = Field(description="a list of token ids")


# --- Responses ---------------------------------------------------------------------------------

FinishReason = Literal["stop", "length", "tool_calls"]


class PromptTokensDetails(Response):
    cached_tokens: int = 0  # the prompt's tokens whose keys and values came from the prefix cache


class Usage(Response):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = PromptTokensDetails()


class CompletionLogprobs(Response):
    """OpenAI's legacy `logprobs` of a choice: each token, its
    log-probability, its alternatives `{token: logprob}`, its offset in
    the text."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(Response):
    index: int
    text: str
    finish_reason: FinishReason | None
    logprobs: CompletionLogprobs | None = None


class CompletionResponse(Response):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TopLogprob(Response):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(Response):
    content: list[TokenLogprob]
    refusal: None = None


class CalledFunction(Response):
    name: str
    arguments: str  # JSON text


class CalledTool(Response):
    """A call the answer makes: OpenAI's `tool_calls` entry."""

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class AssistantMessage(Response):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[CalledTool] | None = None


class ChatChoice(Response):
    index: int
    message: AssistantMessage
    finish_reason: FinishReason | None
    logprobs: ChatLogprobs | None = None


class ChatResponse(Response):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class FunctionDelta(Response):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(Response):
    """A piece of a streamed call: its first names it (`id`, `type`,
    `function.name`), those after add to `function.arguments`."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta


class Delta(Response):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(Response):
    index: int
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatChunk(Response):
    """One server-sent event of a streamed chat answer."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionChunk(CompletionResponse):
    """One server-sent event of a streamed completion: OpenAI's legacy
    chunks are `text_completion` objects."""


class Embedding(Response):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # base64: little-endian float32


class EmbeddingUsage(Response):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(Response):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ModelCard(Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "zoo"
    max_model_len: int


class ModelList(Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResponse(Response):
    tokens: list[int]
    count: int
    max_model_len: int


class DetokenizeResponse(Response):
    prompt: str


class TokenizerInfo(Response):
    bos_token: str | None
    eos_token: str | None
    pad_token: str | None
    chat_template: str | None
    model_max_length: int
    tokenizer_class: str


class HealthLimits(Response):
    max_request_bytes: int
    read_timeout_seconds: float
    context_tokens: int
    max_prompt_tokens: int
    max_messages: int
    max_message_characters: int
    max_stop_strings: int
    max_stop_characters: int
    max_n: int
    max_prompts: int
    max_logprobs: int
    max_top_logprobs: int
    max_embedding_inputs: int
    max_logit_bias: int
    max_batch: int
    max_batches: int
    max_queue: int


class SlotsHealth(Response):
    slots: int
    in_use: int
    prefill_chunk: int | None
    prefix_cache_tokens: int  # the bound
    prefix_cache_held: int  # the tokens held now
    prefix_cache_hit_rate: float  # of the blocks looked up


class TimeToFirstToken(Response):
    """The latest requests' times from their arrival at the model's queue
    to their first new token, in seconds."""

    requests: int  # how many of the latest (at most 1,000) the percentiles read
    p50: float | None
    p90: float | None
    p99: float | None


class SpeculationHealth(Response):
    rounds: int  # verification steps since the start
    proposed: int  # tokens proposed (drafted or looked up)
    accepted: int  # of them, accepted
    accepted_per_round: float  # accepted tokens per verification step


class Health(Response):
    status: Literal["ok"] = "ok"
    model: str
    waiting: int
    running: int
    slots: SlotsHealth | None = None  # the slots (continuous batching), when the model decodes in them
    time_to_first_token: TimeToFirstToken
    speculation: SpeculationHealth | None = None  # when the server speculates (--draft, --prompt-lookup)
    limits: HealthLimits


class ErrorInfo(Response):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(Response):
    """OpenAI's error shape."""

    error: ErrorInfo


REQUESTS = (CompletionRequest, ChatRequest, EmbeddingRequest, TokenizeRequest, DetokenizeRequest)
