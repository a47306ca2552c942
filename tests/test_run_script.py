"""`gpugrade run SCRIPT ARGS...`: a student's own script on the simulator, as `python SCRIPT ARGS`
would run it, findings stopping it with the source around them, then a table of its launches."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KERNELS = '''
import sys
import numpy as np
from numba import cuda, float32

@cuda.jit
def add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]

@cuda.jit
def add_unguarded(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]

@cuda.jit
def block_sum(x, out):
    cache = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    cache[t] = x[cuda.grid(1)]
    s = 64
    while s > 0:
        if t < s:
            cache[t] += cache[t + s]
        s //= 2
    if t == 0:
        out[cuda.blockIdx.x] = cache[0]

n = int(sys.argv[2])
a, b = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
out = np.zeros(n, dtype=np.float32)
what = sys.argv[1]
if what == "good":
    add[(n + 255) // 256, 256](a, b, out)
    assert (out == a + b).all()
    print("right for n =", n)
elif what == "oob":
    add_unguarded[(n + 255) // 256, 256](a, b, out)
elif what == "race":
    block_sum[n // 128, 128](a, out)
elif what == "raise":
    raise ValueError("the script's own mistake")
elif what == "exit":
    sys.exit(3)
'''


def _run(tmp_path, *args):
    script = tmp_path / "mine.py"
    script.write_text(KERNELS)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, "-m", "grader", "run", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_right_script_runs_with_its_arguments_and_its_launches_are_tabled(tmp_path):
    done = _run(tmp_path, "mine.py", "good", "1000")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "right for n = 1000" in done.stdout
    assert "kernel launches (modelled on H100" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.startswith("│ add "))
    assert "4 / 256" in row and "simt" in row
    # host arrays given to the kernel: numba's warning, and its copies beside the kernel's time
    assert "NumbaPerformanceWarning: Host array used in CUDA kernel" in done.stderr
    assert "time on the GPU, modelled on H100: kernels " in done.stdout
    assert "(1 launch); host -> GPU " in done.stdout and " us (3 copies, 11.7 KiB); GPU -> host " in done.stdout


def test_a_finding_stops_the_script_with_the_lines_around_it(tmp_path):
    oob = _run(tmp_path, "mine.py", "oob", "1000")
    assert oob.returncode == 1
    assert "gpugrade run: kernel 'add_unguarded' at mine.py:15" in oob.stderr
    assert "out-of-bounds access to global array 'a' of shape 1000 at index 1000" in oob.stderr
    assert ">   15 |     out[i] = a[i] + b[i]" in oob.stderr
    race = _run(tmp_path, "mine.py", "race", "1024")
    assert race.returncode == 1 and "data race on shared array 'cache'" in race.stderr
    assert "no syncthreads() between lines" in race.stderr


def test_ctrl_c_in_an_endless_kernel_says_where_the_kernel_was_not_graders_frames(tmp_path):
    """The beginner audit's `i += stride` outside the loop: `gpugrade run` has no time limit, and
    Ctrl-C printed 30 lines of the grader's traceback ending in KeyboardInterrupt."""
    (tmp_path / "endless.py").write_text(textwrap.dedent('''\
        import numpy as np
        from numba import cuda


        @cuda.jit
        def spin(out):
            i = cuda.grid(1)
            while i < out.size:
                out[i] = 1.0
            print("ready")


        print("launching", flush=True)
        spin[1, 32](cuda.device_array(32, np.float32))
        '''))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    process = subprocess.Popen([sys.executable, "-m", "grader", "run", "endless.py"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "launching\n"
    time.sleep(5)  # (well inside the kernel's loop, compiled and checked by then or soon after)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, out + err
    assert re.search(r"gpugrade run: interrupted while a kernel ran, at endless.py:[89] in spin", err), err
    assert "Traceback" not in err and "no kernel was launched" not in err, err


def test_a_finding_names_the_scripts_launch_not_the_console_script_that_ran_it(tmp_path):
    """Regression: started as `gpugrade run` (the console script a student types), a finding said
    "launched at mine.py:39 in <module>, called at .venv/bin/gpugrade:6 in <module>"."""
    (tmp_path / "mine.py").write_text(KERNELS)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    oob = subprocess.run([str(Path(sys.executable).with_name("gpugrade")), "run", "mine.py", "oob", "1000"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert oob.returncode == 1, oob.stderr
    finding = next(line for line in oob.stderr.splitlines() if line.startswith("gpugrade run: kernel"))
    assert finding.endswith("launched at mine.py:39 in <module>"), finding


def test_the_scripts_own_errors_and_exit_status_are_its_own(tmp_path):
    raised = _run(tmp_path, "mine.py", "raise", "10")
    assert raised.returncode == 1 and "ValueError: the script's own mistake" in raised.stderr
    assert "Traceback" in raised.stderr
    exited = _run(tmp_path, "mine.py", "exit", "10")
    assert exited.returncode == 3
    # options before the script are gpugrade's; after it, the script's own
    quiet = _run(tmp_path, "--no-summary", "mine.py", "good", "100")
    assert quiet.returncode == 0 and "kernel launches" not in quiet.stdout
    missing = _run(tmp_path, "nothere.py")
    assert missing.returncode == 2 and "no such script: nothere.py" in missing.stderr


def test_several_simulated_gpus_and_which_ran_each_launch(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text('''
import numpy as np
from numba import cuda

@cuda.jit
def fill(out, v):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = v

sums = []
for d in range(len(cuda.gpus)):
    cuda.select_device(d)
    o = cuda.device_array(100, dtype=np.float32)
    fill[1, 128](o, d + 1)
    sums.append(float(o.copy_to_host().sum()))
print("sums", sums)
''')
    done = subprocess.run([sys.executable, "-m", "grader", "run", "--devices", "2", str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "sums [100.0, 200.0]" in done.stdout and "fill (GPUs 0-1) x 2" in done.stdout


def test_a_script_timing_kernels_with_the_hosts_clock_is_told_to_use_events(tmp_path):
    """At midnight a student times a launch with time.perf_counter(): on the simulator that reads
    seconds of Python, not microseconds of GPU. The run says so, and what to use instead; events
    read the model the table shows."""
    script = tmp_path / "timed.py"
    script.write_text('''
import time
from time import perf_counter as clock
import numpy as np
from numba import cuda

@cuda.jit
def fill(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 1.0

out = cuda.device_array(1 << 12, np.float32)
t = time.perf_counter()
fill[16, 256](out)
cuda.synchronize()
print("wall", time.perf_counter() - t, clock())
start, end = cuda.event(), cuda.event()
start.record()
fill[16, 256](out)
end.record()
end.synchronize()
print("event_us", round(1000 * cuda.event_elapsed_time(start, end), 3))
''')
    done = subprocess.run([sys.executable, "-m", "grader", "run", "--model-gpu", "T4", str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    note = next(line for line in done.stdout.splitlines() if line.startswith("note:"))
    assert "timed.py:14 (time.perf_counter())" in note and "timed.py:17 (clock())" in note
    assert "timed.py:17 (time.perf_counter())" in note and "cuda.event_elapsed_time" in note
    # one launch between two events: the T4's host issue (10 us) and the launch's time in the table
    row = [line for line in done.stdout.splitlines() if line.startswith("│ fill ")][-1]
    modelled_us = float(row.split("│")[7].split()[0])
    event_us = float(next(line for line in done.stdout.splitlines() if line.startswith("event_us")).split()[1])
    assert abs(event_us - (10 + modelled_us)) < 0.1, (event_us, modelled_us)
    quiet = _run(tmp_path, "mine.py", "good", "100")
    assert "note:" not in quiet.stdout


def test_host_clock_reads_are_found_by_name_not_by_text():
    from grader.run_script import host_clock_reads

    source = "import time, timeit\nfrom time import monotonic\nx = 'time.perf_counter()'\n" \
             "a = time.time()\nb = monotonic()\nc = timeit.timeit('1')\ntime.sleep(0)\n"
    assert host_clock_reads(source) == [(4, "time.time()"), (5, "monotonic()"), (6, "timeit.timeit()")]
    assert host_clock_reads("def broken(:\n") == []


def test_a_students_all_reduce_tried_by_hand_with_grader_ranks(tmp_path):
    """At midnight the ring is wrong and the student wants to print its buffers: `grader.ranks(4)`
    in a script of their own, beside their module, run on 4 simulated GPUs."""
    (tmp_path / "allreduce.py").write_text((ROOT / "solutions" / "allreduce.py").read_text())
    script = tmp_path / "try_ring.py"
    script.write_text('''
import numpy as np

import grader
from allreduce import allreduce_ring

ranks = grader.ranks(4)
bufs = ranks.upload([np.full(1003, r + 1, np.float32) for r in range(4)])
allreduce_ring(ranks, bufs)
ranks.synchronize()
print("sums", sorted({float(v) for b in bufs for v in b.copy_to_host()}))
''')
    done = subprocess.run([sys.executable, "-m", "grader", "run", "--devices", "4", str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sums [10.0]" in done.stdout and re.search(r"add_kernel \(GPUs 0-3\) x \d+", done.stdout), done.stdout
    # the ring's 2 (N - 1) steps of N copies between GPUs
    assert "GPU -> GPU " in done.stdout and "(24 copies, " in done.stdout


def test_launches_on_each_gpu_in_turn_on_pieces_that_differ_are_one_row_with_ranges():
    """(audit) An all-reduce adds on GPU 0, 1, 2, 3, 0, ... on pieces an element apart: every launch
    read as a row of its own, and a ring of 8 ranks filled the table past its cut."""
    from grader.run_script import _table, grouped

    def row(device, sectors, seconds):
        return {"kernel": "add_kernel", "device": device, "grid": (1, 1, 1), "block": (256, 1, 1), "executor": "simt",
                "fallback": None, "sectors_per_request": sectors, "wavefronts_per_shared_request": None,
                "atomics": 0, "seconds": seconds, "bound": "launch"}

    rows = [row(i % 4, 4.0 + (i % 3) / 3, 2e-6 + (i % 2) * 1e-7) for i in range(24)]
    [(merged, count)] = grouped(rows)
    assert count == 24 and merged["devices"] == {0, 1, 2, 3}
    table = _table(rows, "H100")
    assert "add_kernel (GPUs 0-3) x 24" in table and "4-4.67" in table and "2-2.1" in table, table


def test_launches_in_a_loop_are_one_row_and_a_long_table_keeps_its_ends():
    from grader.run_script import MOST_ROWS, _table, grouped

    def row(kernel, seconds=1e-6):
        return {"kernel": kernel, "device": 0, "grid": (1, 1, 1), "block": (256, 1, 1), "executor": "simt",
                "fallback": None, "sectors_per_request": 4.0, "wavefronts_per_shared_request": None, "atomics": 0,
                "seconds": seconds, "bound": "launch"}

    rows = [row("a")] * 300 + [row("b"), row("a")]
    assert [(r["kernel"], n) for r, n in grouped(rows)] == [("a", 300), ("b", 1), ("a", 1)]
    table = _table(rows, "H100")
    assert "│ a x 300 " in table and "│ b " in table
    alternating = [{**row("k", seconds=(i + 1) * 1e-6), "grid": (i + 1, 1, 1)} for i in range(2 * MOST_ROWS)]
    table = _table(alternating, "H100")  # (no two alike)
    assert f"... {MOST_ROWS} more rows" in table
    assert "1 us" in table and f"{2 * MOST_ROWS} us" in table  # the first rows and the last


def test_a_notebook_runs_its_code_cells_and_what_is_said_names_its_cells(tmp_path):
    """(audit) `gpugrade run vector_add.ipynb` ran the JSON as Python ("NameError: name 'null' is not
    defined"). A notebook runs its code cells in order, IPython's lines left out with a note, and a
    finding, a traceback and the excerpt name the notebook's cells and lines, never the module."""
    import nbformat

    kernel, launch = KERNELS.split("\nn = int(sys.argv[2])")
    cells = [nbformat.v4.new_markdown_cell("# my try"), nbformat.v4.new_code_cell(kernel.strip()),
             nbformat.v4.new_code_cell("n = 1000\na, b = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)\n"
                                       "out = np.zeros(n, dtype=np.float32)\n%timeit add[4, 256](a, b, out)\n"
                                       "add_unguarded[4, 256](a, b, out)")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "mine.ipynb")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    oob = subprocess.run([sys.executable, "-m", "grader", "run", "mine.ipynb"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert oob.returncode == 1, oob.stdout + oob.stderr
    assert "note: mine.ipynb, cell 3: `%timeit add[4, 256](a, b, out)` is an IPython magic" in oob.stderr, oob.stderr
    assert "gpugrade run: kernel 'add_unguarded' at mine.ipynb, cell 2, line 14" in oob.stderr, oob.stderr
    assert "launched at mine.ipynb, cell 3, line 5 in <module>" in oob.stderr, oob.stderr
    assert "> cell 2,  14 |     out[i] = a[i] + b[i]" in oob.stderr, oob.stderr
    assert "mine.py" not in oob.stderr and "gpugrade-run-" not in oob.stderr, oob.stderr
    nb = nbformat.read(tmp_path / "mine.ipynb", as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("add_unguarded[4, 256](a, b, out)",
                                                          "add[4, 256](a, b, out); raise ValueError('mine')")
    nbformat.write(nb, tmp_path / "mine.ipynb")
    raised = subprocess.run([sys.executable, "-m", "grader", "run", "mine.ipynb"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert raised.returncode == 1 and 'File "mine.ipynb", cell 3, line 5, in <module>' in raised.stderr, raised.stderr
    assert "kernel launches (modelled on H100" in raised.stdout and "│ add " in raised.stdout  # (ran, then raised)
