"""The scheduler's counters and gauges at one moment, and the rates over a window between two moments."""

from __future__ import annotations

from dataclasses import dataclass

COUNTERS = (
    "submitted",  # jobs accepted
    "ok", "error", "timeout", "infra_error", "cancelled",  # jobs finished, by final status
    "retries",  # attempts started again after an infrastructure failure or a timeout
    "timeouts",  # attempts killed at their deadline (retried or not)
    "infra_failures",  # attempts lost to a dead worker or an InfraError (retried or not)
    "restarts",  # workers replaced
)
FINAL = ("ok", "error", "timeout", "infra_error", "cancelled")


@dataclass(frozen=True)
class SchedulerMetrics:
    """A snapshot: `counters` (see COUNTERS), current and peak queue depth and in-flight jobs
    (peaks since the last snapshot taken with `reset_peaks`), and each worker slot's busy seconds."""

    time: float
    counters: dict[str, int]
    queue_depth: int
    in_flight: int
    peak_queue_depth: int
    peak_in_flight: int
    busy_seconds: tuple[float, ...]

    def since(self, earlier: SchedulerMetrics) -> dict[str, float]:
        """The window from `earlier` to this snapshot: counter deltas, jobs completed per second,
        peak queue depth and in-flight jobs, and the busy fraction of each worker and on average."""
        seconds = self.time - earlier.time
        window: dict[str, float] = {k: self.counters[k] - earlier.counters[k] for k in COUNTERS}
        completed = sum(window[k] for k in FINAL)
        window["completed"] = completed
        window["completed_per_second"] = completed / seconds if seconds > 0 else 0.0
        window["peak_queue_depth"] = self.peak_queue_depth
        window["peak_in_flight"] = self.peak_in_flight
        busy = [
            now - (earlier.busy_seconds[i] if i < len(earlier.busy_seconds) else 0.0)
            for i, now in enumerate(self.busy_seconds)
        ]
        utilisation = [min(1.0, b / seconds) if seconds > 0 else 0.0 for b in busy]
        window["utilisation"] = sum(utilisation) / len(utilisation) if utilisation else 0.0
        window.update({f"worker_{i}_utilisation": u for i, u in enumerate(utilisation)})
        return window
