"""`POST /v1/embeddings`: sentence embeddings of a BERT sentence encoder
served (`zoo.embed`), as floats or base64 (the `openai` client's default:
little-endian float32)."""

import asyncio
from base64 import b64encode

import numpy as np
from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from zoo.serve import answers, protocol, validation
from zoo.serve.protocol import EmbeddingRequest
from zoo.serve.scheduler import ERROR, EmbedJob
from zoo.serve.service import submit
from zoo.serve.web import RequestError

router = APIRouter()


@router.post("/v1/embeddings", response_model=protocol.EmbeddingResponse,
             openapi_extra=validation.body_schema(EmbeddingRequest))
async def embeddings(request: Request, body: EmbeddingRequest = Depends(validation.json_body(EmbeddingRequest))):
    """Each input's sentence embedding."""
    service = request.app.state.service
    texts, tokens = check(service, body)
    job = EmbedJob(texts)
    submit(service.scheduler, [job])
    left = asyncio.ensure_future(answers.disconnected(request))
    try:
        outcome = await answers.result(job, left)
    finally:
        left.cancel()
        job.cancelled = True
    if outcome is None:
        return Response(status_code=answers.LEFT)
    if outcome[0] == ERROR:
        return validation.server_error(outcome[1])
    vectors = np.asarray(outcome[1][1], "float32")
    base64 = body.encoding_format == "base64"
    data = [protocol.Embedding(index=i, embedding=b64encode(v.astype("<f4").tobytes()).decode() if base64
                               else v.tolist()) for i, v in enumerate(vectors)]
    usage = protocol.EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
    return answers.json_response(protocol.EmbeddingResponse(data=data, model=service.name, usage=usage))


def check(service, request):
    """The texts of an embeddings request, and their tokens in all; a
    `RequestError` first for a model that embeds no sentences, or a text
    longer than its context could hold."""
    service.check_model(request)
    if not service.encoder:
        raise RequestError(f"{service.name} is a language model; /v1/embeddings needs a sentence encoder served",
                           "model")
    texts = [request.input] if isinstance(request.input, str) else request.input
    for text in texts:
        if len(text) > service.max_characters:
            raise RequestError(f"input: {len(text)} characters; expected at most {service.max_characters} in each "
                               "text", "input")
    tokens = sum(min(len(service.ids(t, "input")) + 2, service.context) for t in texts)  # [CLS] text [SEP]
    return texts, tokens
