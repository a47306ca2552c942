"""The judge/runner split: student code runs in another process, and its failures cost only the
call that hit them. These use plain-Python student modules so they need no simulator."""

import re
import textwrap
import time

import numpy as np
import pytest

from grader.errors import RunnerError, StudentCodeError
from grader.judge import Student
from grader.judge.policy import DEFAULT_ALLOWED_IMPORTS
from grader.sandbox import Limits, ProcessSandbox

# These tests check the runner's own confinement, so the static policy is widened: an attacker who
# slips past the policy check must still gain nothing.
WIDE_POLICY = DEFAULT_ALLOWED_IMPORTS | {"os", "signal", "sys", "socket"}


@pytest.fixture
def make_student(tmp_path):
    students = []

    def make(source: str, timeout: float = 20.0, policy=WIDE_POLICY) -> Student:
        (tmp_path / "ex.py").write_text(textwrap.dedent(source))
        s = Student("ex", str(tmp_path), "gpu", ProcessSandbox(Limits(call_timeout_s=timeout)), allowed_imports=policy)
        students.append(s)
        return s

    yield make
    for s in students:
        s.close()


def test_call_returns_value_and_arguments_after_the_call(make_student):
    s = make_student("""
        def scale(x, k):
            x *= k
            return x.sum()
    """)
    x = np.arange(4, dtype=np.float32)
    result = s.call("scale", x, 2)
    assert result.value == 12.0
    assert np.array_equal(result.args[0], x * 2) and result.args[1] is None
    assert np.array_equal(x, np.arange(4)), "the judge's own array is never touched"


def test_prints_cannot_forge_a_reply(make_student):
    s = make_student("""
        import sys
        def f():
            print('{"ok": true, "returned": 100}' * 1000)
            sys.stdout.buffer.write(bytes(range(256)) * 100)
            return 1
    """)
    assert s.call("f").value == 1


def test_not_implemented_is_one_line_naming_the_place(make_student):
    s = make_student("""
        def f():
            raise NotImplementedError()
    """)
    with pytest.raises(StudentCodeError) as info:
        s.call("f")
    assert info.value.summary() == "not implemented yet (ex.py:3 in f)"


def test_a_message_ending_in_a_colon_keeps_what_follows(make_student):
    """numba's "Kernel launch configuration was not specified. Use the syntax:" said no more."""
    s = make_student("""
        def f():
            raise ValueError("Do it this way:\\n\\n    kernel[blocks, threads](args)\\n")
    """)
    with pytest.raises(StudentCodeError, match=r"^ValueError \(ex.py:3 in f\): Do it this way: kernel\[blocks, "
                                               r"threads\]\(args\)$"):
        s.call("f")


def test_syntax_error_names_file_and_line(make_student):
    s = make_student("def f(:\n    pass\n")
    with pytest.raises(StudentCodeError, match=r"could not import the submission \(ex.py:1\): SyntaxError"):
        s.call("f")


def test_missing_function_is_reported(make_student):
    s = make_student("x = 1\n")
    with pytest.raises(StudentCodeError, match=r"ex.py has no function f\(\)"):
        s.call("f")



def test_a_function_renamed_a_little_is_named_as_the_likely_one(make_student):
    """(the all-reduce audit: allreduce_pipeline written for allreduce_pipelined said only "has no function")"""
    s = make_student("def allreduce_pipeline(ranks, bufs):\n    pass\n\n\ndef add_on(r, a, b):\n    pass\n")
    with pytest.raises(StudentCodeError, match=r"ex.py has no function allreduce_pipelined\(\): is "
                                               r"allreduce_pipeline\(\) it, renamed\? the tests call "
                                               r"allreduce_pipelined\(\)$"):
        s.call("allreduce_pipelined")
    with pytest.raises(StudentCodeError, match=r"ex.py has no function total\(\)$"):  # nothing close
        s.call("total")


def test_infinite_loop_times_out_and_the_next_call_gets_a_fresh_runner(make_student):
    s = make_student("""
        def spin():
            while True:
                pass
        def ok():
            return 7
    """, timeout=1.5)
    with pytest.raises(RunnerError, match="timed out after 1.5 s"):
        s.call("spin")
    assert s.call("ok").value == 7


