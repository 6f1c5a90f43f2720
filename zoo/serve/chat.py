"""`POST /v1/chat/completions`: a conversation answered through the
checkpoint's chat template, with `logprobs` and `top_logprobs` in
OpenAI's chat shape."""

from fastapi import APIRouter, Depends, Request

from zoo.serve import answers, protocol, validation
from zoo.serve.protocol import ChatRequest
from zoo.serve.service import Plan, submit
from zoo.serve.web import RequestError

router = APIRouter()


@router.post("/v1/chat/completions", response_model=protocol.ChatResponse,
             openapi_extra=validation.body_schema(ChatRequest))
async def chat(request: Request, body: ChatRequest = Depends(validation.json_body(ChatRequest))):
    """A conversation answered (`stream: true`: as server-sent events)."""
    service = request.app.state.service
    plan = check(service, body)
    submit(service.scheduler, plan.jobs[0])
    return await answers.answer(request, service, plan)


def check(service, request):
    """The `Plan` of a chat request; a `RequestError` first where the model
    served cannot answer it (a conversation longer than its context, a
    model without a chat template)."""
    service.check_model(request)
    service.check_text_model()
    service.check_stream_options(request)
    logprobs = bool(request.logprobs)
    if request.top_logprobs is not None and not logprobs:
        raise RequestError("top_logprobs: needs logprobs true", "top_logprobs")
    if logprobs and request.stream:
        raise RequestError("stream: true is not taken with logprobs", "stream")
    n, _ = service.samples(request)
    messages = [message.model_dump() for message in request.messages]
    characters = sum(len(m["role"]) + len(m["content"]) for m in messages)
    if characters > service.max_characters:
        raise RequestError(
            f"messages: {characters} characters in all; a context of {service.context} tokens holds at most "
            f"{service.max_characters}", "messages", code="context_length_exceeded",
        )
    tokenizer = service.tokenizer
    if getattr(tokenizer, "chat_template", None) is None:
        raise RequestError(
            f"{service.name} has no chat template (a checkpoint's tokenizer_config.json `chat_template`); "
            "use /v1/completions with a plain prompt", "messages"
        )
    try:
        service.prompt_ids(tokenizer.render_chat(messages), "messages")
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    except ValueError as error:
        raise RequestError(f"messages: {error}", "messages") from None
    max_tokens = request.max_tokens
    if request.max_completion_tokens is not None:
        if max_tokens is not None:
            raise RequestError("max_tokens and max_completion_tokens: give one", "max_completion_tokens")
        max_tokens = request.max_completion_tokens
    jobs = [service.job(request, ids, max_tokens, None, "messages", sample=i) for i in range(n)]
    include_usage = request.stream_options is not None and request.stream_options.include_usage
    return Plan([None], [ids], [jobs], False, (request.top_logprobs or 0) if logprobs else None, n, chat=True,
                stream=request.stream, include_usage=include_usage)
