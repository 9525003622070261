"""Prometheus metrics of one relay (a registry per server, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["HotCounter", "Metrics"]


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
