"""The gpu backend's timing harness, run on numba's stock simulator (no GPU here: its times are host
wall clock, the stock simulator has no event timing; what is checked is the harness's logic)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import json, time
    import numpy as np
    from numba import cuda
    from grader.backends.gpu import Gpu, relative_error_of_median

    @cuda.jit
    def double(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = 2 * x[i]

    calls = []
    def slow_double(x):
        calls.append(1)
        time.sleep(0.05)  # every call past the time cap
        d_out = cuda.device_array_like(x)
        double[1, 64](cuda.to_device(x), d_out)
        return d_out.copy_to_host()

    sets = [[np.arange(64, dtype=np.float32) + k] for k in range(3)]
    t = Gpu(1).time_call(slow_double, sets, cap_s=0.0, min_repeats=1, target=0.0, flush_bytes=1 << 10)
    print(json.dumps({"times": t.times_ms, "launches": t.launches_per_call, "stopped": t.stopped,
                      "outputs": [o.tolist() for o in t.outputs], "calls": len(calls),
                      "inputs_untouched": all(np.array_equal(s[0], np.arange(64) + k) for k, s in enumerate(sets)),
                      "err_one": relative_error_of_median([1.0]), "err_flat": relative_error_of_median([2.0] * 4)}))
""")


def test_every_input_set_is_timed_and_checked_even_past_the_cap_with_warm_up_excluded():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["stopped"] == "time cap" and len(got["times"]) == 3, "the cap waits for one call per input set"
    assert got["calls"] == 4, "one warm-up call, untimed, then the timed ones"
    assert got["launches"] == 1 and all(t >= 50 for t in got["times"]), got["times"]
    assert [o[:2] for o in got["outputs"]] == [[0.0, 2.0], [2.0, 4.0], [4.0, 6.0]]
    assert got["inputs_untouched"], "each call gets fresh copies of the judge's inputs"
    assert got["err_one"] == float("inf") and got["err_flat"] == 0.0


def test_the_hold_kernel_builds_for_a_hopper_gpu_and_is_given_up_where_it_cannot_run():
    # hold_gpu keeps the GPU busy while the host enqueues a timed launch (numba's dispatch is not
    # the kernel's time). No GPU here: its PTX for sm_90 is built, and where it cannot run (no
    # driver; numba's stock simulator) it is given up, quietly, and timing goes on without it
    from numba import cuda, types

    from grader.backends.gpu import hold_body

    ptx, _ = cuda.compile_ptx(hold_body(), (types.uint32, types.int64), cc=(9, 0))
    assert "nanosleep.u32" in ptx
    probe = "from grader.backends.gpu import hold_gpu; print(hold_gpu(), hold_gpu())"
    for env in ({}, {"NUMBA_ENABLE_CUDASIM": "1"}):
        done = subprocess.run([sys.executable, "-W", "error", "-c", probe], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env={**os.environ, **env})
        assert done.returncode == 0 and done.stdout.split() == ["False", "False"], done.stdout + done.stderr
