"""The gpu backend's rank guard (grader/backends/rank_guard.py), run for real on numba's stock
simulator standing in for one GPU that emulates N ranks, through the runner's `_call_ranks`.

The stock simulator must be enabled before numba.cuda is imported, so each body runs in a
subprocess (as tests/test_gpu_harness.py does)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

# The stock simulator's device arrays wrap NumPy arrays and have no __cuda_array_interface__,
# which Ranks reads to record who owns which memory; the host addresses stand in for device ones.
PRELUDE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from numba import cuda
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    FakeCUDAArray.__cuda_array_interface__ = property(lambda a: {**a._ary.__array_interface__, "version": 3})
    from grader.runner.serve import Runner

    runner = Runner(sys.argv[1], "gpu", 1)

    def call(module, function, count, n, dtype=np.int32):
        inputs = [np.arange(n, dtype=dtype) * 10 + (1 << r) for r in range(count)]
        reply = runner.call({"module": module, "function": function, "ranks": inputs})
        if not reply["ok"]:
            return {"ok": False, "type": reply["error"]["type"], "message": reply["error"]["message"]}
        want = sum(inputs)
        return {"ok": True, "right": [bool(np.array_equal(b, want)) for b in reply["returned"]]}
""")

STUDENT = textwrap.dedent("""
    import numpy as np
    from numba import cuda

    @cuda.jit
    def add_kernel(dst, src):
        i = cuda.grid(1)
        if i < dst.size:
            dst[i] += src[i]

    @cuda.jit
    def add_first(dst, pair):
        i = cuda.grid(1)
        if i < dst.size:
            dst[i] += pair[0][i]

    def read_other_rank(ranks, bufs):
        with ranks[0]:
            add_kernel[1, 32, ranks[0].stream](bufs[0], bufs[1])

    def read_other_rank_slice_in_a_tuple(ranks, bufs):
        with ranks[0]:
            add_first[1, 32](bufs[0][:2], (bufs[2][1:3], bufs[0][:2]))

    def on_another_ranks_stream(ranks, bufs):
        with ranks[1]:
            add_kernel[1, 32, ranks[1].stream](bufs[0], bufs[0])

    def outside_its_rank(ranks, bufs):
        with cuda.gpus[0]:  # (the all-reduce audit: `with cuda.gpus[rank.id]:`, no cuda.gpus[1] on one GPU)
            add_kernel[1, 32, ranks[0].stream](bufs[0], bufs[0])

    def inside_another_rank(ranks, bufs):
        with ranks[0]:
            add_kernel[1, 32, ranks[1].stream](bufs[1], bufs[1])

    def no_rank_launches(ranks, bufs):
        add_kernel[1, 32](bufs[0], bufs[0])

    def copy_directly(ranks, bufs):
        bufs[0].copy_to_device(bufs[1])

    def own_memory_only(ranks, bufs):
        # allowed: a copy within a rank; a stream of the student's own inside `with r:`; then a
        # correct all-reduce
        scratch = ranks[1].device_array(bufs[1].size, bufs[1].dtype)
        scratch.copy_to_device(bufs[1])
        with ranks[1]:
            add_kernel[1, 32, ranks[1].stream](bufs[1], scratch)
        with ranks[0]:
            mine = cuda.stream()
        with ranks[1]:
            add_kernel[1, 32, mine](bufs[1], scratch)  # bufs[1] is now 3 x its input
        scratch = ranks[0].device_array(bufs[0].size, bufs[0].dtype)
        ranks.copy(scratch, bufs[1])
        with ranks[0]:
            add_kernel[1, 32, ranks[0].stream](bufs[0], scratch)
        ranks.copy(scratch, bufs[0], stream=ranks[0].stream)
        with ranks[1]:
            ranks[1].stream.synchronize()
            add_kernel[1, 32, ranks[1].stream](bufs[1], bufs[1])  # 6 x
        ranks.synchronize()
""")