def test_exit_at_import_is_a_runner_failure_not_a_pass(make_student):
    s = make_student("""
        import os
        os._exit(0)
    """)
    with pytest.raises(RunnerError, match="exited with code 0 before answering"):
        s.call("f")


def test_interpreter_crash_is_reported_by_signal(make_student):
    s = make_student("""
        import os, signal
        def boom():
            os.kill(os.getpid(), signal.SIGSEGV)
    """)
    with pytest.raises(RunnerError, match="crashed: killed by SIGSEGV"):
        s.call("boom")


def test_returning_an_object_that_is_not_data_is_an_error(make_student):
    s = make_student("""
        def f():
            return object()
    """)
    with pytest.raises(StudentCodeError, match="TypeError.*return a NumPy array"):
        s.call("f")


def test_policy_violation_fails_before_any_student_code_runs(make_student, tmp_path):
    s = make_student("""
        import ctypes
        open("ran", "w").write("x")
        def f():
            return 1
    """, policy=DEFAULT_ALLOWED_IMPORTS)
    with pytest.raises(StudentCodeError, match=r"policy: imports ctypes: graded code may import only .*"
                                               r"\(ex.py:2\); policy: calls open\(\) \(ex.py:3\)"):
        s.call("f")
    assert not (tmp_path / "ran").exists()


needs_cgroups = pytest.mark.skipif(not __import__("grader.sandbox.cgroups").sandbox.cgroups.available(),
                                   reason="memory and pids limits that bind root need cgroup v1 as root")


@needs_cgroups
def test_memory_bomb_is_killed_and_named(tmp_path):
    (tmp_path / "ex.py").write_text("def bomb():\n    hog = []\n    while True:\n        hog.append(bytearray(1 << 24))\n")
    s = Student("ex", str(tmp_path), "gpu", ProcessSandbox(Limits(memory_bytes=256 << 20)))
    try:
        with pytest.raises(RunnerError, match=r"bomb\(\) was stopped: .*killed: out of memory \(limit 256 MiB\) "
                                              r"\(a kernel whose loop never ends fills the memory"):
            s.call("bomb")
        # (the audit: a kernel that never ends was killed for memory once per test, 556 s in all)
        began = time.monotonic()
        with pytest.raises(RunnerError, match=r"^not run: bomb\(\) was stopped: .* would fill the memory again"):
            s.call("bomb")
        assert time.monotonic() - began < 5
    finally:
        s.close()


@needs_cgroups
def test_fork_bomb_stops_at_the_process_limit_and_the_judge_survives(tmp_path):
    (tmp_path / "ex.py").write_text(textwrap.dedent("""
        import os, signal
        def bomb():
            children = 0
            try:
                while True:
                    if os.fork() == 0:
                        signal.pause()
                    children += 1
            except OSError:
                return children
    """))
    s = Student("ex", str(tmp_path), "gpu", ProcessSandbox(Limits(processes=32)), allowed_imports=WIDE_POLICY)
    try:
        assert 0 < s.call("bomb").value < 32
    finally:
        s.close()  # every forked child dies with the runner's cgroup


def test_an_output_flood_is_capped_and_the_answer_still_arrives(make_student):
    s = make_student("""
        def flood():
            for _ in range(20000):
                print("x" * 1000)
            print("the end")
            return 3
    """)
    assert s.call("flood").value == 3
    assert len(s.connection._runner.output_tail()) <= 4096


def test_sys_exit_in_host_code_is_an_error_of_that_call(make_student):
    s = make_student("""
        import sys
        def leave():
            sys.exit(0)
        def ok():
            return 1
    """)
    with pytest.raises(StudentCodeError, match="SystemExit"):
        s.call("leave")
    assert s.call("ok").value == 1


