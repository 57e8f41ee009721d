"""``Tracing``: the app's OpenTelemetry tracer (the ``otel`` extra), built from the standard ``OTEL_*``
environment variables, or from a ``TracerProvider`` the caller made (tests: an in-memory exporter).

Off unless configured: ``--otel`` (``WDE_OTEL=1``) turns it on, ``--no-otel`` off; unset, it is on when the
environment configures a trace exporter (``OTEL_TRACES_EXPORTER`` other than ``none``, or
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and ``OTEL_SDK_DISABLED`` is not
``true``. Off, nothing is imported, no middleware is added and no request does any tracing work.

The provider is the app's own (not the process-global one): two apps in one process never share spans.
Exporters: ``OTEL_TRACES_EXPORTER`` (default ``otlp``; comma-separated: ``otlp``, ``otlp_proto_grpc``,
``otlp_proto_http``, ``console``), ``otlp`` by ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc``, the Python SDK's default, or ``http/protobuf``); the exporter
reads its endpoint, headers and timeout itself, the batch processor ``OTEL_BSP_*``, the provider
``OTEL_TRACES_SAMPLER``, the resource ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (service name
``wde`` when neither names one).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

logger = logging.getLogger("wde.server")

INSTALL_HINT = "pip install 'wde[otel]'"
EXPORTER_GROUP = "opentelemetry_traces_exporter"  # the entry points the OpenTelemetry packages declare
OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
DEFAULT_SERVICE_NAME = "wde"


def is_installed() -> bool:
    return importlib.util.find_spec("opentelemetry.sdk") is not None


def tracing_requested(setting: bool | None, environ: Mapping[str, str]) -> bool:
    """``--otel`` / ``--no-otel`` when given; else whether the environment configures a trace exporter."""
    if setting is not None:
        return setting
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class Tracing:
    """A tracer over ``provider``; ``shutdown()`` flushes and stops its exporters."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("wde.server")

    @classmethod
    def from_settings(cls, setting: bool | None, environ: Mapping[str, str] | None = None) -> Tracing | None:
        """The tracing the settings and ``OTEL_*`` ask for, or None (off)."""
        environ = os.environ if environ is None else environ
        if not tracing_requested(setting, environ):
            return None
        if not is_installed():
            if setting:  # ServerSettings.verify() refuses this before anything starts
                raise ValueError(f"--otel: OpenTelemetry is not installed; {INSTALL_HINT}")
            logger.warning(
                "OTEL_* asks for traces but OpenTelemetry is not installed (%s): off", INSTALL_HINT
            )
            return None
        return cls(_provider_from_environment(environ))

    def shutdown(self) -> None:
        self.provider.shutdown()


def _provider_from_environment(environ: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER
    for name in exporter_names(environ):
        provider.add_span_processor(BatchSpanProcessor(_exporter_class(name)()))  # OTEL_BSP_*
    return provider


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The entry-point names of the exporters ``OTEL_TRACES_EXPORTER`` asks for (``otlp`` resolved by the
    OTLP protocol variables, as the OpenTelemetry SDK does)."""
    raw = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    if raw == "none":
        return []
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    names = []
    for name in (part.strip() for part in raw.split(",") if part.strip()):
        if name == "otlp":
            if protocol not in OTLP_BY_PROTOCOL:
                raise ValueError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not one of {', '.join(OTLP_BY_PROTOCOL)}"
                )
            name = OTLP_BY_PROTOCOL[protocol]
        names.append(name)
    return names


def _exporter_class(name: str) -> type:
    found = entry_points(group=EXPORTER_GROUP, name=name)
    if not found:
        known = sorted({point.name for point in entry_points(group=EXPORTER_GROUP)})
        raise ValueError(
            f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides (installed: "
            f"{', '.join(known) or 'none'}); {INSTALL_HINT} has otlp and console"
        )
    return next(iter(found)).load()
