"""Timing from the GPU's device process (grader.device.gpu_server, grader.judge.gpu_timing).

The student's runner holds no GPU: its kernels are launched, timed and reported by a device process
of the grader's, so a runner that forges times, answers timed calls from a cache, or computes the
answer on the host at the timed sizes gains nothing. No GPU here: numba's stock simulator stands in
for it in the device process (NUMBA_ENABLE_CUDASIM=1, `Limits.on_stock_simulator`), which proves the
code path and the judgements, never a real time (its "times" are the host's clock around each
launch).
"""

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from grader.device.gpu_server import accesses_of
from grader.errors import StudentCodeError
from grader.judge.correctness import WrongAnswer, expect_close
from grader.judge.gpu_timing import time_calls
from grader.sandbox import Limits

from sandbox_support import solution_student, students_of

KERNELS = """
    import numpy as np
    from numba import cuda

    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    @cuda.jit
    def copy(src, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = src[i]

    def add_on_gpu(a, b):
        out = cuda.device_array(a.shape, a.dtype)
        add[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), out)
        return out.copy_to_host()
"""


@pytest.fixture
def timer(tmp_path):
    make, made = students_of(tmp_path, KERNELS, Limits.on_stock_simulator(call_timeout_s=120), gpu_device=True)
    yield make
    for s in made:
        s.close()


def _sets(n=300):
    rng = np.random.default_rng(5)
    return [(rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)) for _ in range(2)]


def _add_check(args, out):
    expect_close(out, args[0] + args[1], rtol=1e-6, what="add")


FEW = {"min_repeats": 4, "max_repeats": 4, "target": 0.0}


def test_each_launch_is_timed_by_the_device_and_every_timed_answer_is_checked(timer):
    s = timer("def vector_add(a, b):\n    return add_on_gpu(a, b)\n")
    checked = []
    timing = time_calls(s, "vector_add", _sets(), lambda args, out: (checked.append(args), _add_check(args, out)),
                        **FEW)
    assert len(timing.times_ms) == 4 and timing.launches_per_call == 1 and all(t > 0 for t in timing.times_ms)
    assert timing.device == "numba's stock simulator" and timing.stopped == "repeat cap"
    assert len(checked) == 4
    # calls 3 and 4 had inputs of their own: the sets' values drawn again, never a set itself
    assert not any(np.array_equal(checked[k][0], checked[j][0]) for k in (2, 3) for j in (0, 1))
    result = s.call("vector_add", *_sets()[0], flush=True)
    launch = result.launches[0]
    assert launch["kernel"] == "add" and launch["ms"] > 0 and launch["executor"] == "gpu"
    assert launch["arrays_written"] == ["out"] and launch["arrays_read"] == ["a", "b"]


def test_kernel_times_longer_than_the_judges_wait_for_the_call_are_refused(timer, monkeypatch):
    # (the device process is the grader's own: a defence in depth, the judge's clock over each call)
    s = timer("def vector_add(a, b):\n    return add_on_gpu(a, b)\n")
    call = s.call

    def slow_clock(*args, **kwargs):
        result = call(*args, **kwargs)
        for launch in result.launches:
            launch["ms"] = 3.6e6
        return result

    monkeypatch.setattr(s, "call", slow_clock)
    with pytest.raises(RuntimeError, match="ms of kernels for a call the judge waited"):
        time_calls(s, "vector_add", _sets(), _add_check, **FEW)


def test_host_arrays_streams_views_and_events_are_served_on_the_gpus_device(timer):
    # what host code does besides cuda.to_device: numba copies a host array argument to the
    # device and back; slices, reshapes, a stream, the student's own events
    s = timer("""
        def vector_add(a, b):
            stream = cuda.stream()
            start, end = cuda.event(), cuda.event()
            start.record(stream)
            d_a = cuda.to_device(a.reshape(1, -1), stream=stream).reshape(a.size)
            out = np.zeros_like(a)
            add[(a.size + 127) // 128, 128, stream](d_a[:], b, out)  # b and out: host arrays
            end.record(stream)
            end.synchronize()
            assert cuda.event_elapsed_time(start, end) >= 0
            return out
    """)
    timing = time_calls(s, "vector_add", _sets(), _add_check, **FEW)
    assert timing.launches_per_call == 1 and len(timing.times_ms) == 4