def test_monkeypatching_numpy_in_the_student_module_cannot_change_the_judges_numpy(make_student):
    import numpy as np

    s = make_student("""
        import numpy as np
        np.allclose = lambda *a, **k: True
        np.array_equal = lambda *a, **k: True
        def f():
            return np.zeros(3, np.float32)
    """)
    got = s.call("f").value
    assert not np.array_equal(got, np.ones(3, np.float32)), "the judge's numpy is its own"


def test_an_infinite_loop_in_a_kernel_times_out_on_the_simulator(tmp_path):
    (tmp_path / "ex.py").write_text(textwrap.dedent("""
        import numpy as np
        from numba import cuda

        @cuda.jit
        def spin(out):
            i = cuda.grid(1)
            while out[0] == 0.0:
                i += 1

        def run():
            out = cuda.to_device(np.zeros(1, np.float32))
            spin[1, 32](out)
            return out.copy_to_host()
    """))
    s = Student("ex", str(tmp_path), "sim", ProcessSandbox(Limits(call_timeout_s=6)))
    try:
        # the simulator may see the spin itself first (a deadlock report): either way, only this call
        with pytest.raises((RunnerError, StudentCodeError), match="timed out after 6 s|no forward progress"):
            s.call("run")
    finally:
        s.close()


def test_an_exercise_that_sleeps_under_every_timeout_spends_only_its_own_budget(tmp_path):
    from grader.judge import RunnerConnection, TimeBudget

    (tmp_path / "slow.py").write_text("import time\ndef nap():\n    time.sleep(3)\n    return 1\n")
    (tmp_path / "fast.py").write_text("def f():\n    return 2\n")
    sandbox = ProcessSandbox(Limits(call_timeout_s=4))
    connection = RunnerConnection(str(tmp_path), "gpu", sandbox)
    policy = WIDE_POLICY | {"time"}
    slow = Student("slow", str(tmp_path), "gpu", sandbox, connection=connection, allowed_imports=policy,
                   budget=TimeBudget(8.5, "slow"))
    fast = Student("fast", str(tmp_path), "gpu", sandbox, connection=connection, allowed_imports=policy,
                   budget=TimeBudget(8.5, "fast"))
    try:
        began = time.monotonic()
        assert slow.call("nap").value == 1
        # the runner's start (the interpreter, numba's imports) is the host's time, not the
        # exercise's: on a loaded machine it took over a second of the budget
        assert connection.start_seconds > 0
        assert slow.budget.spent <= time.monotonic() - began - connection.start_seconds
        assert slow.call("nap").value == 1  # 6 of its 8.5 s (1.25 s a call to spare on a loaded machine)
        with pytest.raises(RunnerError, match=r"timed out after [0-2](\.\d+)? s"):
            slow.call("nap")  # only what is left of its budget, not the call's 4 s
        with pytest.raises(RunnerError, match="slow's time budget of 8.5 s is spent"):
            slow.call("nap")
        assert fast.call("f").value == 2, "the other exercise keeps its whole budget"
    finally:
        connection.close()


def test_an_exit_status_above_128_is_a_signal_only_when_it_is_one():
    """Regression: behind bubblewrap's pid 1, os._exit(200) was reported as 'killed by signal 72'."""
    from grader.sandbox.base import death_reason

    limits = Limits(cpu_time_s=7)
    assert death_reason(-11, limits, False) == "crashed: killed by SIGSEGV"
    assert death_reason(128 + 9, limits, True) == "crashed: killed by SIGKILL"
    assert death_reason(128 + 24, limits, True) == "killed: CPU time limit of 7 s exceeded"
    assert death_reason(200, limits, True) == "the student's process exited with code 200 before answering"
    assert death_reason(137, limits, False) == "the student's process exited with code 137 before answering"


