"""The rank guard of the `gpu` backend: while the student's `f(ranks, bufs)` runs, a kernel touches
only memory of the rank that launches it, and data crosses ranks only through `ranks.copy`.

Why in software, at launch: the hardware will not refuse it. On one GPU emulating N ranks a kernel
reading another rank's buffer is a legal local load; on N GPUs with peer access enabled (Ranks
enables it between ring neighbours, and NCCL and CuPy enable it behind the student's back) the
remote read silently works. Either way the bytes cross ranks where no link counter sees them, and
the same code would fail on the simulator (its device process refuses it). So every launch's
array arguments (tuples included) are looked up in the ranks' ownership record
(`Ranks.owner`), and a direct `dst.copy_to_device(src)` between two ranks' memory is refused.

The launching rank is the rank of the launch's stream when it is one of the ranks' streams, else
the innermost `with r:` (a launch on a stream of a GPU that is not the current one fails in CUDA
itself, and on the simulator). This catches mistakes, not an adversary: on a GPU the student's
code runs in this very process.

On every backend (the simulator's too: `launches_inside_their_rank`) a launch on a rank's stream
is made inside that rank's `with r:` (`inside_its_rank`): the one way that runs alike on N GPUs,
on N ranks sharing one GPU, and on the simulator's virtual GPUs.
"""

from __future__ import annotations

import contextlib
import threading


class RankMemoryError(ValueError):
    """A kernel given another rank's memory, or a copy between ranks that bypasses ranks.copy."""


class RankLaunchError(RankMemoryError):
    """A kernel launched on a rank's stream outside that rank's `with r:` (`inside_its_rank`)."""


def _arrays(args, prefix: str = ""):
    """(position, value) of each argument, tuple elements as "2[0]" (numba passes tuples whole)."""
    for i, value in enumerate(args):
        where = f"{prefix}[{i}]" if prefix else str(i)
        if isinstance(value, (tuple, list)):
            yield from _arrays(value, where)
        else:
            yield where, value


def inside_its_rank(ranks, kernel: str, stream) -> None:
    """A launch on a rank's stream is made inside that rank's `with r:`, on every backend: outside
    it, `with cuda.gpus[i]:` runs on N GPUs and on the simulator's virtual ones, but where ranks
    share one GPU there is no cuda.gpus[1] (and a launch on another rank's stream runs there, which
    fails on N GPUs): the same code would score differently by machine (the all-reduce audit)."""
    owner = ranks._stream_owner.get(id(stream))
    current = ranks.current
    if owner is None or current is owner:
        return
    where = (f"inside `with ranks[{current.id}]:`, another rank's" if current is not None else
             "outside every `with r:` (`with cuda.gpus[i]:` is not one: where ranks share a GPU, rank i is not GPU i "
             "and there is no cuda.gpus[1])")
    raise RankLaunchError(f"kernel {kernel}: launched on rank {owner.id}'s stream {where}; launch a rank's kernels "
                          f"inside `with r:` for that rank r (it makes r's GPU current on every machine), on r.stream "
                          f"or another stream of r's")


@contextlib.contextmanager
def launches_inside_their_rank(ranks):
    """For the block: `inside_its_rank` for every launch (the simulator's backend: its device
    process checks memory itself, `rank_guard` does it all on a GPU)."""
    from ..sim.patching import checking_launches

    with checking_launches(lambda kernel, args, stream: inside_its_rank(ranks, kernel, stream)):
        yield ranks


@contextlib.contextmanager
def rank_guard(ranks):
    """For the block: refuse launches and copies that cross the ranks of `ranks` (a `Ranks`)."""
    from ..sim.patching import checking_device_copies, checking_launches

    local = threading.local()  # how deep this thread is inside ranks.copy (its copies may cross)
    copy = ranks.copy

    def counted_copy(*args, **kwargs):
        local.depth = getattr(local, "depth", 0) + 1
        try:
            return copy(*args, **kwargs)
        finally:
            local.depth -= 1

    def on_launch(kernel, args, stream):
        inside_its_rank(ranks, kernel, stream)
        by_stream = ranks._stream_owner.get(id(stream))
        launcher = by_stream or ranks.current
        for where, value in _arrays(args):
            owner = ranks.owner(value)
            if owner is None or owner is launcher:
                continue
            if launcher is None:
                raise RankMemoryError(
                    f"kernel {kernel}: argument {where} is memory of rank {owner.id}, but no rank launches it "
                    f"(the launch is outside every `with r:` and not on a rank's stream): launch inside "
                    f"`with ranks[{owner.id}]:` on ranks[{owner.id}].stream; data crosses ranks only "
                    f"through ranks.copy(dst, src)")
            how = f"on rank {launcher.id}'s stream" if by_stream else f"inside `with ranks[{launcher.id}]:`"
            raise RankMemoryError(
                f"kernel {kernel}: argument {where} is memory of rank {owner.id}, but rank {launcher.id} "
                f"launches it ({how}); a kernel may only touch memory of the rank it runs on: first bring "
                f"the data over with ranks.copy(dst, src), e.g. into ranks[{launcher.id}].device_array(...)")

    def on_copy(dst, src, stream):
        if getattr(local, "depth", 0):
            return
        to, frm = ranks.owner(dst), ranks.owner(src)
        if to is not None and frm is not None and to is not frm:
            raise RankMemoryError(
                f"dst.copy_to_device(src) copies memory of rank {frm.id} into memory of rank {to.id} "
                f"directly; data crosses ranks only through ranks.copy(dst, src, stream=None) "
                f"(it is counted per link)")

    ranks.copy = counted_copy  # on this object only, for the block
    try:
        with checking_launches(on_launch), checking_device_copies(on_copy):
            yield ranks
    finally:
        vars(ranks).pop("copy", None)


__all__ = ["RankLaunchError", "RankMemoryError", "inside_its_rank", "launches_inside_their_rank", "rank_guard"]