def run_sim(tmp_path, body: str) -> dict:
    shutil.copy(ROOT / "solutions" / "allreduce.py", tmp_path / "allreduce.py")
    (tmp_path / "student.py").write_text(STUDENT)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_reference_all_reduces_give_the_sum_on_every_rank_through_the_guard(tmp_path):
    got = run_sim(tmp_path, """
        from numba.cuda.simulator.kernel import FakeCUDAKernel
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        before = (FakeCUDAKernel.__call__, FakeCUDAKernel.__getitem__, FakeCUDAArray.copy_to_device)
        out = {f"{f} {count} {n}": call("allreduce", f, count, n)
               for f in ("allreduce_naive", "allreduce_ring") for count, n in ((3, 37), (4, 2))}
        out["float"] = call("allreduce", "allreduce_ring", 2, 5, np.float32)
        out["undone"] = before == (FakeCUDAKernel.__call__, FakeCUDAKernel.__getitem__,
                                   FakeCUDAArray.copy_to_device)
        print(json.dumps(out))
    """)
    assert got.pop("undone"), "the guard's patches are gone after the call"
    for case, result in got.items():
        assert result["ok"] and all(result["right"]), (case, result)


def test_kernels_given_another_ranks_memory_are_refused_with_who_and_where(tmp_path):
    got = run_sim(tmp_path, """
        print(json.dumps({f: call("student", f, 3, 4) for f in (
            "read_other_rank", "read_other_rank_slice_in_a_tuple", "on_another_ranks_stream",
            "no_rank_launches", "outside_its_rank", "inside_another_rank")}))
    """)
    refused = got["read_other_rank"]
    assert refused["type"] == "RankMemoryError", refused
    message = refused["message"]
    for words in ("kernel add_kernel", "argument 1", "memory of rank 1", "rank 0 launches it",
                  "(on rank 0's stream)", "ranks.copy"):
        assert words in message, (words, message)
    tuple_case = got["read_other_rank_slice_in_a_tuple"]["message"]
    assert "kernel add_first: argument 1[0] is memory of rank 2, but rank 0 launches it (inside `with ranks[0]:`)" \
        in tuple_case, tuple_case
    stream_case = got["on_another_ranks_stream"]["message"]
    assert "memory of rank 0, but rank 1 launches it (on rank 1's stream)" in stream_case, stream_case
    assert "no rank launches it" in got["no_rank_launches"]["message"], got["no_rank_launches"]
    # a launch on a rank's stream outside that rank's `with r:` runs differently by machine: refused on every one
    assert got["outside_its_rank"]["type"] == got["inside_another_rank"]["type"] == "RankLaunchError", got
    assert got["outside_its_rank"]["message"].startswith(
        "kernel add_kernel: launched on rank 0's stream outside every `with r:` (`with cuda.gpus[i]:` is not one"), got
    assert got["inside_another_rank"]["message"].startswith(
        "kernel add_kernel: launched on rank 1's stream inside `with ranks[0]:`, another rank's; launch a rank's "
        "kernels inside `with r:` for that rank r"), got


def test_a_direct_copy_between_ranks_is_refused_and_ranks_copy_still_works(tmp_path):
    got = run_sim(tmp_path, """
        direct = call("student", "copy_directly", 2, 5)
        # own_memory_only's arithmetic: rank 0 ends with x0 + 3 x1, rank 1 with 6 x1
        inputs = [np.arange(5, dtype=np.int32) * 10 + (1 << r) for r in range(2)]
        reply = runner.call({"module": "student", "function": "own_memory_only", "ranks": inputs})
        print(json.dumps({"direct": direct, "ok": reply["ok"], "error": reply.get("error"),
                          "right": reply["ok"] and [np.array_equal(reply["returned"][0], inputs[0] + 3 * inputs[1]),
                                                    np.array_equal(reply["returned"][1], 6 * inputs[1])]}))
    """)
    direct = got["direct"]
    assert direct["type"] == "RankMemoryError", direct
    assert "copies memory of rank 1 into memory of rank 0 directly" in direct["message"]
    assert "ranks.copy" in direct["message"]
    assert got["ok"], got["error"]
    assert got["right"] == [True, True], "ranks.copy (with and without a stream), copies within a rank"


