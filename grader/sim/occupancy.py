"""Theoretical occupancy of a kernel from its resource usage (no GPU needed).

Follows the method of CUDA's ``cuda_occupancy.h`` (the occupancy calculator):
the number of resident blocks per SM is the minimum of four limits,

- warps:     ``max_warps_per_sm // warps_per_block``
- blocks:    ``max_blocks_per_sm``
- registers: registers are allocated per warp in units of 256, in each of the 4
             SM sub-partitions: ``(regs_per_sm / 4 // regs_per_warp) * 4 // warps_per_block``
- shared:    ``shared_per_sm // roundup(static + dynamic + reserved_per_block, 128)``

Pure arithmetic: no numba import, usable from anywhere (reports, the CLI, tests).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .devices import TARGET_CC

__all__ = ["SMLimits", "Occupancy", "LIMITS", "limits_for", "occupancy"]


@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits of one compute capability (CUDA programming guide, table of
    technical specifications per compute capability)."""

    name: str
    max_threads_per_block: int = 1024
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 64 * 1024
    registers_per_block: int = 64 * 1024
    max_registers_per_thread: int = 255
    register_alloc_unit: int = 256  # registers, allocated per warp
    register_sub_partitions: int = 4
    shared_per_sm: int = 228 * 1024
    max_shared_per_block: int = 227 * 1024  # with the opt-in attribute
    default_shared_per_block: int = 48 * 1024  # static limit; dynamic without opt-in
    reserved_shared_per_block: int = 1024  # used by the system (cc >= 8.0)
    shared_alloc_unit: int = 128
    warp_size: int = 32

    @property
    def max_threads_per_sm(self) -> int:
        return self.max_warps_per_sm * self.warp_size


LIMITS: dict[tuple[int, int], SMLimits] = {
    (7, 0): SMLimits("sm_70", shared_per_sm=96 * 1024, max_shared_per_block=96 * 1024,
                     reserved_shared_per_block=0),
    (7, 5): SMLimits("sm_75", max_warps_per_sm=32, max_blocks_per_sm=16,
                     shared_per_sm=64 * 1024, max_shared_per_block=64 * 1024,
                     reserved_shared_per_block=0),
    (8, 0): SMLimits("sm_80", shared_per_sm=164 * 1024, max_shared_per_block=163 * 1024),
    (8, 6): SMLimits("sm_86", max_warps_per_sm=48, max_blocks_per_sm=16,
                     shared_per_sm=100 * 1024, max_shared_per_block=99 * 1024),
    (8, 9): SMLimits("sm_89", max_warps_per_sm=48, max_blocks_per_sm=24,
                     shared_per_sm=100 * 1024, max_shared_per_block=99 * 1024),
    (9, 0): SMLimits("sm_90"),
}


def limits_for(cc: tuple[int, int]) -> SMLimits:
    try:
        return LIMITS[tuple(cc)]
    except KeyError:
        known = ", ".join(f"{a}.{b}" for a, b in sorted(LIMITS))
        raise ValueError(f"no SM limits for compute capability {cc[0]}.{cc[1]} (known: {known})")


@dataclass
class Occupancy:
    threads_per_block: int
    dynamic_shared: int
    registers: int
    static_shared: int
    warps_per_block: int
    active_blocks: int  # resident blocks per SM
    active_warps: int  # resident warps per SM
    max_warps: int
    occupancy: float  # active_warps / max_warps, 0..1
    limiter: str  # "warps" | "blocks" | "registers" | "shared_memory" | "block_size"
    limits: dict[str, int] = field(default_factory=dict)  # blocks per SM allowed by each resource
    notes: list[str] = field(default_factory=list)
    arch: str = "sm_90"

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        return (f"{self.arch}: {self.threads_per_block} threads/block, {self.registers} regs/thread, "
                f"{self.static_shared + self.dynamic_shared} B shared/block -> "
                f"{self.active_blocks} blocks/SM, {self.active_warps}/{self.max_warps} warps "
                f"({self.occupancy:.0%}), limited by {self.limiter}")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


