"""`GET /v1/models`: the one model served."""

from fastapi import APIRouter, Request

from zoo.serve import protocol

router = APIRouter()


@router.get("/v1/models", response_model=protocol.ModelList)
async def models(request: Request):
    """The model's id (what requests name as `model`) and its context."""
    service = request.app.state.service
    card = protocol.ModelCard(id=service.name, created=service.created, max_model_len=service.context)
    return protocol.ModelList(data=[card])