def test_real_numba_cuda_launches_and_copies_are_checked_before_they_reach_the_driver(tmp_path):
    """The GPU code path (no simulator): numba-cuda's own dispatcher configures the launch, the
    guard sees the stream object the student passed and refuses before any driver call. There is
    no GPU here: ranks' memory is host memory behind a CUDA array interface, and a launch the
    guard lets through fails later, in numba, for want of a driver."""
    code = textwrap.dedent("""
        import contextlib, json, types
        import numpy as np
        from numba import cuda
        from numba.cuda.cudadrv.driver import Stream
        from numba.cuda.cudadrv.devicearray import DeviceNDArrayBase
        from numba.cuda.dispatcher import CUDADispatcher, _LaunchConfiguration
        from grader.backends.ranks import Ranks
        from grader.backends.rank_guard import RankMemoryError, rank_guard

        class Memory:  # stands in for a device array: an address range
            def __init__(self, host):
                self.host, self.dtype, self.shape, self.size, self.nbytes = host, host.dtype, host.shape, host.size, host.nbytes
                self.__cuda_array_interface__ = {**host.__array_interface__, "version": 3}
            def __getitem__(self, key):
                return Memory(self.host[key])

        handles = iter(range(1000, 2000))
        fake = types.SimpleNamespace(gpus=[contextlib.nullcontext()] * 2,
                                     stream=lambda: Stream(next(handles)),
                                     device_array=lambda shape, dtype: Memory(np.zeros(shape, dtype)))
        ranks = Ranks(2, [0, 1], cuda_module=fake)
        a, b = ranks[0].device_array(8, np.float32), ranks[1].device_array(8, np.float32)

        @cuda.jit
        def add_kernel(dst, src):
            pass

        def attempt(launch):
            try:
                launch()
            except RankMemoryError as exc:
                return str(exc)
            except Exception as exc:  # noqa: BLE001 - let through: numba finds no driver
                return "passed: " + type(exc).__name__
            return "passed"

        before = (CUDADispatcher.configure, _LaunchConfiguration.__call__, DeviceNDArrayBase.copy_to_device)
        out = {}
        with rank_guard(ranks):
            out["outside"] = attempt(lambda: add_kernel[1, 32, ranks[1].stream](b[2:], b))
            with ranks[1]:
                out["stream"] = attempt(lambda: add_kernel[1, 32, ranks[1].stream](a, b))
                out["own"] = attempt(lambda: add_kernel[1, 32, ranks[1].stream](b[2:], b))
            with ranks[0]:
                out["with"] = attempt(lambda: add_kernel[1, 32](a, (b,)))
            out["copy"] = attempt(lambda: DeviceNDArrayBase.copy_to_device(a, b))
        out["undone"] = before == (CUDADispatcher.configure, _LaunchConfiguration.__call__,
                                   DeviceNDArrayBase.copy_to_device) and "copy" not in vars(ranks)
        print(json.dumps(out))
    """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["stream"].startswith("kernel add_kernel: argument 0 is memory of rank 0, but rank 1 launches it "
                                    "(on rank 1's stream)"), got["stream"]
    assert got["own"].startswith("passed"), got["own"]
    assert got["outside"].startswith("kernel add_kernel: launched on rank 1's stream outside every `with r:`")
    assert "argument 1[0] is memory of rank 1, but rank 0 launches it (inside `with ranks[0]:`)" in got["with"]
    assert "copies memory of rank 1 into memory of rank 0 directly" in got["copy"], got["copy"]
    assert got["undone"]
