"""Why a numba-cuda test does not pass on grader.sim: one entry per known case.

Keys are fnmatch patterns over node ids (`test_module.py::Class::test`); the first match wins.
Categories:
- "compiled code": the test inspects PTX/LLVM/SASS or compiles for a real architecture
  (inspect_asm, inspect_llvm, compile_ptx for sm_100, ...): out of scope for a simulator.
- "foreign code": the kernel calls CUDA C/C++ device functions (FFI), which a Python simulator
  cannot run.
- "size": a GPU-sized problem beyond a CPU simulator's memory or the suite's time budget.
- "checker": one of grader.sim's checkers (races, uninitialised reads) reports a real finding in
  the test's kernel; the test would pass with that checker downgraded to a warning.
- "gap": a feature grader.sim does not simulate yet (named); a candidate for the simulator.
- "bug": a simulator bug; the reproducer id refers to docs/CONFORMANCE.md.
"""

from __future__ import annotations

import fnmatch

REASONS: list[tuple[str, str, str]] = [
    # --- compiled code
    # --- size
    ("test_intrinsics.py::*::test_issue_9229", "size",
     "launches 22,121,216 blocks x 256 threads (5.7e9 threads) to overflow int32 thread ids; "
     "the simulator refuses launches above 33,554,432 threads with NotSimulatedError (its "
     "per-thread records alone would need 211 GiB here). Deselected everywhere."),
    ("test_laplace.py::*", "size",
     "1000 launches of a 256x256 Jacobi step (the GPU configuration): minutes on a CPU "
     "simulator; run only by `numba_suite.py --full`."),
    ("test_reduction.py::*::test_sum_reduce", "size",
     "cuda.Reduce over 3.2 million elements in 15 sizes (GPU configuration): ~25 s; run only "
     "by `numba_suite.py --full`, not in the timed suite."),
    # --- checker findings
    ("test_sm.py::*::test_issue_2393", "checker",
     "uninitialised-read checker: the kernel sums a shared array it never writes (the test only "
     "checks that it compiles and runs); every block also stores d_block_costs[0]"),
    ("doc_examples/test_ffi.py::*", "foreign code",
     "calls CUDA C/C++ device functions (`cuda.declare_device(..., link=...)`, `.cu` files "
     "numba-cuda compiles with NVRTC and links): the simulator runs a kernel's Python, it cannot "
     "run foreign device code"),
    # --- checker findings (documentation examples)
    ("doc_examples/test_sessionize.py::*", "checker",
     "barrier checker: `grid.sync()` inside `if is_sess_boundary:`, which only some threads "
     "take; CUDA requires every thread of the grid to call it. It completes on current GPUs "
     "because the threads that skip it exit, which is undefined behaviour; the test would pass "
     "with the barrier checker downgraded to a warning"),
    # --- gaps
    ("test_localmem.py::*::test_struct_model_type_arr", "gap",
     "local arrays of a StructModel extension type cannot be represented as a NumPy dtype"),
]


def classify(nodeid: str) -> tuple[str, str] | None:
    for pattern, category, reason in REASONS:
        if fnmatch.fnmatchcase(nodeid, pattern):
            return category, reason
    return None


REPRODUCERS = '''## Simulator bugs the suite found (fixed)

Each has a regression test in `tests/sim/test_conformance_fixes.py` (both executors); the
reproducers are in this file's git history.

- B1 (SIMT): an index held in a tuple variable (`g = cuda.grid(2); a[g] = ...`) was taken as
  one index. Fixed: a tuple-typed local used as an index is unpacked.
- B2 (both): the scalar types of an eager signature were ignored (a Python int typed int64
  where numba converts it to the declared int32). Fixed: launches convert scalar arguments to
  the declared types (wrapping like a C cast; floats rounded to float32), see grader/sim/eager.py.
- B3 (SIMT): cuda.popc / cuda.brev of unsigned integers failed (0-d views); the per-thread popc
  counted 64 bits of a negative int32. Fixed: popc counts the type's width, brev returns
  uint32/uint64 as numba types it.
- B4 (both): `round(x, ndigits)`: SIMT rejected ndigits, the per-thread executor used numpy's
  algorithm (inf/nan on overflow). Fixed: numba-cuda's own algorithm (grader/sim/device_math.py).
- B5 (both): namedtuple arguments lost their field names. Fixed: they keep their class and are
  typed as numba's named tuples; SIMT reads a field by its position.
- B6 (auto): a tuple argument holding arrays failed to compile instead of falling back: the
  SIMT executor now refuses it before typing, and auto falls back to the per-thread executor.
- B7 (per-thread): `cuda.activemask()` in the two branches of a divergent if returned every
  lane in both. Fixed: the lanes waiting at the same call (line) make the mask.
- B8 (SIMT, doc_examples/test_montecarlo): a compactable for-range loop that ran no iteration
  (numba-cuda's `cuda.reduce` on a partial block) read its unbound counter at the loop's end
  (UnboundLocalError). Fixed: the counter is bound before the loop
  (tests/sim/test_simt_compaction.py).
- B9 (auto, doc_examples/test_laplace): an array chosen in a branch every live lane takes
  (`data = buf_0` when `step % 2 == 0`, after some threads returned) was taken as chosen per
  lane, so the kernel fell back to the per-thread executor (hundreds of seconds). Fixed: lanes
  that returned keep no claim on it (tests/sim/test_simt_coverage.py).

## Checker refinements the suite prompted

- Silent stores (race checker, both executors): `test_warp_ops.py::TestCudaWarpOperations::
  test_useful_syncwarp` failed with a race finding: after the syncwarp, lane 0's store of
  `ary[i] = ary[0]` rewrites ary[0] while lanes 1-31 load it, with no second syncwarp. The store
  writes the value lane 0 itself put there before the syncwarp, so no interleaving changes what
  a thread reads. The checker now treats a plain store of the bits an initialised element
  already holds as no access for the race rule (no conflict with loads or stores; the previous
  writer stays the last writer); a store that changes the value is checked as before, and -0.0
  over 0.0 or another NaN payload is a change. The rule, and the races it can hide, are in
  grader/sim/checks/silent_stores.py's docstring and docs/SIMULATOR_DESIGN.md; tests in
  `tests/sim/test_silent_store.py`.
'''
