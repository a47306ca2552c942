"""Simulated events' times: the performance model's timeline of the work the host has issued.

The simulator runs every kernel and copy at once, so an event's time is a model: when a GPU preset
(grader/perf_model/gpus.toml) would reach it. Each operation of the stream order
(grader/sim/streams.py) is scheduled as it is issued (grader/perf_model/timeline.Scheduler:
kernels at their modelled time, copies at the preset's link bandwidths, the host issuing one call
after another), and an event recorded on a stream completes when what that stream is ordered after
has ended, never before the host issued it. So `cuda.event_elapsed_time` around a kernel says what
`gpugrade run`'s table says of it, plus the host's issue time where the GPU waits for it; streams
overlap as on the timeline. Never a measurement, and never graded.
"""

from __future__ import annotations

import threading

from .. import perf_model
from ..perf_model.timeline import Scheduler


class EventClock:
    """The modelled timeline of one simulator's operations, in issue order."""

    def __init__(self, gpu_key: str | None = None):
        self.gpu = perf_model.gpu(gpu_key or perf_model.DEFAULT_GPU)
        self._scheduler = Scheduler(self.gpu, keep_timeline=False)
        self._lock = threading.Lock()

    def issued(self, op: dict, launch: dict | None = None) -> None:
        """`op` (streams.Op.summary) was issued; `launch`: a kernel's record (grid, block,
        shared_bytes, counters, compiled), whose modelled time is its duration."""
        with self._lock:
            self._scheduler.add(op, launch)

    def ms_at(self, clock: dict[int, int]) -> float:
        """When an event recorded now, after the work `clock` names ({stream: tick}), completes."""
        with self._lock:
            return 1e3 * max(self._scheduler.host, self._scheduler.end_of(clock))
