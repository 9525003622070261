"""Prometheus metrics of one relay (a registry per server, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

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
        self.store_round_trips: Gauge | None = None

    def count_store_round_trips(self, read: Callable[[], int]) -> None:
        """Expose the store's round trips (a Redis store counts them) as a gauge."""
        if self.store_round_trips is None:
            self.store_round_trips = Gauge(
                "runwire_store_round_trips", "Round trips to the store", registry=self.registry
            )
        self.store_round_trips.set_function(lambda: float(read()))

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
