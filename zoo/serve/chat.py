"""`POST /v1/chat/completions`: a conversation answered through the
checkpoint's chat template, with `logprobs` and `top_logprobs` in
OpenAI's chat shape, a `response_format`, and `tools`: offered to the
template's `tools`, and the model's calls read back into `tool_calls`
(`zoo.serve.tool_calls`)."""

import json

from fastapi import APIRouter, Depends, Request

from zoo.serve import answers, protocol, structured, tool_calls, validation
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
    messages = template_messages(request.messages)
    tools = [tool.model_dump(exclude_none=True) for tool in request.tools] if request.tools else None
    characters = sum(len(m["role"]) + len(m.get("content") or "") + (len(json.dumps(m["tool_calls"])) if "tool_calls" in m else 0)
                     for m in messages) + (len(json.dumps(tools)) if tools else 0)
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
    parsing, constraint = _tools(service, request, tools)
    answer_constraint = structured.constraint(request)
    if constraint is not None and answer_constraint is not None:
        raise RequestError("tool_choice: a required or named call is its own structure; drop the answer's "
                           "structure (response_format, guided_*, structured_outputs) or choose \"auto\"",
                           "tool_choice")
    constraint = constraint if constraint is not None else answer_constraint
    try:
        service.prompt_ids(tokenizer.render_chat(messages, tools=tools), "messages")
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=tools)
    except ValueError as error:
        raise RequestError(f"messages: {error}", "messages") from None
    max_tokens = request.max_tokens
    if request.max_completion_tokens is not None:
        if max_tokens is not None:
            raise RequestError("max_tokens and max_completion_tokens: give one", "max_completion_tokens")
        max_tokens = request.max_completion_tokens
    jobs = [service.job(request, ids, max_tokens, None, "messages", sample=i, constraint=constraint)
            for i in range(n)]
    include_usage = request.stream_options is not None and request.stream_options.include_usage
    return Plan([None], [ids], [jobs], False, (request.top_logprobs or 0) if logprobs else None, n, chat=True,
                stream=request.stream, include_usage=include_usage, tools=parsing)


def template_messages(messages):
    """The messages as a chat template reads them (transformers'
    convention): a call's `arguments` an object, not OpenAI's JSON text,
    and the null content of a turn that calls an empty string (templates
    test it, or add it to a string)."""
    rendered = []
    for i, message in enumerate(messages):
        one = {"content": "", **message.model_dump(exclude_none=True)}
        for j, call in enumerate(one.get("tool_calls", ())):
            try:
                arguments = json.loads(call["function"]["arguments"])
            except ValueError:
                raise RequestError(f"messages[{i}].tool_calls[{j}].function.arguments: expected a JSON object's "
                                   f"text; got {call['function']['arguments'][:40]!r}", "messages") from None
            call["function"]["arguments"] = arguments
        rendered.append(one)
    return rendered


def _tools(service, request, tools):
    """`(parsing, constraint)`: how the answer's calls are read (None:
    they are not, with no tools or `tool_choice` "none"), and the grammar
    of a required or named call (None for "auto")."""
    choice = request.tool_choice
    if not tools:
        if choice is not None and choice != "none":
            raise RequestError("tool_choice: needs tools, the functions the model may call", "tool_choice")
        return None, None
    if choice == "none":
        return None, None
    functions = [tool["function"] for tool in tools]
    format = tool_calls.format_of(service.tokenizer.chat_template)
    parsing = tool_calls.Parsing(format, tuple(function["name"] for function in functions))
    if choice is None or choice == "auto":
        return parsing, None
    if choice != "required":
        functions = [function for function in functions if function["name"] == choice.function.name]
        if not functions:
            raise RequestError(f"tool_choice: {choice.function.name!r} is not among the tools; expected one of "
                               f"{', '.join(parsing.names)}", "tool_choice")
    for i, tool in enumerate(tools):
        if tool["function"] in functions and tool["function"].get("parameters") is not None:
            structured.grammar(f"tools[{i}].function.parameters", json_schema=tool["function"]["parameters"])
    marker_id = None
    if format == "mistral":
        try:
            marker_id = service.tokenizer.token_to_id(tool_calls.MISTRAL_START)
        except (ValueError, KeyError, AttributeError):
            pass
    return parsing, structured.grammar("tools", grammar=tool_calls.call_grammar(functions, format, marker_id))
