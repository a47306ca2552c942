"""A stage that prescribes one launch configuration whatever the input's size (a grid-stride loop
on a grid sized for the machine, not the data): the check of it, told in blocks and threads."""

from __future__ import annotations

import math

from .correctness import WrongAnswer


def expect_one_grid(launches_by_size: dict[int, list[dict]]) -> None:
    """WrongAnswer unless every call (n -> the call's launch records) launched the same grids and
    blocks, naming what each size launched and what to launch instead. A call may launch several
    (a grid-stride pass, then one block to add the blocks' sums up): the same ones for every n."""
    shapes = {frozenset((tuple(r["grid"]), tuple(r["block"])) for r in runs) for runs in launches_by_size.values()}
    if len(shapes) <= 1:
        return
    told = "; ".join(f"n={n:,} launched " + ", ".join(dict.fromkeys(in_words(r) for r in runs))
                     for n, runs in launches_by_size.items())
    raise WrongAnswer("the grid must be the same for every n: launch grid_blocks() blocks of THREADS_PER_BLOCK threads "
                      f"whatever n is, and let each thread's loop cover the rest ({told})")


def on_the_stock_grid(n: int, grid_threads: int) -> int:
    """`n` for numba's stock simulator standing in for a GPU (STOCK_SIMULATOR_SMS SMs there): as
    many times past its grid, plus the same remainder, as `n` is past `grid_threads`, a grid-stride
    stage's grid on the simulator's 132 SMs. Smaller sizes stay as they are."""
    from ..backends.gpu import STOCK_SIMULATOR_SMS
    from ..sim.devices import Limits

    if n < grid_threads:
        return n
    stock = grid_threads // Limits.multiprocessor_count * STOCK_SIMULATOR_SMS
    return n // grid_threads * stock + n % grid_threads % stock


def in_words(launch: dict) -> str:
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


# a kernel whose grid did not grow while its input grew this many times, on fewer threads than one
# per SPARSE float32 elements of input, loops over the data on a grid that stays as launched
GROWTH = 16
SPARSE = 16


class GridGrowth:
    """Whether each kernel's grid grows with the input, from the calls the judge saw (kernel ->
    {the call's input bytes: (the most blocks, the most threads of one of its launches)}). The
    performance model takes a grid as launched where the kernel reads its grid's size, and as
    filling the GPU at full load where it does not (grader/perf_model); a kernel that loops over
    the data on one block reads no grid size, and was modelled as filling the GPU (a reduction on
    one block of 256 threads: 0.25x the reference's time, where a GPU runs it about 100x slower)."""

    def __init__(self):
        self._seen: dict[str, dict[int, tuple[int, int]]] = {}

    def saw(self, launches: list[dict], nbytes: int) -> None:
        for launch in launches:
            sizes = self._seen.setdefault(str(launch.get("kernel", "")), {})
            most = sizes.get(nbytes, (0, 0))
            sizes[nbytes] = (max(most[0], blocks(launch)), max(most[1], threads(launch)))

    def fixed(self, kernel: str) -> bool:
        """The kernel's grid stayed as it was while its input grew GROWTH times, and at the largest
        input it ran fewer threads than one per SPARSE float32 elements."""
        sizes = self._seen.get(kernel, {})
        if len(sizes) < 2:
            return False
        small, large = min(sizes), max(sizes)
        (small_blocks, _), (large_blocks, large_threads) = sizes[small], sizes[large]
        return large >= GROWTH * max(small, 1) and large_blocks <= small_blocks and large_threads * SPARSE * 4 < large

    def marked(self, launches: list[dict]) -> list[dict]:
        """The launches, each of a kernel whose grid is fixed marked so (`grid_fixed`: grader/judge/perf)."""
        return [{**launch, "grid_fixed": True} if self.fixed(str(launch.get("kernel", ""))) else launch
                for launch in launches]


def blocks(launch: dict) -> int:
    """The blocks a launch record's grid holds."""
    return math.prod(int(d) for d in launch.get("grid") or (1,))


def threads(launch: dict) -> int:
    """The threads a launch record launched: its blocks times the threads of one."""
    return blocks(launch) * math.prod(int(d) for d in launch.get("block") or (1,))


def largest_in_words(launches: list[dict]) -> str:
    """The largest grid of a call's launches, as `in_words` says it ("" without any)."""
    return in_words(max(launches, key=blocks)) if launches else ""
