"""`POST /v1/completions`: OpenAI's legacy completions of a prompt (a
string, token ids, or a list of up to `MAX_PROMPTS` of either), with
`echo`, `logprobs`, `best_of` and the structure the answer follows
(`response_format`, vLLM's `guided_*` and `structured_outputs`:
`zoo.serve.structured`); an encoder-decoder served reads the prompt as
its source."""

from fastapi import APIRouter, Depends, Request

from zoo.serve import answers, protocol, structured, validation
from zoo.serve.protocol import COMPLETION_DEFAULT_TOKENS, MAX_PROMPTS, CompletionRequest
from zoo.serve.service import Plan, submit
from zoo.serve.web import RequestError, short

router = APIRouter()


@router.post("/v1/completions", response_model=protocol.CompletionResponse,
             openapi_extra=validation.body_schema(CompletionRequest))
async def completions(request: Request, body: CompletionRequest = Depends(validation.json_body(CompletionRequest))):
    """A prompt continued (`stream: true`: as server-sent events)."""
    service = request.app.state.service
    plan = check(service, body)
    submit(service.scheduler, [job for jobs in plan.jobs for job in jobs])
    return await answers.answer(request, service, plan)


def check(service, request):
    """The `Plan` of a completions request; a `RequestError` first where
    the model served cannot answer it."""
    service.check_model(request)
    service.check_text_model()
    service.check_stream_options(request)
    echo, logprobs = request.echo, request.logprobs
    # A prompt only scored (echo, max_tokens 0) may fill the context: the model reads all its tokens.
    scoring = echo and request.max_tokens == 0
    if service.translator and (echo or logprobs is not None):
        raise RequestError(f"{'echo' if echo else 'logprobs'}: not taken by an encoder-decoder served (its "
                           "prompt is the source, not the start of its answer)", "echo" if echo else "logprobs")
    prompts = _prompts(service, request.prompt, service.context if scoring else service.max_prompt_tokens)
    n, best_of = service.samples(request, request.best_of)
    if service.translator and best_of > n:
        raise RequestError("best_of: ranks the samples by their log-probabilities, which an encoder-decoder "
                           "served does not score; ask for n samples", "best_of")
    if len(prompts) * best_of > MAX_PROMPTS:
        raise RequestError(f"prompt: {len(prompts)} prompts of {best_of} samples each; expected at most "
                           f"{MAX_PROMPTS} samples in all", "prompt")
    if request.stream and (echo or logprobs is not None or len(prompts) > 1):
        raise RequestError("stream: true takes one prompt, without echo or logprobs", "stream")
    constraint = structured.constraint(request)
    if scoring:
        jobs = [[] for _ in prompts]
    else:
        jobs = [[service.job(request, ids, request.max_tokens, COMPLETION_DEFAULT_TOKENS, "prompt",
                             sample=p * best_of + i, constraint=constraint) for i in range(best_of)]
                for p, (_, ids) in enumerate(prompts)]
    include_usage = request.stream_options is not None and request.stream_options.include_usage
    return Plan([text for text, _ in prompts], [ids for _, ids in prompts], jobs, echo, logprobs, n,
                stream=request.stream, include_usage=include_usage)


def _prompts(service, prompt, most):
    """`(text or None, ids)` of each prompt, each of at most `most` tokens."""
    if isinstance(prompt, str) or all(isinstance(t, int) for t in prompt):
        prompt = [prompt]
    prompts = []
    for one in prompt:
        if isinstance(one, str):
            prompts.append((one, service.prompt_ids(one, "prompt", most)))
            service.check_length(prompts[-1][1], "prompt", most)
            continue
        vocabulary = service.prompt_vocabulary
        if len(one) > most or not all(t < vocabulary for t in one):
            raise RequestError(f"prompt: expected at most {most} token ids, each in [0, {vocabulary}); "
                               f"got {short(one)}", "prompt", code="context_length_exceeded" if len(one) > most else None)
        prompts.append((None, list(one)))
    return prompts
