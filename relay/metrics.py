"""Prometheus metrics of one relay (a registry per server, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics"]


class Metrics:
    """The relay's counters and gauges."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.connections = Gauge("runwire_connections", "Open WebSocket connections", registry=r)
        self.channels = Gauge("runwire_channels", "Sessions loaded in memory", registry=r)
        self.frames_in = Counter("runwire_frames_received", "Frames received", registry=r)
        self.published = Counter("runwire_entries_published", "Entries stored", registry=r)
        self.duplicates = Counter(
            "runwire_duplicates_dropped", "Publishes dropped as repeats", registry=r
        )
        self.delivered = Counter(
            "runwire_entries_delivered", "Entries queued to subscribers", registry=r
        )
        self.frames_out = Counter("runwire_frames_sent", "Frames sent", registry=r)
        self.errors = Counter("runwire_errors", "Error frames sent", ["code"], registry=r)
        self.slow_consumers = Counter(
            "runwire_slow_consumer_disconnects", "Connections closed for a full queue", registry=r
        )
        self.dispatched = Counter("runwire_runs_dispatched", "Runs handed to workers", registry=r)
        self.agent_lost = Counter("runwire_runs_agent_lost", "Runs ended AGENT_LOST", registry=r)
        self.workers = Gauge("runwire_workers", "Registered agent workers", registry=r)

    def count_store_round_trips(self, read: Callable[[], int]) -> None:
        """Expose a store's round trips (``read()``) as ``runwire_store_round_trips_total``."""
        self.registry.register(_Read("runwire_store_round_trips", "Round trips to the store", read))

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


class _Read(Collector):
    """A counter whose value is read when scraped."""

    def __init__(self, name: str, doc: str, read: Callable[[], int]) -> None:
        self._name, self._doc, self._read = name, doc, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self._name, self._doc, value=self._read())
