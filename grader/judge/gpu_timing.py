"""Timing on a GPU from a process the student's code cannot touch.

The student's function is called by the judge, again and again, in a runner whose device is the
GPU's device process (grader.device.gpu_server): the runner holds no GPU, every kernel is launched
by the device process between two CUDA events, and each call's report to the judge carries its
kernels' times. A time a speed is graded on is never the runner's word (a runner that patches
numba's events or its clock changes nothing here).

- Warm-up: the first call (the kernels' compilation in the device process, first launches) is
  not timed.
- Each timed call has the GPU to itself (grader.judge.gpu_lock) and starts with the L2 cache
  emptied; its time is the sum of its kernels' times: host code and copies are not the kernels'.
- Fresh inputs for every timed call after the first of each input set: the set's own values drawn
  again (grader.judge.replay's draw: a sum moves too), so a call can never be answered from an
  earlier one; every call's answer is checked by the test's check, and its data flow (the answer
  copied back from memory kernels of that call wrote from its inputs) by grader.judge.dataflow on
  the device's report.
- The judge's clock bounds each call's kernel times from above (the device process is the
  grader's own; a sum of its times above the judge's wait for the call would be its fault).
- Adaptive repeats: until the median's relative error is under `target`, at least `min_repeats`
  calls, at most `max_repeats` or `cap_s` seconds of the judge's clock.
- The next call's fresh inputs are drawn in a thread of the judge's while a call runs (2^24
  values drawn again cost about 0.3 s an array here, the judge otherwise idle meanwhile).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from ..backends.gpu import why_stop
from ..wire.messages import digest
from .correctness import WrongAnswer
from .proof import require_kernel_launch
from .replay import _drawn, _seed


def time_calls(timer, function: str, input_sets: list, check: Callable[[list, Any], None] | None = None,
               returns=None, *, warmup: int = 1, target: float = 0.02, min_repeats: int = 5,
               max_repeats: int = 30, cap_s: float = 15.0, **_ignored: Any):
    """`function` timed on `timer` (a Student whose connection has the GPU's device process) over
    the input sets; the judge checks every timed call's answer with `check(inputs, answer)` as it
    comes (so the TimedResult carries no outputs to check again)."""
    from .student import TimedResult

    sets = [list(inputs) for inputs in input_sets]
    rng = np.random.default_rng(_seed([digest(a) for inputs in sets for a in inputs if isinstance(a, np.ndarray)]))
    max_repeats = max(max_repeats, len(sets))
    times: list[float] = []
    launches = 0
    stopped = ""

    def inputs_of(i: int) -> list:  # (in call order: the draws take the generator's values in turn)
        return sets[i % len(sets)] if i < len(sets) else _fresh(sets[i % len(sets)], rng)

    drawing = ThreadPoolExecutor(1, thread_name_prefix="gpugrade-draw")
    try:
        with timer.connection.alone():  # no other grade's kernels on the GPU meanwhile
            for i in range(warmup):
                timer.call(function, *sets[i % len(sets)], returns=returns)
            began = time.monotonic()
            upcoming = drawing.submit(inputs_of, 0)
            for i in range(max_repeats):
                inputs = upcoming.result()
                if i + 1 < max_repeats:
                    upcoming = drawing.submit(inputs_of, i + 1)
                called = time.monotonic()
                result = timer.call(function, *inputs, returns=returns, flush=True)
                waited_ms = (time.monotonic() - called) * 1e3
                try:
                    require_kernel_launch(result, "gpu", check=check)
                except WrongAnswer as exc:
                    fresh = ", on inputs of its own (the set's values drawn again)" if i >= len(sets) else ""
                    raise WrongAnswer(f"timed call {i + 1} on the GPU{fresh}: {exc}") from None
                missing = [launch["kernel"] for launch in result.launches if launch.get("ms") is None]
                if missing:  # (a device process that did not time a launch is not the GPU's)
                    raise RuntimeError(f"the device process reported no time for kernel {missing[0]!r}")
                launches = len(result.launches)
                times.append(sum(launch["ms"] for launch in result.launches))
                if times[-1] > waited_ms:  # (kernels of a call cannot outlast the judge's wait for it)
                    raise RuntimeError(f"the device process reported {times[-1]:.3f} ms of kernels for a call "
                                       f"the judge waited {waited_ms:.3f} ms for")
                stopped = why_stop(times, len(sets), min_repeats, target, time.monotonic() - began, cap_s)
                if stopped:
                    break
            stopped = stopped or "repeat cap"
            wall = time.monotonic() - began
    finally:
        drawing.shutdown(wait=False, cancel_futures=True)  # (a draw under way for no call ends by itself)
    return TimedResult(times, launches, stopped, timer.connection.device_name(), [], wall)


def _fresh(inputs: list, rng: np.random.Generator) -> list:
    """Other values for a call: each array's own values drawn again; numbers as they were."""
    return [_drawn(a, rng) if isinstance(a, np.ndarray) else a for a in inputs]
