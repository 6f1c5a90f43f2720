"""The tokenizer's endpoints, as vLLM states them (what lm-eval's remote
tokenizer asks):

    GET  /tokenizer_info   the special tokens and the chat template
    POST /tokenize         a text's token ids
    POST /detokenize       token ids' text
"""

from fastapi import APIRouter, Depends, Request

from zoo.serve import protocol, validation
from zoo.serve.protocol import DetokenizeRequest, TokenizeRequest
from zoo.serve.web import RequestError, short

router = APIRouter()


@router.get("/tokenizer_info", response_model=protocol.TokenizerInfo)
async def tokenizer_info(request: Request):
    """The tokenizer's special tokens and template."""
    service = request.app.state.service
    tokenizer = service.tokenizer
    special = {}
    for kind, attribute in (("bos_token", "start_token_id"), ("eos_token", "end_token_id"),
                            ("pad_token", "pad_token_id")):
        value = getattr(tokenizer, attribute, None)
        special[kind] = None if value is None else service.decode([int(value)])
    return protocol.TokenizerInfo(**special, chat_template=getattr(tokenizer, "chat_template", None),
                                  model_max_length=service.context, tokenizer_class=type(tokenizer).__name__)


@router.post("/tokenize", response_model=protocol.TokenizeResponse,
             openapi_extra=validation.body_schema(TokenizeRequest))
async def tokenize(request: Request, body: TokenizeRequest = Depends(validation.json_body(TokenizeRequest))):
    """The token ids of `prompt`."""
    service = request.app.state.service
    tokens = service.ids(body.prompt, "prompt") if body.prompt else []
    return protocol.TokenizeResponse(tokens=tokens, count=len(tokens), max_model_len=service.context)


@router.post("/detokenize", response_model=protocol.DetokenizeResponse,
             openapi_extra=validation.body_schema(DetokenizeRequest))
async def detokenize(request: Request, body: DetokenizeRequest = Depends(validation.json_body(DetokenizeRequest))):
    """The text of `tokens`."""
    service = request.app.state.service
    vocabulary = service.model.vocabulary_size
    if not all(t < vocabulary for t in body.tokens):
        raise RequestError(f"tokens: expected a list of token ids in [0, {vocabulary}); got {short(body.tokens)}",
                           "tokens")
    return protocol.DetokenizeResponse(prompt=service.decode(body.tokens))