# Order used to name the limiter when several give the same minimum: the fixed per-SM
# thread/block limits first, so a resource is named only when it lowers occupancy.
_LIMITER_ORDER = ("warps", "blocks", "registers", "shared_memory")


def occupancy(registers: int, static_shared: int, threads_per_block: int,
              dynamic_shared: int = 0, cc: tuple[int, int] = TARGET_CC) -> Occupancy:
    """Resident blocks/warps per SM for a kernel using ``registers`` per thread and
    ``static_shared`` bytes of ``cuda.shared.array`` per block, launched with
    ``threads_per_block`` threads and ``dynamic_shared`` bytes of dynamic shared memory."""
    lim = limits_for(cc)
    tpb = int(threads_per_block)
    dyn = int(dynamic_shared)
    regs = int(registers)
    static = int(static_shared)
    if dyn < 0 or static < 0 or regs < 0:
        raise ValueError("registers and shared memory sizes must be >= 0")
    wpb = max(1, _round_up(max(tpb, 1), lim.warp_size) // lim.warp_size)
    notes: list[str] = []

    def result(blocks: int, limiter: str, limits: dict[str, int]) -> Occupancy:
        warps = blocks * wpb
        return Occupancy(
            threads_per_block=tpb, dynamic_shared=dyn, registers=regs, static_shared=static,
            warps_per_block=wpb, active_blocks=blocks, active_warps=warps,
            max_warps=lim.max_warps_per_sm, occupancy=warps / lim.max_warps_per_sm,
            limiter=limiter, limits=limits, notes=notes, arch=lim.name)

    if tpb < 1 or tpb > lim.max_threads_per_block:
        notes.append(f"a block must have 1..{lim.max_threads_per_block} threads; "
                     f"this launch fails")
        return result(0, "block_size", {"block_size": 0})

    limits: dict[str, int] = {}
    limits["warps"] = lim.max_warps_per_sm // wpb
    limits["blocks"] = lim.max_blocks_per_sm

    # Registers: allocated per warp, rounded up to the allocation unit, within each
    # sub-partition of the register file.
    if regs > lim.max_registers_per_thread:
        notes.append(f"{regs} registers per thread exceeds the maximum of "
                     f"{lim.max_registers_per_thread}")
    if regs > 0:
        per_warp = _round_up(regs * lim.warp_size, lim.register_alloc_unit)
        assumed_per_block = per_warp * _round_up(wpb, lim.register_sub_partitions)
        if assumed_per_block > lim.registers_per_block or per_warp * wpb > lim.registers_per_block:
            limits["registers"] = 0
            notes.append(f"{regs} registers x {tpb} threads exceeds the {lim.registers_per_block} "
                         f"registers a block may use; this launch fails "
                         f"(too many resources requested)")
        else:
            per_sub = lim.registers_per_sm // lim.register_sub_partitions
            warps_per_sm = (per_sub // per_warp) * lim.register_sub_partitions
            limits["registers"] = warps_per_sm // wpb
    else:
        limits["registers"] = lim.max_blocks_per_sm

    # Shared memory: static + dynamic + the per-block reservation, rounded up.
    total = static + dyn
    if total > lim.max_shared_per_block:
        limits["shared_memory"] = 0
        notes.append(f"{total} bytes of shared memory per block exceeds the maximum of "
                     f"{lim.max_shared_per_block}; this launch fails")
    else:
        alloc = _round_up(total + lim.reserved_shared_per_block, lim.shared_alloc_unit)
        limits["shared_memory"] = lim.shared_per_sm // alloc if alloc else lim.max_blocks_per_sm
        if total > lim.default_shared_per_block:
            notes.append(f"{total} bytes of shared memory per block is over "
                         f"{lim.default_shared_per_block // 1024} KB: the kernel needs the "
                         f"max-dynamic-shared-memory opt-in attribute, which numba-cuda does not "
                         f"set, so a numba launch fails")

    blocks = min(limits.values())
    limiter = next(name for name in _LIMITER_ORDER if limits[name] == blocks)
    return result(blocks, limiter, limits)
