"""Instruction issue: the PTX's basic blocks weighed by the simulator's per-line counts
(grader/sim/compile_check/issue.py), and the performance model's issue limit."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from grader import perf_model
from grader.judge.perf import _comparable
from grader.sim.compile_check.issue import block_runs, load_round_trips, profile, warp_instructions

ROOT = Path(__file__).resolve().parents[1]

# numba's shape of a kernel: an entry block, a loop (unrolled twice: two copies of line 12's load),
# a 64-bit shuffle (two 32-bit halves) outside it, a store merged from both arms of an `if` (line 0),
# a call spanning lines, and an instruction of another file
PTX = """
.version 8.5
.target sm_90
.address_size 64

.visible .entry _Z6kernel(
	.param .u64 _Z6kernel_param_0
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<9>;
	.reg .b64 	%rd<9>;
	.loc	1 10 1
	ld.param.u64 	%rd1, [_Z6kernel_param_0];
	mov.u32 	%r1, %tid.x;
	setp.ge.s32 	%p1, %r1, 4;
	@%p1 bra 	$L__BB0_3;

$L__BB0_2:
	.loc	1 12 1
	ld.global.f32 	%f1, [%rd1];
	ld.global.f32 	%f2, [%rd1+4];
	.loc	1 11 1
	add.s64 	%rd1, %rd1, 8;
	setp.lt.s64 	%p2, %rd1, %rd2;
	@%p2 bra 	$L__BB0_2;

$L__BB0_3:
	.loc	1 14 1
	shfl.sync.down.b32 	%r3|%p3, %r1, %r5, %r6, %r7;
	shfl.sync.down.b32 	%r4|%p3, %r2, %r5, %r6, %r7;
	.loc	2 99 1
	ld.shared.f32 	%f3, [%rd3];
	.loc	1 0 0
	st.shared.v2.f32 	[%rd4], {%f1, %f2};
	{ // callseq 0
	.param .b64 param0;
	st.param.b64 	[param0+0], %rd1;
	call.uni
	vprintf,
	(
	param0
	);
	} // callseq 0
	.loc	1 16 1
	st.global.f32 	[%rd5], %f3;
	ret;

}
	.file	1 "/course/kernel.py"
	.file	2 "/elsewhere/helper.py"
