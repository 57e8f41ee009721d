"""``GET /metrics``: Prometheus text exposition of the app's registry."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from server.app_state import get_state

router = APIRouter(tags=["Monitoring"])


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    server_metrics = get_state(request).metrics
    return Response(await server_metrics.render_async(), media_type=server_metrics.content_type)
