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
"""

from __future__ import annotations

import contextlib
import threading


class RankMemoryError(ValueError):
    """A kernel given another rank's memory, or a copy between ranks that bypasses ranks.copy."""


def _arrays(args, prefix: str = ""):
    """(position, value) of each argument, tuple elements as "2[0]" (numba passes tuples whole)."""
    for i, value in enumerate(args):
        where = f"{prefix}[{i}]" if prefix else str(i)
        if isinstance(value, (tuple, list)):
            yield from _arrays(value, where)
        else:
            yield where, value


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


__all__ = ["RankMemoryError", "rank_guard"]