"""


def test_profile_reads_blocks_loops_and_the_lines_anchors():
    prof = profile(PTX, "/course/kernel.py")
    assert prof["loops"] == [-1]
    # the entry block (ends at its branch); the loop; what follows it
    assert prof["blocks"] == [
        [4, -1, {}, 0, 0, 0],
        [5, 0, {"global load 12": 2}, 1, 0, 0],  # two loads, one DRAM round trip; no float64 arithmetic
        # two shuffle halves are one collective; the other file's load, line 0's store and the
        # call's parameter are not anchors; the call is one instruction
        [8, -1, {"warp op 14": 1, "global store 16": 1}, 0, 0, 0],
    ]


def test_a_block_runs_as_often_as_its_lines_requests_over_their_copies():
    prof = profile(PTX, "/course/kernel.py")
    lines = [{"line": 12, "space": "global", "kind": "load", "requests": 40, "sectors": 160},
             {"line": 16, "space": "global", "kind": "store", "requests": 8, "sectors": 8}]
    # the loop ran 40 / 2 = 20 times; the entry block once a warp (8 warps); the last block as
    # its warp ops say (8; the store agrees, but stores only count where nothing else does)
    assert warp_instructions(prof, block_runs(prof, lines, {14: 8}, warps=8)) == 4 * 8 + 5 * 20 + 8 * 8
    # without the simulator's counts, the loop runs once a warp (its trip count is unknown)
    assert warp_instructions(prof, block_runs(prof, [], {}, warps=8)) == (4 + 5 + 8) * 8
    # the loops' alone: what the performance model's issue limit counts
    assert warp_instructions(prof, block_runs(prof, lines, {14: 8}, warps=8), loops_only=True) == 5 * 20


def test_the_issue_limit_is_a_warp_instruction_a_scheduler_a_clock():
    g = perf_model.gpu("H100")
    launch = {"grid": [132 * 8, 1, 1], "block": [256, 1, 1],
              "counters": {"loop_warp_instructions": 4e9, "global_load_sectors": 1000}}
    m = perf_model.launch_time(launch, g, steady=True)
    assert m.bound == "issue"
    assert m.parts["issue"] == pytest.approx(4e9 / (g.sms * 4 * g.clock_hz))


def test_instructions_count_on_both_sides_of_a_comparison_or_on_neither():
    """Both counters read from the compiled code (loop instructions, DRAM round trips)."""
    with_issue = {"grid": [1, 1, 1], "block": [32, 1, 1],
                  "counters": {"loop_warp_instructions": 10, "loop_fp64_instructions": 0, "loop_fp64_conversions": 0,
                               "load_round_trips": 3}}
    without = {"grid": [1, 1, 1], "block": [32, 1, 1], "counters": {}}
    mine, theirs = _comparable([with_issue], [without])
    assert not {"loop_warp_instructions", "loop_fp64_instructions", "load_round_trips"} & set(mine[0]["counters"])
    # a recording made before float64 instructions were counted: neither side counts any of them
    before = {**with_issue, "counters": {"loop_warp_instructions": 10, "load_round_trips": 3}}
    mine, theirs = _comparable([with_issue], [before])
    assert not {"loop_warp_instructions", "loop_fp64_instructions", "load_round_trips"} & set(mine[0]["counters"])
    mine, theirs = _comparable([with_issue], [with_issue])
    assert mine[0]["counters"]["loop_warp_instructions"] == 10 and mine[0]["counters"]["load_round_trips"] == 3


def _modelled_coarsened(source: str, tmp_path: Path, name: str, gpu: str = "H100"):
    return perf_model.call_time(_coarsened_launches(source, tmp_path, name), perf_model.gpu(gpu), steady=True)


def _coarsened_launches(source: str, tmp_path: Path, name: str) -> list[dict]:
    import grader.sim as sim

    (tmp_path / f"{name}.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    sys.path.insert(0, str(ROOT / "solutions"))
    try:
        rng = np.random.default_rng(7)
        A = rng.standard_normal((64, 80)).astype(np.float32)
        B = rng.standard_normal((80, 96)).astype(np.float32)
        with sim.installed(compile_check=True):
            module = importlib.import_module(name)
            with sim.trace() as launches:
                C = module.matmul_coarsened(A, B)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
        return [r.summary() for r in launches]
    finally:
        sys.path.remove(str(tmp_path))
        sys.path.remove(str(ROOT / "solutions"))
        sys.modules.pop(name, None)


def test_a_k_loop_the_compiler_left_rolled_is_modelled_issue_bound(tmp_path):
    """The coarsened matmul with one 32-step k loop (unrolled by 4, its index arithmetic kept):
    on an H200 0.77x of the tiled kernel; the model now sees it, where the reference's runs of
    UNROLL steps stay bound by shared memory."""
    pytest.importorskip("numba.cuda")
    from grader.sim.compile_check import toolchain_status

    if not toolchain_status().ptxas:
        pytest.skip("no ptxas here: the compile check (and so the instruction profile) is off")
    source = (ROOT / "solutions" / "matmul.py").read_text()
    runs = "        for k1 in range(0, BIG_TILE, UNROLL):\n            for k in range(k1, k1 + UNROLL):\n"
    assert source.count(runs) == 1
    reference = _modelled_coarsened(source, tmp_path, "issue_reference")
    rolled = _modelled_coarsened(source.replace(runs, "        for k in range(BIG_TILE):\n            if True:\n"),
                                 tmp_path, "issue_rolled")
    assert reference.bound == "shared memory"
    assert rolled.bound == "issue"
    # the same memory traffic and shared-memory wavefronts; 2.5x the instructions
    assert rolled.parts["shared memory"] == pytest.approx(reference.parts["shared memory"])
    assert rolled.parts["issue"] > 2.5 * reference.parts["issue"]
    assert rolled.seconds > 1.5 * reference.seconds


def test_float64_arithmetic_in_a_loop_issues_at_the_rate_of_the_fp64_units(tmp_path):
    """`acc0 = 0.0`: numba makes the coarsened matmul's accumulators float64, each product converted and
    added in float64. The profile counts those instructions; the model issues them at the SM's FP64
    rates (an H100's conversions at an eighth of float32's, an L4's everything at a sixty-fourth): several
    times slower on an H100, and more than twice that on an L4."""
    pytest.importorskip("numba.cuda")
    from grader.sim.compile_check import toolchain_status

    if not toolchain_status().ptxas:
        pytest.skip("no ptxas here: the compile check (and so the instruction profile) is off")
    source = (ROOT / "solutions" / "matmul.py").read_text()
    floats = "".join(f"    acc{i} = float32(0.0)\n" for i in range(4))
    assert source.count(floats) == 1
    reference = _coarsened_launches(source, tmp_path, "fp64_reference")
    doubles = _coarsened_launches(source.replace(floats, floats.replace("float32(0.0)", "0.0")), tmp_path,
                                  "fp64_doubles")
    counted = [sum(launch["counters"]["loop_fp64_instructions"] + launch["counters"]["loop_fp64_conversions"]
                   for launch in launches)
               for launches in (reference, doubles)]
    assert counted[0] == 0 and counted[1] > 0.1 * sum(launch["counters"]["loop_warp_instructions"]
                                                       for launch in doubles)
    slower = {gpu: perf_model.call_time(doubles, perf_model.gpu(gpu), steady=True).seconds
              / perf_model.call_time(reference, perf_model.gpu(gpu), steady=True).seconds for gpu in ("H100", "L4")}
    assert 1.2 < slower["H100"] < 6 and slower["L4"] > 2 * slower["H100"], slower


def test_only_float64_arithmetic_counts_as_the_fp64_units_work():
    body = """$L__BB0_1:
\t.loc\t1 20 1
\tld.global.f64 \t%fd1, [%rd1];
\tmov.f64 \t%fd2, %fd1;
\tcvt.f64.f32 \t%fd3, %f1;
\tfma.rn.f64 \t%fd4, %fd2, %fd3, %fd4;
\tsetp.lt.f64 \t%p2, %fd4, %fd1;
\tadd.f32 \t%f2, %f1, %f1;
\tst.global.f64 \t[%rd2], %fd4;
\t@%p1 bra \t$L__BB0_1;
\tret;"""
    prof = profile(_kernel(body), "/course/kernel.py")
    # the multiply-add and the comparison; the conversion (at the FP64 units' conversion rate)
    assert [block[4:] for block in prof["blocks"]] == [[2, 1], [0, 0]]
    assert warp_instructions(prof, [10, 1], loops_only=True, only="fp64 math") == 20
    assert warp_instructions(prof, [10, 1], loops_only=True, only="fp64 conversions") == 10


def _kernel(body: str) -> str:
    return (".version 8.5\n.target sm_90\n.address_size 64\n.visible .entry k(\n.param .u64 k_param_0\n)\n{\n"
            + body + "\n}\n\t.file\t1 \"/course/kernel.py\"\n")


@pytest.mark.parametrize("body, trips", [
    # vector add's grid-stride loop, unrolled: each element's store comes before the next element's
    # loads (`out` may alias `a`): a round trip an element
    ("""$L__BB0_1:
\t.loc\t1 20 1
\tld.global.f32 \t%f1, [%rd1];
\tld.global.f32 \t%f2, [%rd2];
\tadd.f32 \t%f3, %f2, %f1;
\tst.global.f32 \t[%rd3], %f3;
\tld.global.f32 \t%f4, [%rd4];
\tld.global.f32 \t%f5, [%rd5];
\tadd.f32 \t%f6, %f5, %f4;
\tst.global.f32 \t[%rd6], %f6;
\t@%p1 bra \t$L__BB0_1;
\tret;""", 2),
    # a sum's unrolled loop: loads, each added as it comes; nothing stops ptxas from issuing all four first
    ("""$L__BB0_1:
\t.loc\t1 20 1
\tld.global.f32 \t%f1, [%rd1];
\tcvt.f64.f32 \t%fd1, %f1;
\tadd.f64 \t%fd2, %fd9, %fd1;
\tld.global.f32 \t%f2, [%rd2];
\tcvt.f64.f32 \t%fd3, %f2;
\tadd.f64 \t%fd9, %fd2, %fd3;
\t@%p1 bra \t$L__BB0_1;
\tret;""", 1),
    # an index read from memory, then the element it points at: two round trips
    ("""\t.loc\t1 20 1
\tld.global.u32 \t%r1, [%rd1];
\tmul.wide.u32 \t%rd2, %r1, 4;
\tadd.s64 \t%rd3, %rd9, %rd2;
\tld.global.f32 \t%f1, [%rd3];
\tst.global.f32 \t[%rd4], %f1;
\tret;""", 2),
    # a tile's two guarded loads (arms of `if`s, into shared memory), then the barrier: one round trip
    ("""\t.loc\t1 20 1
\t@%p1 bra \t$L__BB0_2;
\tld.global.f32 \t%f1, [%rd1];
\tst.shared.f32 \t[%rd2], %f1;
$L__BB0_2:
\t@%p2 bra \t$L__BB0_3;
\tld.global.f32 \t%f2, [%rd3];
\tst.shared.f32 \t[%rd4], %f2;
$L__BB0_3:
\tbar.sync \t0;
\tld.global.f32 \t%f3, [%rd5];
\tst.global.f32 \t[%rd6], %f3;
\tret;""", 2),
    # a store of a value that waits on nothing does not end the group
    ("""\t.loc\t1 20 1
\tld.global.f32 \t%f1, [%rd1];
\tst.global.f32 \t[%rd2], %f9;
\t@%p1 ld.global.f32 \t%f2, [%rd3];
\tadd.f32 \t%f3, %f2, %f1;
\tst.global.f32 \t[%rd4], %f3;
\tret;""", 1),
], ids=["store-between", "sum", "index-then-element", "tile-then-barrier", "independent-store"])
def test_round_trips_are_the_groups_of_loads_a_warp_waits_on(body, trips):
    prof = profile(_kernel(body), "/course/kernel.py")
    assert sum(block[3] for block in prof["blocks"]) == trips


def test_a_launchs_round_trips_weigh_each_block_by_its_runs():
    prof = profile(PTX, "/course/kernel.py")
    lines = [{"line": 12, "space": "global", "kind": "load", "requests": 40, "sectors": 160}]
    # the loop's one round trip, 20 runs (40 requests of two copies of line 12's load)
    assert load_round_trips(prof, block_runs(prof, lines, {}, warps=8)) == 20