def test_a_runner_that_forges_its_event_times_changes_nothing(timer):
    # the runner's own events and the harness that used them, patched to say 1 ns: the times the
    # judge gets are the device process's, which the student's code never reaches
    s = timer("""
        import grader.backends.gpu as harness
        from numba.cuda import simulator  # noqa: F401  (whatever numba module is there)

        class Instant:
            def record(self, stream=0): pass
            def synchronize(self): pass
            def elapsed_time(self, other): return 1e-6
        cuda.event = lambda timing=True: Instant()
        harness.time_call = lambda *a, **k: None

        def vector_add(a, b):
            return add_on_gpu(a, b)
    """.replace("        from numba.cuda import simulator  # noqa: F401  (whatever numba module is there)\n", ""))
    timing = time_calls(s, "vector_add", _sets(), _add_check, **FEW)
    assert min(timing.times_ms) > 1e-3, timing.times_ms  # (the stock simulator's launch: milliseconds)


def test_answers_from_an_earlier_call_fail_the_timed_calls(timer):
    # a runner that launches the kernel but answers each input set from its first call
    s = timer("""
        seen = {}

        def vector_add(a, b):
            out = add_on_gpu(a, b)
            return seen.setdefault(a.size, out)
    """)
    with pytest.raises(WrongAnswer, match=r"timed call 2 on the GPU: add"):
        time_calls(s, "vector_add", _sets(), _add_check, **FEW)


def test_an_answer_the_host_computed_at_the_timed_sizes_fails(timer):
    # honest at the small sizes the simulator proves, the host's sum copied through a kernel at the
    # timed ones: the device's data flow sees what the host copied to the GPU come back
    s = timer("""
        def vector_add(a, b):
            if a.size < 100:
                return add_on_gpu(a, b)
            out, scratch = cuda.device_array(a.shape, a.dtype), cuda.device_array(a.shape, a.dtype)
            add[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), scratch)  # for show
            copy[(a.size + 127) // 128, 128](cuda.to_device(a + b), out)
            return out.copy_to_host()
    """)
    assert np.array_equal(s.call("vector_add", *_sets(50)[0]).value, sum(_sets(50)[0]))
    with pytest.raises(WrongAnswer, match="timed call 1 on the GPU: the answer is what the host copied to the GPU"):
        time_calls(s, "vector_add", _sets(), _add_check, **FEW)


def test_a_kernels_error_in_the_device_process_is_the_students_and_the_next_timing_starts_afresh(timer):
    s = timer("""
        @cuda.jit
        def unguarded(a, b, out):
            i = cuda.grid(1)
            out[i] = a[i] + b[i]

        def vector_add(a, b):
            out = cuda.device_array(a.shape, a.dtype)
            unguarded[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), out)
            return out.copy_to_host()

        def fine(a, b):
            return add_on_gpu(a, b)
    """)
    with pytest.raises(StudentCodeError, match="IndexError"):  # (on a GPU: an illegal address, the context lost)
        time_calls(s, "vector_add", _sets(), _add_check, **FEW)
    assert len(time_calls(s, "fine", _sets(), _add_check, **FEW).times_ms) == 4


def test_what_a_kernel_reads_and_writes_is_read_from_its_code():
    source = """
        def k(a, b, out, hits, n, scratch, alias):
            i = cuda.grid(1)
            if i < out.size and i < a.shape[0]:
                out[i] = a[i] + b[i, 0]
            hits[i] += 1
            cuda.atomic.add(n, 0, 1)
            t = alias
            t[0] = 1
            if scratch.ndim == 1:
                pass
    """
    node = ast.parse(textwrap.dedent(source)).body[0]
    found = accesses_of(node, ["a", "b", "out", "hits", "n", "scratch", "alias"])
    assert found == {"a": (True, False), "b": (True, False), "out": (False, True), "hits": (True, True),
                     "n": (True, True), "scratch": (False, False), "alias": (True, True)}
    assert accesses_of(None, ["x"]) == {"x": (True, True)}


def test_a_runners_background_launches_wait_for_its_next_call(timer):
    # a thread of the student's that keeps launching kernels: the GPU's device process serves its
    # runner only within a call the judge began, so nothing of the student's runs on the GPU while
    # the judge times something else (another grade, the reference)
    import time

    s = timer("""
        import threading, time

        done = []

        def hog():
            d_a = cuda.to_device(np.ones(64, np.float32))
            d_out = cuda.device_array(64, np.float32)
            while True:
                add[1, 64](d_a, d_a, d_out)
                done.append(time.monotonic())

        def start():
            threading.Thread(target=hog, daemon=True).start()
            time.sleep(0.5)
            return len(done)

        def stamps():
            time.sleep(0.5)
            return np.array(done)
    """)
    assert s.call("start").value > 0  # launched within the call
    quiet_from = time.monotonic() + 0.2
    time.sleep(1.5)
    quiet_to = time.monotonic() - 0.05
    stamps = s.call("stamps").value
    assert stamps.size > 2 and not np.any((stamps > quiet_from) & (stamps < quiet_to)), \
        np.round(stamps[(stamps > quiet_from - 0.5)] - quiet_from, 3)


