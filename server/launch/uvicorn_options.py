"""``uvicorn_options(settings)``: the uvicorn ``Config`` options that come from ``ServerSettings`` (the
HTTP protocol with its header limits, the keep-alive timeout), shared by ``wde serve`` and the tests."""

from __future__ import annotations

from typing import Any

from server.launch.http_protocol import guarded_protocol_class
from server.settings import ServerSettings


def uvicorn_options(settings: ServerSettings) -> dict[str, Any]:
    return {
        "http": guarded_protocol_class(settings.header_read_timeout, settings.max_header_bytes),
        "timeout_keep_alive": settings.keep_alive_timeout,
    }
