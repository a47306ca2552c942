"""Why a numba-cuda test does not pass on grader.sim: one entry per known case.

Keys are fnmatch patterns over node ids (`test_module.py::Class::test`); the first match wins.
Categories:
- "compiled code": the test inspects PTX/LLVM/SASS or compiles for a real architecture
  (inspect_asm, inspect_llvm, compile_ptx for sm_100, ...): out of scope for a simulator.
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
    ("test_warp_ops.py::*::test_*_const_mode_val", "compiled code",
     "reads `inspect_llvm()` after the launch (the simulator compiles nothing)"),
    ("test_sync.py::*::test_threadfence*_codegen", "compiled code",
     "checks `inspect_asm()` for membar instructions after a passing launch"),
    ("test_atomics.py::*::test_atomic_add_double*", "compiled code",
     "the launch passes; then `assertCorrectFloat64Atomics` reads `inspect_asm()` for "
     "atom/red.f64 instructions"),
    ("test_localmem.py::*::test_local_array", "compiled code",
     "checks `inspect_asm()` for `.local` before launching"),
    ("test_localmem.py::*::test_*_dtype", "compiled code",
     "reads `inspect_llvm()` for the alloca's type"),
    ("test_localmem.py::*::test_type_with_struct_data_model", "compiled code",
     "reads `inspect_llvm()` for the alloca's type"),
    ("test_intrinsics.py::*::test_*_ptx", "compiled code", "checks `inspect_asm()` (PTX)"),
    ("test_intrinsics.py::*::test_selp", "compiled code",
     "checks `inspect_asm()` for selp instructions"),
    # --- size
    ("test_intrinsics.py::*::test_issue_9229", "size",
     "launches 22,121,216 blocks x 256 threads (5.7e9 threads) to overflow int32 thread ids; "
     "the simulator's per-thread counters alone would need 42 GiB. Deselected everywhere."),
    ("test_laplace.py::*", "size",
     "1000 launches of a 256x256 Jacobi step (the GPU configuration): minutes on a CPU "
     "simulator; run only by `numba_suite.py --full`."),
    ("test_reduction.py::*::test_sum_reduce", "size",
     "cuda.Reduce over 3.2 million elements in 15 sizes (GPU configuration): ~25 s; run only "
     "by `numba_suite.py --full`, not in the timed suite."),
    # --- checker findings
    ("test_warp_ops.py::*::test_useful_syncwarp", "checker",
     "race checker: after the syncwarp, lane 0 stores ary[0] (`ary[i] = ary[0]`) while lanes "
     "1-31 load ary[0], with nothing ordering them: a real (benign: same value) race"),
    ("test_sm.py::*::test_issue_2393", "checker",
     "uninitialised-read checker: the kernel sums a shared array it never writes (the test only "
     "checks that it compiles and runs); every block also stores d_block_costs[0]"),
    # --- gaps
    ("test_intrinsics.py::*::test_h*", "gap", "cuda.fp16 intrinsics are not simulated"),
    ("test_intrinsics.py::*::test_*fp16*", "gap", "cuda.fp16 intrinsics are not simulated"),
    ("test_intrinsics.py::*::test_multiple_float16_comparisons", "gap",
     "cuda.fp16 intrinsics are not simulated"),
    ("*::test_*type_validation", "gap",
     "expects a TypingError from eager `cuda.jit(sig)`: the simulator does not type "
     "a kernel at decoration"),
    ("*::test_invalid_*", "gap",
     "expects a TypingError from eager `cuda.jit(sig)`: the simulator does not type "
     "a kernel at decoration"),
    ("test_intrinsics.py::*::test_nonliteral_grid*_error", "gap",
     "expects a TypingError from eager `cuda.jit(sig)`: the simulator does not type "
     "a kernel at decoration"),
    ("test_localmem.py::*::test_struct_model_type_arr", "gap",
     "local arrays of a StructModel extension type cannot be represented as a NumPy dtype"),
    ("test_multigpu.py::*::test_with_context_peer_copy", "gap",
     "`cuda.current_context()` is not simulated (CudaSupportError at driver init)"),
    # --- bugs (reproducers in docs/CONFORMANCE.md)
    ("test_atomics.py::*::test_atomic_cas*_2dim", "bug",
     "B1 (SIMT): indexing with a tuple variable (`old[gid]`, gid = cuda.grid(2))"),
    ("test_intrinsics.py::*::test_clz_*", "bug",
     "B2: an eager signature's scalar types are ignored (int32 argument typed int64)"),
    ("test_intrinsics.py::*::test_brev_u4", "bug",
     "B2: an eager signature's scalar types are ignored (uint32 argument typed int64)"),
    ("test_intrinsics.py::*::test_popc_*", "bug", "B3 (SIMT): cuda.popc on unsigned integers"),
    ("test_intrinsics.py::*::test_brev_u8", "bug", "B3 (SIMT): cuda.brev on unsigned integers"),
    ("test_intrinsics.py::*::test_round_to_*_halfway", "bug",
     "B4 (SIMT rejects round's ndigits) and B2 (0.3425 declared float32 is typed float64)"),
    ("test_intrinsics.py::*::test_round_to_*", "bug",
     "B4: round(x, ndigits): SIMT rejects ndigits; the per-thread executor returns nan/inf "
     "where numba returns x when x * 10**ndigits overflows"),
    ("test_array_args.py::*::test_tuple_of_array*", "bug",
     "B6 (SIMT / auto): a tuple argument holding arrays is mistyped (CompileError) instead of "
     "falling back to the per-thread executor"),
    ("test_warp_ops.py::*::test_activemask", "bug",
     "B7 (per-thread): cuda.activemask() in the two branches of a divergent if returns "
     "0xffffffff in both instead of the lanes of each branch"),
    ("test_array_args.py::*::test_namedunituple", "bug", "B5: namedtuple arguments lose their "
     "field names"),
    ("test_array_args.py::*::test_namedtuple", "bug", "B5: namedtuple arguments lose their "
     "field names"),
]


def classify(nodeid: str) -> tuple[str, str] | None:
    for pattern, category, reason in REASONS:
        if fnmatch.fnmatchcase(nodeid, pattern):
            return category, reason
    return None


REPRODUCERS = '''## Reproducers of the simulator bugs

Each runs as a script (`import grader.sim as sim; sim.install(executor=...)` first).

B1 (SIMT only; per-thread is right): an index held in a tuple variable is taken as one index.
```python
@cuda.jit
def k(a):
    g = cuda.grid(2)
    if g[0] < a.shape[0] and g[1] < a.shape[1]:
        a[g] = g[0] * 10 + g[1]
k[(1, 1), (4, 4)](np.zeros((4, 4), np.int32))
# SimError: kernel 'k' at ...: array 'a' has 2 dimensions, indexed with 1
```

B2 (both executors): the scalar types of an eager signature are ignored; scalars are typed
from the Python value (int -> int64), where numba converts them to the declared type.
```python
def clz(ary, c):
    ary[0] = cuda.clz(c)
k = cuda.jit("void(int32[:], int32)")(clz)
a = np.zeros(1, np.int32); k[1, 1](a, 0x00100000)
# a[0] == 43 (64-bit clz), numba on a GPU: 11. With a uint32 signature, cuda.brev(0x30F0)
# overflows (per-thread: OverflowError) or fails (SIMT: ValueError).
```

B3 (SIMT only): cuda.popc / cuda.brev on unsigned integers.
```python
@cuda.jit
def popc(ary, c):
    ary[0] = cuda.popc(c)
popc[1, 1](np.zeros(1, np.uint32), np.uint32(0xF0F0))
# ValueError: Changing the dtype of a 0d array is only supported if the itemsize is unchanged
```

B4: `round(x, ndigits)`. SIMT: `TypeError: Ops.builtin_round() takes 2 positional arguments
but 3 were given`. Per-thread: numba returns x unchanged when x * 10**ndigits overflows
(round(np.float32(3.4e38), 300) == 3.4e38); the simulator gives nan (float32) or inf (float64).
The halfway case (0.3425 declared float32, 3 digits: numba 0.343, simulator 0.342) is B2.
```python
@cuda.jit
def rnd(ary, c, nd):
    ary[0] = round(c, nd)
rnd[1, 1](np.zeros(1, np.float32), np.float32(0.34567), 2)
```

B5 (both executors): namedtuple arguments become plain tuples before typing.
```python
Point = namedtuple("Point", ("x", "y"))
@cuda.jit
def nt(p, out):
    out[0] = p.x
nt[1, 1](Point(3, 4), np.zeros(2, np.int64))
# CompileError: kernel 'nt' would not compile for a GPU: Unknown attribute 'x' of type
# UniTuple(int64 x 2)
```

B6 (auto; seen while grader/sim/simt had uncommitted changes): a tuple argument holding arrays.
With executor "auto" numba-cuda's test failed with `CompileError: ... No implementation of
function len found for signature: len(float64)`; with executor "simt" the same kernel now raises
`NotSimulatedError: the SIMT executor does not handle it: an array inside a tuple argument`,
which "auto" should turn into a fallback to the per-thread executor (which gets it right).
```python
@cuda.jit
def f(x):
    i = cuda.grid(1)
    if i < len(x[0]):
        x[0][i] = x[1][i] + x[2][i]
x0 = np.zeros(10); f[1, 10]((x0, np.ones(10), np.full(10, 3.0)))   # x0 == 4
```

B7 (per-thread only): `cuda.activemask()` in divergent branches.
```python
@cuda.jit
def am(x):
    i = cuda.grid(1)
    if i % 2 == 0:
        x[i] = cuda.activemask()
    else:
        x[i] = cuda.activemask()
out = np.zeros(32, np.uint32); am[1, 32](out)
# per-thread: out[0] == out[1] == 0xffffffff; SIMT and a GPU: 0x55555555 and 0xaaaaaaaa
```
'''
