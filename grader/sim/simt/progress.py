"""Where a lockstep launch running in another thread is: its batch of blocks and its open loops,
for a watchdog's message when a call runs out of time (grader/device/watch.py). Feedback only:
nothing graded reads it. Reads what `MaskStack` keeps per open loop (iterations so far, the
loop's line, a range()'s next value, stop and step); the arrays read are never written in place.
"""

from __future__ import annotations

import numpy as np

SHOWN_LOOPS = 3  # innermost first


def describe(ctx) -> str:
    """", blocks 0 to 255 of 1,056, in the loop of line 148 at iteration 3,120 of up to
    540,679 in a thread" for the batch `ctx` (an executor.Ctx); "" when there is nothing to say."""
    total = ctx.config.n_blocks
    parts = []
    if total > ctx.n_blocks:
        last = ctx.first_block + ctx.n_blocks - 1
        parts.append(f"blocks {ctx.first_block:,} to {last:,} of {total:,}")
    # (copies: the running thread may push or pop a loop meanwhile)
    iterations, lines, ranges = list(ctx._iterations), list(ctx._loop_lines), list(ctx._loop_ranges)
    open_loops = min(len(iterations), len(lines), len(ranges))
    loops = []
    for k in range(open_loops - 1, max(-1, open_loops - 1 - SHOWN_LOOPS), -1):
        bounds = ranges[k]
        done = bounds[3] if isinstance(bounds, tuple) and len(bounds) == 4 else iterations[k]
        text = f"the loop of line {lines[k]}"
        if not done:  # (entering it)
            loops.append(text)
            continue
        text += f" at iteration {done:,}"
        most = most_iterations(bounds, done)
        if most is not None:
            text += f" of up to {most:,} in a thread"
        loops.append(text)
    if loops:
        parts.append("in " + ", inside ".join(loops))
    return ", ".join(parts)


def most_iterations(bounds, done: int) -> int | None:
    """How many iterations a range() loop runs at most in one lane, `done` of them begun: a
    `range` (the same bounds in every lane), or (each lane's value in iteration `done`, stop,
    step, `done`) of a masked one; None for a `while` loop (no bound known)."""
    if isinstance(bounds, range):
        return len(bounds)
    if not isinstance(bounds, tuple) or len(bounds) != 4:
        return None
    value, stop, step = (np.asarray(v, np.int64) for v in bounds[:3])
    with np.errstate(all="ignore"):
        span = np.where(step > 0, stop - value, value - stop)
        size = np.maximum(np.abs(step), 1)
        left = np.where(step == 0, 0, np.maximum(0, -(-span // size)))  # this one among them
    if left.size == 0:
        return None
    return done + max(0, int(left.max()) - 1)
