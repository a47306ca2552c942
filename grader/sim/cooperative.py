"""Cooperative launches: kernels that synchronise the whole grid (`cuda.cg.this_grid().sync()`).

numba-cuda launches a kernel that takes the grid group cooperatively, and CUDA refuses a
cooperative launch with more blocks than can be resident on the GPU at once
(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE): a grid sync waits for every block, so a block still
waiting for an SM would hang it. The limit is numba's `max_cooperative_grid_blocks`: resident
blocks per SM (the occupancy model, `occupancy.py`, with the registers and static shared memory
the compile check reports) times the SM count. Where no compile check is available the
registers count as 0 and the static shared memory as declared nowhere: an upper bound.
"""

from __future__ import annotations

import functools
import weakref

from .errors import LaunchConfigError
from .kernel_graph import code_names, device_dispatchers
from .kernel_source import has_contents
from .occupancy import Occupancy, occupancy

__all__ = ["uses_grid_sync", "grid_occupancy", "max_cooperative_grid_blocks", "check_launch"]

_uses: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _this_grid():
    try:
        from numba.cuda import cg
    except Exception:  # numba's built-in CUDA target: no cooperative groups
        return None
    return cg.this_grid


def uses_grid_sync(py_func) -> bool:
    """Whether the kernel, or a device function it calls, takes the grid group: numba then
    launches it cooperatively (every block resident at once)."""
    hit = _uses.get(py_func)
    if hit is None:
        this_grid = _this_grid()
        hit = False
        for f in [py_func] + [d.py_func for d in device_dispatchers(py_func)]:
            names = code_names(f.__code__)
            cells = dict(zip(f.__code__.co_freevars,  # (an empty cell: a name not bound yet)
                             (c.cell_contents if has_contents(c) else None for c in f.__closure__ or ())))
            if "this_grid" in names or this_grid is not None and any(
                    f.__globals__.get(n, cells.get(n)) is this_grid
                    for n in names + list(cells)):
                hit = True
                break
        _uses[py_func] = hit
    return hit


def _resources(dispatcher, argtypes) -> tuple[int, int]:
    """(registers per thread, static shared bytes) of the kernel for these argument types or
    values, from the compile check; (0, 0) where it cannot tell."""
    try:
        from .compile_check import compile_check

        report = compile_check(dispatcher, list(argtypes))
    except Exception:  # noqa: BLE001 - no toolchain, or types it cannot take: the upper bound
        return 0, 0
    if not report.ok or report.registers is None:
        return 0, 0
    return int(report.registers), int(report.shared_bytes or 0)


def _threads(blockdim) -> int:
    if isinstance(blockdim, (tuple, list)):
        return functools.reduce(lambda a, b: a * b, (int(d) for d in blockdim), 1)
    return int(blockdim)


def grid_occupancy(dispatcher, argtypes, blockdim, dynsmemsize, cc) -> Occupancy:
    regs, static = _resources(dispatcher, argtypes)
    return occupancy(regs, static, _threads(blockdim), int(dynsmemsize), tuple(cc))


def max_cooperative_grid_blocks(dispatcher, argtypes, blockdim, dynsmemsize, device) -> int:
    """numba's `_Kernel.max_cooperative_grid_blocks` on simulated `device`: resident blocks
    per SM times its SM count."""
    occ = grid_occupancy(dispatcher, argtypes, blockdim, dynsmemsize, device.compute_capability)
    return occ.active_blocks * device.MULTIPROCESSOR_COUNT


def check_launch(kernel, dispatcher, args, config, device) -> bool:
    """Whether the launch is cooperative (the kernel syncs the grid); raise LaunchConfigError,
    as CUDA refuses it, when its grid could not be resident at once."""
    if not uses_grid_sync(kernel.py_func):
        return False
    occ = grid_occupancy(dispatcher, args, config.block, config.shared_bytes,
                         device.compute_capability)
    sms = device.MULTIPROCESSOR_COUNT
    limit = occ.active_blocks * sms
    if config.n_blocks > limit:
        raise LaunchConfigError(
            f"kernel {kernel.name!r} syncs the whole grid (cuda.cg.this_grid().sync()), so it "
            f"is launched cooperatively, and a grid sync needs every block resident on the GPU "
            f"at once: at most {limit} blocks of {config.threads_per_block} threads fit "
            f"({occ.active_blocks} per SM, limited by {occ.limiter.replace('_', ' ')}, x {sms} "
            f"SMs), this launch has {config.n_blocks}. CUDA refuses it "
            f"(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE); use `kernel.overloads[sig]."
            f"max_cooperative_grid_blocks(blockdim)` blocks at most, each looping over more "
            f"work", kernel=kernel.name)
    return True
