"""CPU-side compile check of numba-cuda kernels: PTX for sm_90 + ``ptxas -v``.

Catches kernels that run in Python (and so on the simulator) but that numba cannot
compile for the GPU (lists, dicts, strings, ``np.zeros``, plain Python calls,
generators, ...), and reports the resources the compiled kernel uses (registers,
shared/local memory, spills) and from them the theoretical occupancy.

Needs no GPU: ``numba.cuda.compile_ptx`` runs NVVM from the ``numba-cuda[cu13]``
wheels, and ``ptxas`` comes from the ``nvidia-cuda-nvcc`` wheel. Where that toolchain is
missing (macOS, a bare numba), results say ``available=False`` with the reason:
"unavailable" is never reported as a failure of the student's kernel.

Public API::

    toolchain_status() -> ToolchainStatus
    find_ptxas() -> str | None
    numba_type_of(value) / argtypes_for(args) -> numba types as numba types them
    compile_check(kernel, argtypes, cc=TARGET_CC) -> CompileReport
    CompileReport.occupancy(threads_per_block, dynamic_shared=0) -> Occupancy
    explain_failure(error, kernel) -> CompileReport
    clear_cache(disk=False), cache_dir()

Results are cached in memory and on disk (JSON, one file per key under
``$GPUGRADE_CACHE_DIR`` or ``~/.cache/gpugrade``, subfolder ``compile_check``), keyed by
the source of the kernel and of every device function / constant it references,
the argument types, the compile options, the cc and the toolchain versions.

The one intrusion into numba (``patching.compile_check_device``, a recorded scope like every
patch of the simulator): numba-cuda compiles the *device functions* a kernel calls for
``get_current_device().compute_capability``, which needs a driver. For the duration of one
check, and only for the checking thread, ``get_current_device`` answers a stand-in device
with the requested cc; device-function overloads created during the check are removed
afterwards, so nothing compiled for the stand-in is reused by a real launch.

Modules: ``report`` (CompileReport), ``toolchain`` (what is installed: ToolchainStatus,
find_ptxas), ``ptxas`` (running it, reading its log), ``cache`` (the key, memory and disk),
``compiler`` (compile_check), ``explain`` (a failure as the student's file, line and a hint),
``issue`` (the PTX's basic blocks and loops: a launch's warp instructions, estimated).
The kernel's function graph is ``grader.sim.kernel_graph``'s, argument types
``grader.sim.argtypes``'.
"""

from grader.sim.argtypes import argtypes_for, numba_type_of

from .cache import cache_dir, clear_cache
from .compiler import compile_check
from .explain import explain_failure
from .report import CompileReport
from .toolchain import ToolchainStatus, find_ptxas, toolchain_status

__all__ = [
    "CompileReport", "ToolchainStatus", "compile_check", "toolchain_status", "find_ptxas",
    "numba_type_of", "argtypes_for", "clear_cache", "cache_dir", "explain_failure",
]