def test_a_lost_cuda_context_costs_that_call_and_later_calls_get_a_fresh_runner(make_student):
    """A sticky CUDA error (an illegal address) poisons the process's context. Without a GPU here
    the student module raises numba's own CudaAPIError 700 itself: the recovery path is the same."""
    s = make_student("""
        import os
        from numba.cuda.cudadrv.driver import CudaAPIError

        def crash():
            raise CudaAPIError(700, "CUDA_ERROR_ILLEGAL_ADDRESS an illegal memory access was encountered")

        PROCESS = os.urandom(8).hex()  # this process's own (pids repeat: each runner has its namespace)

        def process():
            return PROCESS
    """)
    before = s.call("process").value
    with pytest.raises(StudentCodeError) as info:
        s.call("crash")
    assert info.value.kind == "context_lost"
    summary = info.value.summary()
    assert summary.startswith("illegal memory access: your kernel read or wrote outside an allocation")
    assert "later tests ran in a fresh process" in summary
    after = s.call("process").value
    assert after != before, "the poisoned runner was replaced"


def test_the_sandbox_shows_site_directories_a_pth_file_added_and_no_other_folder(tmp_path, monkeypatch):
    """A venv over another's packages (the device check makes one: its .pth adds the image's
    site-packages) must run in the process sandbox too; the folders on sys.path that are not site
    directories (the current folder: maybe the course's, with its solutions) stay out of view."""
    import site
    import sys

    from grader.sandbox.bubblewrap import runtime_paths

    image = tmp_path / "image" / "lib" / "python3" / "site-packages"
    course = tmp_path / "course"
    image.mkdir(parents=True)
    course.mkdir()
    monkeypatch.setattr(sys, "path", [str(course), *sys.path, str(image)])
    shown = runtime_paths()
    assert str(image.resolve()) in shown and not any(p.startswith(str(course.resolve())) for p in shown)
    if site.ENABLE_USER_SITE:
        assert site.getusersitepackages() not in shown


def test_the_pipes_to_a_runner_hold_a_mebibyte_where_linux_allows_it(tmp_path):
    # (a GPU timing moves arrays of 64 MiB each way: through 64 KiB pipes at a quarter of the speed)
    import fcntl

    from grader.sandbox.process import PIPE_BYTES

    (tmp_path / "ex.py").write_text("def echo(x):\n    return x\n")
    runner = ProcessSandbox(Limits()).start(str(tmp_path), "sim")
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            expected = PIPE_BYTES if int(f.read()) >= PIPE_BYTES else 1 << 16
        F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
        assert fcntl.fcntl(runner._req_w, F_GETPIPE_SZ) == fcntl.fcntl(runner._resp_r, F_GETPIPE_SZ) == expected
    finally:
        runner.close()


def test_a_timeout_says_where_the_call_was_and_larger_inputs_are_not_run_again(make_student):
    """A student's endless loop: the timeout names the function and the line it was at (the
    runner's stack, dumped just before the limit), and later calls of that function on inputs
    at least as large fail at once instead of waiting out a timeout each; smaller ones still run."""
    s = make_student("""
        def spin(x):
            k = 0
            while x.size > 2 and k < 10:
                k + 1
            return x.size
    """, timeout=3)
    with pytest.raises(RunnerError) as info:
        s.call("spin", np.zeros(100, np.float32))
    # (the loop's test or its body: wherever the dump found it)
    assert re.search(r"spin\(\) timed out after 3 s: it was at ex\.py:[45] in spin \(a loop that never ends\?\)",
                     str(info.value)), str(info.value)
    began = time.monotonic()
    with pytest.raises(RunnerError, match=r"^not run: spin\(\) timed out after 3 s: it was at ex.py:[45]"):
        s.call("spin", np.zeros(1000, np.float32))
    assert time.monotonic() - began < 1, "refused at once"
    assert s.call("spin", np.zeros(2, np.float32)).value == 2, "a call on smaller inputs still runs"


def test_a_loop_at_the_module_s_top_level_is_named_as_an_import(make_student):
    """The audit: a notebook cell `while True: x += 1` (or a module-level loop) read only "timed
    out after 120 s", which sent the student to their kernel."""
    s = make_student("""
        x = 0
        while True:
            x += 1


        def f():
            return 1
    """, timeout=3)
    with pytest.raises(RunnerError) as info:
        s.call("f")
    assert re.search(r"importing ex\.py timed out after 3 s: it was at ex\.py:[345] \(code at the top level of a "
                     r"module, or in a notebook's cell, runs when the module is imported", str(info.value)), \
        str(info.value)


