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
