"""print() in a kernel (learner audit): under `gpugrade check` the kernels run in the device
process, whose stdout no one reads, so a student's debugging prints vanished and the only sign was a
slower time naming no line. What kernels print reaches the test's feedback, bounded and marked as
theirs, never grade-deciding; the slow verdict names the lines doing the extra work."""

import json
import subprocess
import sys
from pathlib import Path

from grader.device.kernel_output import MAX_LINE, KernelOutput
from grader.judge import printed
from grader.wire import DeviceReport
from grader.wire.messages import PRINTED_LINES

ROOT = Path(__file__).resolve().parents[1]
SOLVED = (ROOT / "solutions" / "vector_add.py").read_text()


def _with(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new, 1)


def _line_of(source: str, text: str) -> int:
    return next(number for number, line in enumerate(source.splitlines(), start=1) if text in line)


def test_kernel_prints_reach_the_tests_feedback_and_the_slow_verdict_names_the_lines(tmp_path):
    # stage 1: right, but loads a[i] and b[i] twice (a second load of one array alone stays within the
    # threshold: the reference's one pair of loads a thread is latency-bound, the model's DRAM round trips)
    source = _with(SOLVED, "    if i < out.size:\n        out[i] = a[i] + b[i]",
                   "    if i < out.size:\n        print('thread', i, a[i], b[i])\n        out[i] = a[i] + b[i]")
    loop = source[source.index("    n = out.size\n    # registers"):source.index("                out[i] = xa[k] + xb[k]\n")]
    source = _with(source, loop + "                out[i] = xa[k] + xb[k]\n",  # stage 2: a plain loop, one past the end
                   "    for i in range(start, out.size + 1, stride):\n        if start == 0:\n"
                   "            print('start', i)\n        out[i] = a[i] + b[i]\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "vector_add.py").write_text(source)
    out = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "grader", "grade", str(tmp_path / "sub"), "vector_add", "--backend",
                           "sim", "--format", "json", "--output", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    tests = {t["name"]: t for t in json.loads(out.read_text())["tests"]}

    passed = tests["vector_add::edge_sizes[n=33]"]
    assert passed["status"] == "passed" and passed["score"] == passed["max_score"]  # feedback, not grade
    lines = passed["output"].splitlines()
    assert lines[0].startswith("what your kernels printed")
    assert lines[1].startswith(printed.MARK + "thread 0 ") and len(lines) == 1 + PRINTED_LINES + 1
    assert lines[-1] == "  ... 13 more lines"

    slow = tests["vector_add::keeps_up_with_the_reference"]["output"]
    head, rest = slow.split("\n\n", 1)
    store, shown = _line_of(source, "        out[i] = a[i] + b[i]"), _line_of(source, "print('thread'")
    assert head.startswith("slower than the reference: ")
    assert (f"its kernels load 2.0x the reference's elements from global memory (1,048,576 against 524,288), by "
            f"line: line {shown} of kernel 'add_kernel' (50%), line {store} of kernel 'add_kernel' (50%); ") in head
    assert rest.startswith("what your kernels printed") and f"\n{printed.MARK}thread 0 " in rest

    failed = tests["vector_add::grid_stride_sizes[n=33]"]["output"]
    head, rest = failed.split("\n\n", 1)
    assert "out-of-bounds access" in head  # the finding first; what was printed before it, after
    assert rest.startswith("what your kernels printed") and rest.endswith(f"\n{printed.MARK}start 0")


def test_the_device_keeps_the_first_lines_each_cut_and_counts_the_rest():
    kept = KernelOutput()
    with kept.capture():
        for n in range(PRINTED_LINES + 5):
            print("x" * (MAX_LINE + 50) if n == 0 else f"line {n}")
        print("unfinished", end="")
    assert kept.lines[0] == "x" * MAX_LINE + " ..." and kept.lines[1] == "line 1"
    assert len(kept.lines) == PRINTED_LINES and kept.more == 6  # 4 lines, and the unfinished one
    report = DeviceReport.parse({"ok": True, "call": 1, **kept.report()})
    assert report.printed == tuple(kept.lines) and report.printed_more == 6


def test_printed_lines_keep_their_mark_whatever_they_hold_and_a_test_takes_its_own_once():
    printed.take_printed()
    forged = "x\u2028full marks: 25/25\rok"
    printed.heard(DeviceReport(1, [], [], [], [], printed=(forged,) * (PRINTED_LINES - 1), printed_more=3))
    printed.heard(DeviceReport(2, [], [], [], [], printed=("a", "b"), printed_more=0))
    block = printed.take_printed()
    lines = block.splitlines()
    assert all(line.startswith(printed.MARK) for line in lines[1:-1]), lines
    assert lines[1] == printed.MARK + "x\\u2028full marks: 25/25\\rok" and lines[-2] == printed.MARK + "a"
    assert lines[-1] == "  ... 4 more lines" and len(lines) == 1 + PRINTED_LINES + 1
    assert printed.take_printed() == ""
