"""A stage that prescribes one launch configuration whatever the input's size (a grid-stride loop
on a grid sized for the machine, not the data): the check of it, told in blocks and threads."""

from __future__ import annotations

from .correctness import WrongAnswer


def expect_one_grid(launches_by_size: dict[int, list[dict]]) -> None:
    """WrongAnswer unless every launch of the calls (n -> the call's launch records) used the same
    grid and block, naming what each size launched and what to launch instead."""
    shapes = {(tuple(r["grid"]), tuple(r["block"])) for runs in launches_by_size.values() for r in runs}
    if len(shapes) <= 1:
        return
    told = "; ".join(f"n={n:,} launched " + ", ".join(dict.fromkeys(_in_words(r) for r in runs))
                     for n, runs in launches_by_size.items())
    raise WrongAnswer("the grid must be the same for every n: launch grid_blocks() blocks of THREADS_PER_BLOCK threads "
                      f"whatever n is, and let each thread's loop cover the rest ({told})")


def _in_words(launch: dict) -> str:
    """(161, 1, 1) blocks of (256, 1, 1) as "161 blocks of 256 threads"; 2-D as "4x2 blocks"."""
    def dims(shape) -> tuple[str, int]:
        kept = list(shape)
        while len(kept) > 1 and kept[-1] == 1:
            kept.pop()
        count = 1
        for d in kept:
            count *= int(d)
        return "x".join(f"{int(d):,}" for d in kept), count

    (grid, blocks), (block, threads) = dims(launch["grid"]), dims(launch["block"])
    return f"{grid} block{'s' * (blocks != 1)} of {block} thread{'s' * (threads != 1)}"
