"""OpenTelemetry spans, when ``opentelemetry-api`` is installed (``runwire[otel]``).

A client's send opens ``runwire.send`` and puts the W3C ``traceparent`` of that span
in the prompt message's metadata. The relay's ``runwire.relay.publish`` and the agent's
``runwire.run`` take it from there as their parent; a Run's model calls
(``runwire.model_call``) and tools (``runwire.tool``) are children of its span.
Without OpenTelemetry every function here does nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Literal

try:
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - the otel extra is not installed
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]

__all__ = ["ENABLED", "TRACEPARENT", "carrier_of", "inject", "span"]

ENABLED = trace is not None
TRACEPARENT = "traceparent"
Kind = Literal["internal", "client", "server", "producer", "consumer"]


@contextmanager
def span(
    name: str,
    *,
    parent: Mapping[str, Any] | None = None,
    kind: Kind = "internal",
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> Iterator[Any]:
    """A span named ``name``, child of the current one, or of ``parent``'s ``traceparent``."""
    if trace is None:
        yield None
        return
    context = None
    if parent is not None and isinstance(parent.get(TRACEPARENT), str):
        context = propagate.extract({TRACEPARENT: parent[TRACEPARENT]})
    tracer = trace.get_tracer("runwire")
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=getattr(trace.SpanKind, kind.upper()),
        attributes=dict(attributes or {}),
    ) as current:
        yield current


def inject(metadata: MutableMapping[str, Any]) -> None:
    """Put the current span's ``traceparent`` in ``metadata`` (nothing without a span)."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return
    found: dict[str, str] = {}
    propagate.inject(found)
    if TRACEPARENT in found:
        metadata[TRACEPARENT] = found[TRACEPARENT]


def carrier_of(metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``metadata`` if it carries a ``traceparent``, else None."""
    if metadata is not None and isinstance(metadata.get(TRACEPARENT), str):
        return metadata
    return None
