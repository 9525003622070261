"""Prometheus metrics of one relay (a registry per server, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["LATENCY_BUCKETS", "RUN_BUCKETS", "HotCounter", "Metrics"]

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Seconds: a publish on a healthy store takes a millisecond or so; the tail matters."""
RUN_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: a Run takes from a second to many minutes."""


class Metrics:
    """The relay's counters and gauges."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.connections = Gauge("runwire_connections", "Open WebSocket connections", registry=r)
        self.channels = Gauge("runwire_channels", "Sessions loaded in memory", registry=r)
        # Counted per frame or entry: plain ints read when scraped (a prometheus Counter
        # takes a lock on every increment; the relay counts from its event loop only).
        self.frames_in = self._hot("runwire_frames_received", "Frames received")
        self.published = self._hot("runwire_entries_published", "Entries stored")
        self.duplicates = Counter(
            "runwire_duplicates_dropped", "Publishes dropped as repeats", registry=r
        )
        self.delivered = self._hot("runwire_entries_delivered", "Entries queued to subscribers")
        self.frames_out = self._hot("runwire_frames_sent", "Frames sent")
        self.errors = Counter("runwire_errors", "Error frames sent", ["code"], registry=r)
        self.slow_consumers = Counter(
            "runwire_slow_consumer_disconnects", "Connections closed for a full queue", registry=r
        )
        self.dispatched = Counter("runwire_runs_dispatched", "Runs handed to workers", registry=r)
        self.agent_lost = Counter("runwire_runs_agent_lost", "Runs ended AGENT_LOST", registry=r)
        self.run_timeouts = Counter(
            "runwire_runs_timed_out", "Runs ended RUN_TIMEOUT at their deadline", registry=r
        )
        self.workers = Gauge("runwire_workers", "Registered agent workers", registry=r)
        self.publish_ack = Histogram(
            "runwire_publish_ack_seconds",
            "From a publish received to its ack (the store's write included)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.publish_deliver = Histogram(
            "runwire_publish_deliver_seconds",
            "From a publish received to its entry queued to this node's subscribers",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.steer_dispatch = Histogram(
            "runwire_steer_dispatch_seconds",
            "From a steer received to its entry queued to the agent's connection",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.run_duration = Histogram(
            "runwire_run_duration_seconds",
            "From a Run's prompt to its end",
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.runs_ended = Counter(
            "runwire_runs_ended",
            "Runs ended, by status and error code",
            ["status", "code"],
            registry=r,
        )
        # The process's CPU, memory and file descriptors, the interpreter, its collector.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)

    def _hot(self, name: str, doc: str) -> HotCounter:
        counter = HotCounter()
        self.registry.register(_Read(name, doc, counter.read))
        return counter

    def count_store_round_trips(self, read: Callable[[], int]) -> None:
        """Expose a store's round trips (``read()``) as ``runwire_store_round_trips_total``."""
        self.registry.register(_Read("runwire_store_round_trips", "Round trips to the store", read))

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


class HotCounter:
    """A counter for the hot path: ``inc()`` adds to an int, no lock (one thread counts)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        """Add ``amount`` (>= 0)."""
        self.value += amount

    def read(self) -> int:
        """The count so far."""
        return self.value


class _Read(Collector):
    """A counter whose value is read when scraped."""

    def __init__(self, name: str, doc: str, read: Callable[[], int]) -> None:
        self._name, self._doc, self._read = name, doc, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self._name, self._doc, value=self._read())
