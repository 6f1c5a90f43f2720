"""`GET /health`: the server's limits, and its queue now (no API key needed)."""

from fastapi import APIRouter, Request

from zoo.serve import protocol

router = APIRouter()


@router.get("/health", response_model=protocol.Health)
async def health(request: Request):
    """Whether the server answers, what it bounds and how many requests wait."""
    return request.app.state.service.health()