def test_ranks_streams_and_copies_between_ranks_on_the_gpus_device(tmp_path):
    # the all-reduce's ranks (grader.backends.ranks) tell each rank's memory by its address: the
    # GPU's device process gives the device pointers (all addresses 0 made every copy one rank's)
    from grader.judge.collective import expect_allreduced, rank_inputs

    s = solution_student(tmp_path, "allreduce", "sim", Limits.on_stock_simulator(call_timeout_s=300),
                         gpu_device=True)
    try:
        inputs = rank_inputs(np.random.default_rng(2), 3, 37, np.float32)
        result = s.call_ranks("allreduce_pipelined", inputs)
        expect_allreduced(result.value, inputs, "pipelined")
        assert result.launches and all(launch["ms"] >= 0 for launch in result.launches)
    finally:
        s.close()


def test_the_runner_reports_the_real_gpus_attributes_the_device_process_sends():
    from grader.sim.devices import Devices

    devices = Devices(2)
    for device in devices.devices:
        device.describe({"MULTIPROCESSOR_COUNT": 108, "MAX_THREADS_PER_BLOCK": 1024, "compute_capability": [8, 0],
                         "name": "NVIDIA A100-SXM4-80GB", "WARP_SIZE": True, "MAX_SHARED_MEMORY_PER_BLOCK": -1})
    first = devices.devices[0]
    assert (first.MULTIPROCESSOR_COUNT, first.compute_capability, first.name) == (108, (8, 0), "NVIDIA A100-SXM4-80GB")
    assert first.WARP_SIZE == 32 and first.MAX_SHARED_MEMORY_PER_BLOCK == 48 * 1024  # (nonsense ignored)


def test_a_kernels_fault_surfacing_at_the_calls_end_is_a_finding_of_that_call(tmp_path):
    # a kernel's illegal address shows at the first synchronization after it: for a call that
    # made none, at its end, where the device reads the launches' times. Then it is that call's
    # finding ("context_lost", in the student's words) and the device process lives on (it ended
    # with the exception, and the judge blamed the grader). In a process of its own: numba's
    # stock simulator stands in for the GPU, and a CUDA error of code 700 is raised at the end
    script = tmp_path / "fault.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        sys.path.insert(0, sys.argv[1])
        from grader.device.gpu_server import GpuDevice

        class CudaAPIError(Exception):  # (numba-cuda's driver error: its name and its code)
            code = 700

        class FaultingEnd:
            def synchronize(self):
                raise CudaAPIError("CUDA_ERROR_ILLEGAL_ADDRESS")

        device = GpuDevice(1, "/workspace")
        device.judge({"op": "begin", "call": 1})
        device._timed.append(({"kernel": "k"}, None, FaultingEnd(), 0.0))
        first = device.judge({"op": "end", "call": 1})
        device.judge({"op": "begin", "call": 2})
        second = device.judge({"op": "end", "call": 2})
        print(json.dumps([first["findings"], second["findings"]]))
    """))
    done = subprocess.run([sys.executable, str(script), str(Path(__file__).resolve().parents[1])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    assert [f["kind"] for f in first] == ["context_lost"] and second == []
    assert first[0]["message"].startswith("illegal memory access: your kernel read or wrote outside an allocation")


def test_an_index_numbas_stock_simulator_refused_is_told_as_out_of_bounds_not_as_a_raise():
    """(audit) On the gpu path over numba's stock simulator, an out-of-bounds write read "raised at
    ...: numba ignores a kernel's raise unless debug=True": the student wrote no raise."""
    from grader.device.client import _raise

    with pytest.raises(IndexError) as found:
        _raise({"type": "IndexError", "where": "vector_add.py:75 in add_kernel",
                "message": "tid=[59, 0, 0] ctaid=[0, 0, 0]: index 100000059 is out of bounds for axis 0 with size 1"})
    said = str(found.value)
    assert "an index outside the array" in said and "raise" not in said, said
    with pytest.raises(ValueError, match="numba ignores a kernel's raise"):  # the kernel's own raise
        _raise({"type": "ValueError", "where": "k.py:3 in k", "message": "bad"})
