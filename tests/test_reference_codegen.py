"""What numba's compiler makes of the reference kernels, where the lesson depends on it.

The simulator models memory, not instructions (docs/PERF_MODEL.md), so what only instruction
issue shows is checked here on the PTX (numba-cuda's `compile_ptx`, no GPU needed): on an H200 the
coarsened matmul reference with one 32-step k loop was issue-bound and slower than the tiled one.
"""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _instructions_per_fma_in_loops(ptx: str) -> float:
    """Instructions per `fma.rn.f32` over the PTX loops (a label and a branch back to it) that hold FMAs."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\$L__BB\d+_\d+):", line.strip()))}
    instructions = fmas = 0
    for i, line in enumerate(lines):
        m = re.search(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if m and labels.get(m.group(1), i) < i:
            body = [x for x in lines[labels[m.group(1)]:i + 1] if re.match(r"^\s+[@a-z]", x)]
            if any("fma.rn.f32" in x for x in body):
                instructions += len(body)
                fmas += sum("fma.rn.f32" in x for x in body)
    assert fmas, "no loop with a multiply-add"
    return instructions / fmas


def _ptx(source: str, name: str) -> str:
    from numba import cuda, float32

    namespace: dict = {"__name__": "reference_codegen"}
    exec(compile(source, name, "exec"), namespace)
    kernel = namespace[name]
    ptx, _ = cuda.compile_ptx(getattr(kernel, "py_func", kernel), (float32[:, :],) * 3, cc=(9, 0))
    return ptx


def test_the_coarsened_matmul_reference_unrolls_its_k_loop_whole():
    """About 3 PTX instructions per multiply-add (tile loads and barriers included); the same kernel
    with one 32-step k loop keeps 64-bit index arithmetic in it, 8.5 per multiply-add."""
    pytest.importorskip("numba.cuda")
    source = (ROOT / "solutions" / "matmul.py").read_text()
    sys.path.insert(0, str(ROOT / "solutions"))
    try:
        unrolled = _instructions_per_fma_in_loops(_ptx(source, "matmul_coarsened_kernel"))
        runs = "        for k1 in range(0, BIG_TILE, UNROLL):\n            for k in range(k1, k1 + UNROLL):\n"
        assert source.count(runs) == 1
        one_loop = source.replace(runs, "        for k in range(BIG_TILE):\n            if True:\n")
        rolled = _instructions_per_fma_in_loops(_ptx(one_loop, "matmul_coarsened_kernel"))
    finally:
        sys.path.remove(str(ROOT / "solutions"))
    assert unrolled < 3.5, unrolled
    assert rolled > 2 * unrolled, (rolled, unrolled)


def test_the_grid_stride_vector_add_reference_issues_its_loads_ahead():
    """Stage 2's reference: the eight loads of ITEMS_IN_FLIGHT elements come before the first store
    in the PTX, one DRAM round trip a loop iteration; the plain loop's store comes between one
    element's loads and the next's, a round trip an element (grader/sim/compile_check/issue.py)."""
    pytest.importorskip("numba.cuda")
    from numba import cuda, float32

    from grader.sim.compile_check.issue import profile

    source = (ROOT / "solutions" / "vector_add.py").read_text()
    start = source.index("    n = out.size\n    # registers")
    end = source.index("### END SOLUTION", start)
    plain = source[:start] + "    for i in range(start, out.size, stride):\n        out[i] = a[i] + b[i]\n    " + source[end:]

    def loop_round_trips(text: str) -> tuple[list[int], int]:
        path = ROOT / "solutions" / "vector_add.py"  # line info names this file: the anchors are read from it
        namespace: dict = {"__name__": "reference_codegen", "__file__": str(path)}
        exec(compile(text, str(path), "exec"), namespace)
        kernel = namespace["add_grid_stride_kernel"]
        ptx, _ = cuda.compile_ptx(kernel.py_func, (float32[::1],) * 3, cc=(9, 0), lineinfo=True)
        prof = profile(ptx, str(path))
        trips = [block[3] for block in prof["blocks"] if block[1] >= 0 and block[3]]
        loads = sum(n for block in prof["blocks"] if block[1] >= 0
                    for key, n in block[2].items() if key.startswith("global load"))
        return trips, loads

    trips, loads = loop_round_trips(source)
    assert (trips, loads) == ([1], 8), (trips, loads)  # one loop, 8 loads, one round trip
    trips, loads = loop_round_trips(plain)
    # numba unrolls the plain loop by 4 (4 round trips) beside a remainder loop (1)
    assert sorted(trips) == [1, 4] and loads == 10, (trips, loads)