def test_the_device_processs_word_on_where_its_kernel_was_is_that_calls_last():
    """(grader/device/watch.py writes it; what a kernel printed, or an earlier call's word, is not it)"""
    from grader.judge.stuck import kernel_at

    output = ("gpugrade-device-watch call 3: ex.py:9 in k\n"
              "gpugrade-device-watch call 4: ex.py:5 in k, in the loop of line 4 at iteration 12\n"
              "a kernel printed gpugrade-device-watch call 4: ex.py:1 in forged\n"
              "gpugrade-device-watch call 4: ex.py:6 in k\x1b[2J, in the loop of line 4 at iteration 99\n")
    assert kernel_at(output, 4) == "ex.py:6 in k[2J, in the loop of line 4 at iteration 99"
    assert kernel_at(output, 3) == "ex.py:9 in k"
    assert kernel_at(output, 5) == "" and kernel_at("", 1) == ""


def test_policy_violations_are_said_once_in_the_failure(make_student):
    """Before, the violations were the message and, again, the detail under it."""
    from grader.judge.plugin import failure_message

    s = make_student("""
        import os
        import socket
        def f():
            return 1
    """, policy=DEFAULT_ALLOWED_IMPORTS)
    with pytest.raises(StudentCodeError) as info:
        s.call("f")
    text = failure_message(info.value)
    assert text.count("os") == 1 and text.count("socket") == 1 and "ex.py:2" in text and "ex.py:3" in text, text


def test_the_process_sandboxs_probe_shows_the_system_folders_not_the_whole_root(monkeypatch):
    """The probe once bound / recursively: every mount below it was remounted, and a container that
    docker was making or removing meanwhile failed it (EINVAL on an overlay's merged folder), so a
    batch beside a busy docker engine refused to start. It shows what the runners see instead."""
    import subprocess

    from grader.sandbox import bubblewrap

    if bubblewrap.bwrap() is None:
        pytest.skip("bubblewrap is not installed")
    seen = []
    real = subprocess.run

    def run(argv, *args, **kwargs):
        seen.append(list(argv))
        return real(argv, *args, **kwargs)

    bubblewrap.unavailable.cache_clear()
    monkeypatch.setattr(bubblewrap.subprocess, "run", run)
    try:
        assert bubblewrap.unavailable() is None
    finally:
        bubblewrap.unavailable.cache_clear()
    [probe] = seen
    binds = [tuple(probe[i + 1:i + 3]) for i, a in enumerate(probe) if a == "--ro-bind"]
    assert ("/", "/") not in binds and ("/usr", "/usr") in binds, probe


def test_a_kernel_running_after_many_launches_of_the_call_points_at_the_host_loop():
    """The watch may catch the kernel of a host loop running: after MANY_LAUNCHES of the call's
    kernels ended, the loop to look at is the host's, with the caller that runs it."""
    from grader.judge.stuck import MANY_LAUNCHES, timeout_message

    dump = ("Timeout (0:00:06)!\nThread 0x00007f00 (most recent call first):\n"
            '  File "/opt/grader/device/client.py", line 10 in request\n'
            '  File "/w/ex.py", line 17 in add_on\n  File "/w/ex.py", line 24 in run\n'
            '  File "/opt/grader/runner/serve.py", line 5 in serve\n')
    running = "ex.py:13 in add_one; launches before it in this call: "
    text = timeout_message("run", "timed out after 8 s", dump, {"ex.py"}, running + str(MANY_LAUNCHES * 30))
    assert text == ("run() timed out after 8 s: it was at ex.py:17 in add_on (called from ex.py:24 in run), waiting "
                    "for a kernel launched there, which was at ex.py:13 in add_one, after 3,000 others of this call, "
                    "each of which ended: a loop in the host code that never ends? (a while loop whose condition "
                    "never changes)")
    # a few launches before it: the kernel's own loop is the question, as before
    assert timeout_message("run", "timed out after 8 s", dump, {"ex.py"}, running + "2").endswith(
        "which was at ex.py:13 in add_one (does a loop in the kernel never end?)")
