"""`GET /health`: the server's limits, its queue and slots now, its times
to the first token and its speculation; `GET /metrics`: the same and
more in Prometheus' text format (`zoo.serve.metrics`). Neither needs an
API key."""

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from zoo.serve import protocol

router = APIRouter()


@router.get("/health", response_model=protocol.Health)
async def health(request: Request):
    """Whether the server answers, what it bounds and how many requests wait."""
    return request.app.state.service.health()


@router.get("/metrics")
async def metrics(request: Request):
    """The server's measures, for a Prometheus scrape."""
    return Response(request.app.state.service.scheduler.measures.text(), media_type=CONTENT_TYPE_LATEST)
