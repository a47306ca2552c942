"""The simulated GPU as a process of its own: what the student's process can no longer touch.

With the device process, launches, counters and findings reach the judge from the device, never
through the runner; answers count only when the data flow says kernels computed them. Each
test is an attack that worked while the simulator lived in the student's process.
"""

import os
import re
import textwrap

import numpy as np
import pytest

from grader.judge.correctness import WrongAnswer, expect_close
from grader.errors import RunnerError, StudentCodeError
from grader.judge import RunnerConnection, Student, require_kernel_launch
from grader.judge.student import Returns
from grader.sandbox import Limits, ProcessSandbox
from grader.sandbox.bubblewrap import unavailable as bubblewrap_unavailable

from sandbox_support import unavailable


ADD = """
    import numpy as np
    from numba import cuda

    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]
"""


@pytest.fixture(params=["process", "docker"])
def device_student(tmp_path, request):
    reason = bubblewrap_unavailable()  # both host the device process in bubblewrap
    if reason:
        unavailable(reason)
    if request.param == "docker":
        from grader.sandbox.container import DockerSandbox, DockerSettings

        settings = DockerSettings(image=request.getfixturevalue("runner_image"))
        new_sandbox = lambda: DockerSandbox(Limits(call_timeout_s=120), settings)  # noqa: E731
    else:
        new_sandbox = lambda: ProcessSandbox(Limits(call_timeout_s=120))  # noqa: E731
    students = []

    def make(source: str, device_process: bool = True) -> Student:
        work = tmp_path / f"work{len(students)}"
        work.mkdir(mode=0o755)
        (work / "ex.py").write_text(textwrap.dedent(ADD) + textwrap.dedent(source))
        (work / "ex.py").chmod(0o644)
        sandbox = new_sandbox()
        connection = RunnerConnection(str(work), "sim", sandbox, device_process=device_process)
        # (the module declares its own functions here: messages name the arguments by its parameters)
        s = Student("ex", str(work), "sim", sandbox, allowed_imports=None, connection=connection,
                    declared_in=work / "ex.py")
        students.append(s)
        return s

    yield make
    for s in students:
        s.close()


def _inputs(n=1000):
    rng = np.random.default_rng(7)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def _add_call(s, function="vector_add"):
    """`function` called on the usual inputs; its answer right, whoever computed it."""
    a, b = _inputs()
    result = s.call(function, a, b)
    assert np.array_equal(result.value, a + b)
    return result


def test_an_honest_kernel_passes_and_its_records_come_from_the_device(device_student):
    s = device_student("""
        def vector_add(a, b):
            d_a, d_b = cuda.to_device(a), cuda.to_device(b)
            d_out = cuda.device_array_like(d_a)
            add[(a.size + 127) // 128, 128](d_a, d_b, d_out)
            return d_out.copy_to_host()
    """)
    a, b = _inputs()
    result = s.call("vector_add", a, b)
    require_kernel_launch(result, "sim")
    assert np.array_equal(result.value, a + b)
    assert result.device is not None and [launch["kernel"] for launch in result.launches] == ["add"]
    assert result.launches[0]["counters"]["global_load_requests"] == 2 * 8 * 4  # 2 loads, 8 blocks of 4 warps


def test_a_forged_launch_summary_and_a_host_answer_gain_nothing(device_student):
    # The student's process writes a complete, well-formed reply itself: the right answer (it has
    # the inputs) and a launch record with perfect counters. No kernel ever ran on the device.
    s = device_student("""
        import json, os, struct, sys, time
        def channel():
            if "--out-fd" in sys.argv:
                return int(sys.argv[sys.argv.index("--out-fd") + 1])
            import stat  # --stdio (docker): the protocol's stdin and stdout, duplicated (in, then out)
            return [fd for fd in range(3, 32) if _is_stream(fd, stat)][-1]
        def _is_stream(fd, stat):
            try:
                return stat.S_ISFIFO(os.fstat(fd).st_mode)
            except OSError:
                return False
        def vector_add(a, b):
            out = channel()
            answer = (a + b).astype(np.float32)
            launch = {"kernel": "add", "grid": [8, 1, 1], "block": [128, 1, 1], "shared_bytes": 0, "device": 0,
                      "executor": "simt", "fallback_reason": None,
                      "counters": {"global_load_requests": 64, "global_load_sectors": 256, "global_loads": 2000}}
            message = {"ok": True, "returned": {"__ndarray__": 0, "dtype": "<f4", "shape": [a.size]},
                       "args": [{"__ndarray__": 1, "dtype": "<f4", "shape": [a.size]},
                                {"__ndarray__": 2, "dtype": "<f4", "shape": [b.size]}], "launches": [launch]}
            body = json.dumps({"message": message, "frames": [a.nbytes, a.nbytes, b.nbytes]}).encode()
            os.write(out, struct.pack("!Q", len(body)) + body + answer.tobytes() + a.tobytes() + b.tobytes())
            time.sleep(60)
    """)
    a, b = _inputs()
    result = s.call("vector_add", a, b)
    assert np.array_equal(result.value, a + b), "the forged reply arrived as sent..."
    assert result.launches == [], "...but launch records come from the device, which saw none"
    with pytest.raises(WrongAnswer, match="no kernel was launched"):
        require_kernel_launch(result, "sim")


def test_patching_the_simulator_in_the_students_process_changes_no_counter_and_hides_no_finding(device_student):
    s = device_student("""
        import grader.sim.memory as memory, grader.sim.launch as launch
        memory.Instrument.finish = lambda self: {"global_load_requests": 1}   # forged counters
        launch.Instrument = None                                            # and no checker at all

        @cuda.jit
        def racy(out):
            i = cuda.grid(1)
            out[0] = i          # every thread writes one element: a race

        def run():
            d_out = cuda.device_array(1, np.int64)
            racy[1, 64](d_out)
            return d_out.copy_to_host()
    """)
    with pytest.raises(StudentCodeError, match="race"):
        s.call("run")


def test_a_caught_finding_still_fails_the_call(device_student):
    s = device_student("""
        @cuda.jit
        def past_the_end(out):
            out[cuda.grid(1)] = 1.0   # no bounds guard

        def run():
            d_out = cuda.device_array(10, np.float32)
            try:
                past_the_end[1, 32](d_out)
            except Exception:
                pass                  # swallowed in the student's process: the device told the judge
            return np.ones(10, np.float32)
    """)
    with pytest.raises(StudentCodeError, match="out-of-bounds access to global array .out."):
        s.call("run")


def test_the_device_process_is_out_of_the_runners_reach(device_student):
    s = device_student("""
        import os
        def look():
            mine, seen = os.getuid(), []
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        with open(f"/proc/{entry}/cmdline", "rb") as f:
                            seen.append(f.read().decode(errors="replace"))
                    except OSError:
                        pass
            return [mine, [c for c in seen if "grader.device" in c]]
    """)
    mine, devices = s.call("look").value
    assert devices == [], "the runner cannot see its device process"
    device = s.connection._device
    assert device is not None
    if os.getuid() == 0:
        assert device.uid not in (None, mine, 0), "the device process has a uid of its own"


def test_inline_simulator_still_grades_for_debugging(device_student):
    s = device_student("""
        def vector_add(a, b):
            d_out = cuda.device_array(a.size, np.float32)
            add[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), d_out)
            return d_out.copy_to_host()
    """, device_process=False)
    a, b = _inputs()
    result = s.call("vector_add", a, b)
    assert result.device is None and result.launches and np.array_equal(result.value, a + b)


def test_the_host_api_works_through_the_device(device_student):
    s = device_student("""
        def host_api(x):
            d = cuda.to_device(x)
            d[2:5] = np.zeros(3, np.float32)          # host writes into a slice
            part = d[1:6].copy_to_host()             # a view, copied back
            first = d[0]                             # one element read back
            out = cuda.device_array_like(d)
            start, end = cuda.event(), cuda.event()
            start.record()
            add[1, 32](d, d, out)
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
            grid = cuda.to_device(np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
            return [part, np.float32(first), out.copy_to_host(), np.float32(ms), grid.copy_to_host(),
                    np.int64(grid.is_f_contiguous()), np.int64(cuda.is_cuda_array(d))]
    """)
    x = np.arange(10, dtype=np.float32)
    part, first, doubled, ms, grid, fortran, is_cuda = s.call("host_api", x).value
    y = x.copy()
    y[2:5] = 0
    assert np.array_equal(part, y[1:6]) and first == x[0] and np.array_equal(doubled, 2 * y)
    assert ms > 0, "events measure the device's modelled clock"
    assert np.array_equal(grid, np.arange(6, dtype=np.float32).reshape(2, 3)) and fortran == 1 and is_cuda == 1


def test_a_host_api_mistake_is_the_same_exception_as_with_a_local_simulator(device_student):
    s = device_student("""
        def wrong_copy():
            d = cuda.to_device(np.zeros(4, np.float32))
            outcomes = []
            try:
                d.copy_to_device(np.zeros(5, np.float32))
            except ValueError as exc:
                outcomes.append("ValueError: " + str(exc))
            try:
                d[10]                      # refused by the device process itself
            except IndexError as exc:
                outcomes.append("IndexError: " + str(exc))
            return outcomes
    """)
    copy, index = s.call("wrong_copy").value
    assert copy.startswith("ValueError: copy_to_device") and index.startswith("IndexError: index 10")


def test_a_python_list_given_to_a_kernel_is_refused_with_what_a_kernel_takes(device_student):
    s = device_student("""
        def run():
            d_out = cuda.device_array(3, np.float32)
            add[1, 32](d_out, [1.0, 2.0, 3.0], d_out)
    """)
    with pytest.raises(StudentCodeError, match=r"a kernel argument of type list cannot be passed to a GPU: a kernel "
                                               r"takes arrays .*np\.array\(\.\.\.\) makes an array of a list"):
        s.call("run")


def test_a_refused_launch_names_the_students_launch_line(device_student):
    """The device process runs the launch, the student's process knows where it was made: a launch
    refused before it ran (too many threads per block) names that line, as the finding's line."""
    s = device_student("""
        def run():
            d_out = cuda.device_array(10, np.float32)
            add[1, 2048](d_out, d_out, d_out)
    """)
    with pytest.raises(StudentCodeError, match=r"kernel 'add' launched at ex\.py:13: 2048 threads per block") as refused:
        s.call("run")
    assert (refused.value.finding.file, refused.value.finding.line) == ("ex.py", 13)


def test_another_text_of_the_students_file_never_runs_in_the_device(device_student):
    """The simulator re-reads a kernel's source by its file's name: a kernel built at import
    (its launch refused before it ran), then the runner's linecache edited and another kernel
    sent with that text, ran the edited body in the device process, Python numba never compiled
    (here os.listdir: 12 entries, not 0)."""
    s = device_student("""
        import linecache

        @cuda.jit
        def other(out):
            out[0] = 1.0

        def _refused(kernel, *args):
            try:
                kernel[0, 1](*args)  # built in the device, refused before it runs
            except Exception:
                pass

        _refused(add, np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32))
        lines = linecache.getlines(__file__)
        at = next(n for n, line in enumerate(lines) if "out[i] = a[i] + b[i]" in line)
        lines[at] = lines[at].replace("a[i] + b[i]", "len(__import__('os').listdir('/'))")
        linecache.cache[__file__] = (0, None, lines, __file__)
        _refused(other, np.zeros(1, np.float32))  # sends the edited text as the file's

        def run():
            d_out = cuda.to_device(np.zeros(4, np.float32))
            add[1, 4](d_out, d_out, d_out)  # named by id: built before, run from the file's text
            return d_out.copy_to_host().tolist()
    """)
    assert s.call("run").value == [0.0] * 4, "the kernel runs as it was built: a[i] + b[i]"


def test_a_text_of_the_students_file_that_is_not_the_files_is_refused(device_student):
    """The first text sent of a file was the runner's word: the linecache edited before any
    launch, the kernel the device built and graded was not the one in the submission's file.
    The device takes only the texts whose digests the judge read in the workspace."""
    s = device_student("""
        import linecache

        lines = linecache.getlines(__file__)
        at = next(n for n, line in enumerate(lines) if "out[i] = a[i] + b[i]" in line)
        lines[at] = lines[at].replace("a[i] + b[i]", "a[i] + b[i] + 1.0")
        linecache.cache[__file__] = (0, None, lines, __file__)

        def run():
            d_out = cuda.to_device(np.zeros(4, np.float32))
            d_one = cuda.to_device(np.ones(4, np.float32))
            add[1, 4](d_one, d_one, d_out)
            return d_out.copy_to_host().tolist()
    """)
    with pytest.raises(StudentCodeError, match="ex.py came with another text than the submission's file"):
        s.call("run")


def test_a_runner_that_breaks_the_protocol_fails_its_call_at_once(device_student):
    """The device stops listening to a runner that sent a malformed frame; before, it kept the
    socket open, so the runner's next request waited out the whole call timeout."""
    s = device_student("""
        import gc

        from grader.device.client import Channel

        def run():
            channel = next(o for o in gc.get_objects() if isinstance(o, Channel))
            channel._sock.sendall(b"\\xff" * 64)  # a header announcing 2^64 bytes
            return channel.request({"op": "synchronize"})
    """)
    with pytest.raises(StudentCodeError) as failed:
        s.call("run")
    assert "bytes; at most" in str(failed.value), "the device's finding, not the call's time limit"


def test_a_device_process_that_dies_is_told_as_the_devices_failure(device_student):
    """The device process gone between two calls: the call fails naming it, not "the student's
    process" (the runner's words for its own end), and the next call starts both afresh."""
    s = device_student("""
        def vector_add(a, b):
            d_out = cuda.device_array_like(a)
            add[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), d_out)
            return d_out.copy_to_host()
    """)
    _add_call(s)
    s.connection._device.kill()
    with pytest.raises(RunnerError) as failed:
        _add_call(s)
    assert failed.value.reason.startswith("the simulated GPU (device process) failed")
    assert "the student's process" not in failed.value.reason
    _add_call(s)


def test_a_device_process_that_ends_while_the_module_imports_is_told_with_why(device_student):
    """(audit) Top-level code using the GPU while the device process ended (the judge stops it at a
    limit) read "EOFError: the other side closed the channel": the runner sees only a closed socket.
    The import's failure now says the simulated GPU stopped, and the judge, which can see why the
    process ended, says why."""
    s = device_student("""
        d_x = cuda.to_device(np.ones(4, dtype=np.float32))  # at import

        def vector_add(a, b):
            return a + b
    """)
    s.connection.request({"op": "ping"})  # both processes up, the module not imported yet
    s.connection._device.kill()
    with pytest.raises(StudentCodeError) as failed:
        s.call("vector_add", *_inputs())
    said = str(failed.value)
    assert "could not import the submission" in said and "EOFError" not in said, said
    assert "DeviceError: the simulated GPU stopped: " in said and "killed" in said, said


def test_a_kernel_that_raises_says_where_as_host_code_does(device_student):
    """The stub's `raise NotImplementedError()` left in a kernel, the host function written: the
    device process, which runs the kernel, names the kernel's line as the runner names host
    code's. Before, the test said nothing at all (an empty message)."""
    s = device_student("""
        @cuda.jit
        def todo(out):
            raise NotImplementedError()


        @cuda.jit
        def refuses(out):
            raise ValueError("not for this size")


        def run(kernel):
            d_out = cuda.device_array(4, np.float32)
            (todo if kernel == 0 else refuses)[1, 4](d_out)
            return d_out.copy_to_host()
    """)
    with pytest.raises(StudentCodeError) as info:
        s.call("run", 0)
    assert info.value.summary() == "not implemented yet (ex.py:13 in todo)", info.value.summary()
    with pytest.raises(StudentCodeError) as info:
        s.call("run", 1)
    assert "ex.py:18 in refuses" in info.value.summary() and "not for this size" in info.value.summary()
    # a GPU would not stop there (numba checks a kernel's exceptions only with debug=True): said
    assert "numba ignores a kernel's raise unless it is @cuda.jit(debug=True)" in info.value.summary()


def test_a_kernel_that_never_ends_is_named_by_its_launch_line_and_its_own(device_student):
    """The kernel loops in the device process; the runner waits for it at the launch: the
    timeout names that line and says the call was waiting for a kernel launched there. The
    device says where that kernel was just before the limit: its line, and (in lockstep, before
    the per-thread executor takes the loop for a spin-wait) how far its loop got."""
    s = device_student("""
        @cuda.jit
        def spin(out):
            j = 0
            while j < 10:
                out[0] = 1.0


        def run():
            d_out = cuda.device_array(4, np.float32)
            spin[1, 1](d_out)
            return d_out.copy_to_host()
    """)
    with pytest.raises(RunnerError) as info:
        # (the kernel's typing, before it runs, took over 8 s beside a CPU hog: the limit leaves it room to run)
        s.call("run", timeout=20)
    assert re.search(r"^run\(\) timed out after 20 s: it was at ex\.py:20 in run, waiting for a kernel launched "
                     r"there, which was at ex\.py:1[45] in spin(, in the loop of line 14 at iteration [\d,]+)? "
                     r"\(does a loop in the kernel never end\?\)$", str(info.value)), str(info.value)


def test_a_host_loop_that_launches_kernels_without_end_is_not_blamed_on_the_kernel(device_student):
    """A while loop on the host whose step is never taken launches a short kernel forever: the
    runner is caught at a launch, but the device ran no kernel then and had launched many, so
    the timeout asks about the host's loop, naming the caller where it is (the audit's ring)."""
    s = device_student("""
        @cuda.jit
        def add_one(out):
            out[0] += 1.0


        def add_on(d_out):
            add_one[1, 1](d_out)


        def run():
            d_out = cuda.to_device(np.zeros(4, np.float32))
            step = 0
            while step < 3:
                add_on(d_out)
            return d_out.copy_to_host()
    """)
    with pytest.raises(RunnerError) as info:
        s.call("run", timeout=8)
    text = str(info.value)
    if "no kernel was running" not in text:  # (the watch caught a launch: rare; the kernel is named then)
        assert "which was at ex.py:13 in add_one" in text, text
        return
    assert re.search(r"^run\(\) timed out after 8 s: it was at ex\.py:17 in add_on \(called from ex\.py:24 in "
                     r"run\), launching a kernel or copying, but no kernel was running then \([\d,]+ launched in "
                     r"this call, each of which ended\): a loop in the host code that never ends\?", text), text


def test_a_kernel_whose_threads_each_loop_over_the_whole_input_says_how_long_their_loop_is(device_student):
    """A loop that ends, but runs as often as the input is long in every thread (a grid-stride loop
    stepping by 1): the timeout says how many iterations a thread has to run, not "never ends"."""
    s = device_student("""
        @cuda.jit
        def sums_from_its_own_index(x, out):
            acc = 0.0
            for i in range(cuda.grid(1), x.size, 1):
                acc += x[i]
            cuda.atomic.add(out, 0, acc)


        def total(x):
            d_out = cuda.to_device(np.zeros(1, np.float32))
            sums_from_its_own_index[8, 128](cuda.to_device(x), d_out)
            return d_out.copy_to_host()[0]
    """)
    with pytest.raises(RunnerError) as info:
        s.call("total", np.ones(1 << 22, np.float32), timeout=8)
    assert re.search(r"^total\(\) timed out after 8 s: it was at ex\.py:21 in total, waiting for a kernel launched "
                     r"there, which was at ex\.py:1[45] in sums_from_its_own_index, in the loop of line 14 at "
                     r"iteration [\d,]+ of up to 4,194,304 in a thread \(does each thread need that many\?\)$",
                     str(info.value)), str(info.value)


def test_numba_cuda_random_works_through_the_device_process(device_student):
    """Its generator states are a record array (two uint64): they cross to the device and the
    draws are numba-cuda's own algorithm's."""
    s = device_student("""
        from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

        @cuda.jit
        def draw(states, out):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = xoroshiro128p_uniform_float32(states, i)

        def run(n):
            states = create_xoroshiro128p_states(n, seed=1)
            out = cuda.device_array(n, np.float32)
            draw[(n + 127) // 128, 128](states, out)
            return out.copy_to_host()
    """)
    got = s.call("run", 1000).value
    assert got.shape == (1000,) and (0 <= got).all() and (got < 1).all() and len(set(got.tolist())) > 990
    assert np.isclose(got.mean(), 0.5, atol=0.05)


def test_a_grid_sync_kernel_works_through_the_device_process(device_student):
    """Cooperative groups reach the device: `cuda.cg.this_grid()` and `from numba.cuda import cg`."""
    s = device_student("""
        from numba.cuda import cg

        @cuda.jit
        def shift(a, out):
            g = cg.this_grid()
            i = cuda.grid(1)
            out[i] = i
            g.sync()          # every block's writes are visible to every block after it
            a[i] = out[(i + 1) % out.size]

        def run():
            a, o = cuda.device_array(256, np.int32), cuda.device_array(256, np.int32)
            shift[4, 64](a, o)
            return a.copy_to_host()
    """)
    assert (s.call("run").value == (np.arange(256) + 1) % 256).all()


# ------------------------------------------------ data the host made, laundered through a kernel
# Each attack computes a + b on the host and gets it past a data flow that follows allocations:
# a kernel touches the inputs, or rewrites one element, and the memory then counts as its work.
FIX_FIRST = """
    @cuda.jit
    def fix_first(a, b, out):
        if cuda.grid(1) == 0:
            out[0] = a[0] + b[0]
"""


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
@pytest.mark.parametrize("how", [
    # a view of a larger upload: the kernel writes the element past the answer
    """d_big = cuda.to_device(np.concatenate([a + b, np.ones(1, np.float32)]))
       fix_first[1, 32](d_a, d_b, d_big[a.size:])
       return d_big[:a.size].copy_to_host()""",
    # uploaded in pieces, element 0 spoilt, then computed by the kernel
    """d_out = cuda.device_array_like(d_a)
       host = a + b
       host[0] = 0
       d_out[:500] = host[:500]
       d_out[500:] = host[500:]
       fix_first[1, 32](d_a, d_b, d_out)
       return d_out.copy_to_host()""",
    # copied device to device first
    """host = a + b
       host[0] = 0
       d_host = cuda.to_device(host)
       d_out = cuda.device_array_like(d_a)
       d_out.copy_to_device(d_host)
       fix_first[1, 32](d_a, d_b, d_out)
       return d_out.copy_to_host()""",
    # a host array handed to the kernel (numba copies it in and back)
    """out = a + b
       out[0] = 0
       fix_first[1, 32](d_a, d_b, out)
       return out""",
], ids=["view", "pieces", "device_copy", "host_argument"])
def test_a_host_answer_a_kernel_touched_up_is_still_the_hosts(device_student, how):
    body = "\n".join("            " + line.strip() for line in how.splitlines())
    s = device_student(textwrap.dedent(FIX_FIRST) + textwrap.dedent(f"""
        def vector_add(a, b):
            d_a, d_b = cuda.to_device(a), cuda.to_device(b)
{body}
    """))
    result = _add_call(s)
    with pytest.raises(WrongAnswer, match="the answer is bytes the host wrote to the GPU .* that no kernel rewrote"):
        require_kernel_launch(result, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
@pytest.mark.parametrize("how", [
    # the tail computed on the host into the output it uploads
    """out = np.zeros_like(a)
       out[m:] = a[m:] + b[m:]
       d_out = cuda.to_device(out)
       add[m // 32, 32](d_a, d_b, d_out)
       return d_out.copy_to_host()""",
    # the same output handed to the kernel as a host array (numba copies it in and back)
    """out = np.zeros_like(a)
       out[m:] = a[m:] + b[m:]
       add[m // 32, 32](d_a, d_b, out)
       return out""",
], ids=["upload", "host_argument"])
def test_a_tail_left_to_the_host_is_the_hosts_however_short(device_student, how):
    """A kernel launched for whole blocks only, the last n % 32 elements computed by the host:
    8 of 1000 elements (under the sixteenth that a value-based comparison had to allow)."""
    body = "\n".join("            " + line.strip() for line in how.splitlines())
    s = device_student(textwrap.dedent(f"""
        def vector_add(a, b):
            m = a.size - a.size % 32
            d_a, d_b = cuda.to_device(a), cuda.to_device(b)
{body}
    """))
    result = _add_call(s)
    with pytest.raises(WrongAnswer, match="8 of its 1000 elements are those bytes, the first at index 992: no kernel "
                                         "stored to them"):
        require_kernel_launch(result, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
@pytest.mark.parametrize("how", [
    "d_out = cuda.to_device(half)",
    "d_out = cuda.device_array_like(d_a)\n            d_out[:] = half",
], ids=["upload", "setitem"])
def test_a_kernel_that_stores_what_the_host_had_put_there_computed_it(device_student, how):
    """Elements a kernel stored to are its work even where the bytes equal the host's (an output
    whose memory held half the answer before, from a host check or a reused buffer): told by
    the simulator's store flags, not by comparing bytes (which failed such a call whole)."""
    s = device_student(f"""
        def vector_add(a, b):
            d_a, d_b = cuda.to_device(a), cuda.to_device(b)
            half = np.where(np.arange(a.size) < a.size // 2, a + b, 0).astype(a.dtype)
            {how}
            add[(a.size + 127) // 128, 128](d_a, d_b, d_out)
            return d_out.copy_to_host()
    """)
    result = _add_call(s)
    require_kernel_launch(result, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_a_scalar_the_host_computed_does_not_pass_through_an_accumulator(device_student):
    s = device_student("""
        @cuda.jit
        def touch(x, out):
            i = cuda.grid(1)
            if i < x.size:
                cuda.atomic.add(out, 0, x[i] * 0.0)

        def total(x):
            d_x, d_out = cuda.to_device(x), cuda.to_device(np.array([x.sum()], np.float32))
            touch[(x.size + 127) // 128, 128](d_x, d_out)
            return d_out[0]
    """)
    x, _ = _inputs()
    result = s.call("total", x)
    with pytest.raises(WrongAnswer, match="computed from data the host made.*copied to the GPU at ex.py:"):
        require_kernel_launch(result, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_a_number_the_host_computed_does_not_pass_as_a_kernels_argument(device_student):
    """A host sum passed to a kernel as a scalar argument, or frozen into one as a closure
    variable, and written out (each scored every correctness point of a reduction stage); the
    call's own numbers (SAXPY's alpha, also copied to the GPU as an array of one: it lost every
    correctness point of its stage), sizes, offsets, masks and start values given the same ways
    are no host data."""
    s = device_student("""
        @cuda.jit
        def write(x, out, s):
            out[0] = s + x[0] * 0

        def total(x):
            d_x, d_out = cuda.to_device(x), cuda.device_array(1, x.dtype)
            write[1, 1](d_x, d_out, x.astype(np.float64).sum() if x.dtype.kind == "f" else int(x.sum()))
            return d_out.copy_to_host()[0]

        def total_in_a_closure(x):
            s = x.astype(np.float64).sum()

            @cuda.jit
            def write_it(x, out):
                out[0] = s + x[0] * 0

            d_x, d_out = cuda.to_device(x), cuda.device_array(1, x.dtype)
            write_it[1, 1](d_x, d_out)
            return d_out.copy_to_host()[0]

        MASK = 0xFFFFFFFF

        @cuda.jit
        def saxpy(alpha, x, y, n, start, zero):
            i = cuda.grid(1) + start
            if i < n and MASK != 0:
                y[i] = alpha * x[i] + y[i] + zero

        def saxpy_inplace(alpha, x, y):
            d_x, d_y = cuda.to_device(x), cuda.to_device(y)
            saxpy[(x.size + 127) // 128, 128](np.float32(alpha), d_x, d_y, x.size, 0, 0.0)
            d_y.copy_to_host(y)
            return y

        def saxpy_not_in_place(alpha, x, y):  # the caller's y is left as it was
            d_x, d_y = cuda.to_device(x), cuda.to_device(y)
            saxpy[(x.size + 127) // 128, 128](np.float32(alpha), d_x, d_y, x.size, 0, 0.0)
            return d_y.copy_to_host()

        @cuda.jit
        def saxpy_alpha_in_memory(alpha, x, y):
            i = cuda.grid(1)
            if i < y.size:
                y[i] = alpha[0] * x[i] + y[i]

        def saxpy_alpha_on_the_device(alpha, x, y):  # alpha copied to the GPU as an array of one
            d_alpha = cuda.to_device(np.full(1, alpha, np.float32))
            d_x, d_y = cuda.to_device(x), cuda.to_device(y)
            saxpy_alpha_in_memory[(x.size + 127) // 128, 128](d_alpha, d_x, d_y)
            d_y.copy_to_host(y)
            return y

        def saxpy_host_sum_on_the_device(alpha, x, y):  # not alpha: data the host made
            d_alpha = cuda.to_device(np.full(1, x.sum(), np.float32))
            d_x, d_y = cuda.to_device(x), cuda.to_device(y)
            saxpy_alpha_in_memory[(x.size + 127) // 128, 128](d_alpha, d_x, d_y)
            d_y.copy_to_host(y)
            return y
    """)
    x, y = _inputs()
    unchanged = s.call("saxpy_not_in_place", np.float32(2.0), x, y)
    with pytest.raises(WrongAnswer, match=r"the answer is `y` \(float32\[1000\]\) as it was passed in"):
        require_kernel_launch(unchanged, "sim", output=unchanged.args[2], inputs=[1, 2])
    cheat = s.call("total", x)
    with pytest.raises(WrongAnswer, match="data the host made.*the number [0-9.-]+ passed to kernel 'write' as its "
                                          "argument 's', launched at ex.py:"):
        require_kernel_launch(cheat, "sim")
    with pytest.raises(WrongAnswer, match="the number [0-9.-]+ that 'write_it' takes as the constant 's' "
                                          r"\(a global or closure variable"):
        require_kernel_launch(s.call("total_in_a_closure", x), "sim")
    ints = np.arange(1, 2001, dtype=np.int32)  # the sum, 2001000, is larger than any size of the launch
    with pytest.raises(WrongAnswer, match="the number 2001000 passed"):
        require_kernel_launch(s.call("total", ints), "sim")
    alpha = np.float32(1.5)
    for function in ("saxpy_inplace", "saxpy_alpha_on_the_device"):
        honest = s.call(function, alpha, x, y.copy())
        assert np.allclose(honest.value, alpha * x + y), function
        require_kernel_launch(honest, "sim", output=honest.args[2], inputs=[1, 2])
    cheat = s.call("saxpy_host_sum_on_the_device", alpha, x, y.copy())
    with pytest.raises(WrongAnswer, match="data the host made, not only from the inputs: the array copied to the "
                                          "GPU at ex.py:"):
        require_kernel_launch(cheat, "sim", output=cheat.args[2], inputs=[1, 2])


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_a_sum_the_host_computed_does_not_pass_as_a_grid(device_student):
    """The launch configuration as a channel: a host sum launched as the grid's width, which the
    kernel reads as cuda.gridDim.x and writes out. An honest fixed grid that the kernel reads
    (a grid-stride loop) is no host data, nor is a grid as wide as the answer has elements (one
    thread per block of an outer product: wider than 2^16 and than either input)."""
    s = device_student("""
        @cuda.jit
        def write_grid(x, out):
            if cuda.grid(1) == 0:
                out[0] = cuda.gridDim.x + x[0] * 0

        def total(x):
            d_x, d_out = cuda.to_device(x), cuda.device_array(1, x.dtype)
            write_grid[int(x.sum()), 1](d_x, d_out)
            return d_out.copy_to_host()[0]

        @cuda.jit
        def grid_stride_sum(x, out):
            for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
                cuda.atomic.add(out, 0, x[i])

        def total_honest(x):
            d_x, d_out = cuda.to_device(x), cuda.to_device(np.zeros(1, x.dtype))
            grid_stride_sum[32, 256](d_x, d_out)
            return d_out.copy_to_host()[0]

        @cuda.jit
        def outer_one_per_block(a, b, c):
            i = cuda.blockIdx.x  # one thread per block, one block per element of c
            c[i // b.size, i % b.size] = a[i // b.size] * b[i % b.size]

        def outer(a, b):  # a grid wider than 2^16 and than either input: the answer's size
            d_c = cuda.device_array((a.size, b.size), a.dtype)
            outer_one_per_block[a.size * b.size, 1](cuda.to_device(a), cuda.to_device(b), d_c)
            return d_c.copy_to_host()
    """)
    x = np.arange(100, 400, dtype=np.int32)  # sums to 74850: more than 2^16 and the array's size
    cheat = s.call("total", x)
    assert cheat.value == x.sum()
    with pytest.raises(WrongAnswer, match=r"data the host made.*the number 74850 given to kernel 'write_grid' as its "
                                          r"grid's x dimension"):
        require_kernel_launch(cheat, "sim")
    honest = s.call("total_honest", x)
    assert honest.value == x.sum()
    require_kernel_launch(honest, "sim")
    a, b = _inputs(300)
    honest = s.call("outer", a, b)
    assert np.array_equal(honest.value, np.outer(a, b))
    require_kernel_launch(honest, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_start_values_garbage_and_random_states_are_not_the_hosts_answer(device_student):
    """What honest host code uploads beside the inputs: an accumulator's zeros, an output array
    of leftover memory that the kernel overwrites, numba's random number states."""
    s = device_student("""
        from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

        @cuda.jit
        def noisy_sum(x, states, partial):
            i = cuda.grid(1)
            if i < x.size:
                cuda.atomic.add(partial, 0, x[i] + xoroshiro128p_uniform_float32(states, i) * 0.0)

        def total(x):
            d_x, d_sum = cuda.to_device(x), cuda.to_device(np.zeros(1, np.float32))
            noisy_sum[(x.size + 127) // 128, 128](d_x, create_xoroshiro128p_states(x.size, seed=3), d_sum)
            return d_sum.copy_to_host()

        def vector_add(a, b):
            d_out = cuda.to_device(np.random.default_rng(1).standard_normal(a.size).astype(np.float32))
            add[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), d_out)
            return d_out.copy_to_host()
    """)
    a, b = _inputs()
    require_kernel_launch(s.call("vector_add", a, b), "sim")
    summed = s.call("total", a)
    require_kernel_launch(summed, "sim")
    assert np.isclose(summed.value[0], a.sum(), atol=1e-2)


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_more_copies_than_the_device_records_fail_the_call(device_student):
    """A host answer uploaded after 10000 decoys would be beyond the record the judge checks."""
    s = device_student("""
        def vector_add(a, b):
            decoys = [cuda.to_device(np.ones(1, np.float32)) for _ in range(10001)]
            d_out = cuda.device_array_like(a)
            add[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), d_out)
            return d_out.copy_to_host()
    """)
    a, b = _inputs()
    with pytest.raises(StudentCodeError, match="more than 10000 copies to the GPU"):
        s.call("vector_add", a, b)


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_inputs_uploaded_in_pieces_are_the_inputs(device_student):
    """Chunks copied on streams into views of one allocation, or written with `d[i:j] = ...`:
    once every element is there the allocation counts as the input, uploaded whole."""
    s = device_student("""
        def vector_add(a, b):
            d_a, d_b = cuda.device_array_like(a), cuda.device_array_like(b)
            streams = [cuda.stream(), cuda.stream()]
            for k, i in enumerate(range(0, a.size, 300)):
                d_a[i:i + 300].copy_to_device(a[i:i + 300], stream=streams[k % 2])
                d_b[i:i + 300] = b[i:i + 300]
            cuda.synchronize()
            d_out = cuda.device_array_like(d_a)
            add[(a.size + 127) // 128, 128](d_a, d_b, d_out)
            return d_out.copy_to_host()
    """)
    result = _add_call(s)
    require_kernel_launch(result, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_a_pipeline_of_chunks_on_streams_is_the_gpus_work(device_student):
    """The classic overlap of copies and kernels: each chunk of the inputs to its own
    allocation on its own stream, a kernel per chunk, each result copied back into a slice of
    the host's answer. Pieces are found in the inputs and the answer by their first values and
    confirmed by their digests."""
    s = device_student("""
        def vector_add(a, b):
            out = np.empty_like(a)
            streams = [cuda.stream() for _ in range(3)]
            for k, i in enumerate(range(0, a.size, 256)):
                stream = streams[k % 3]
                d_a = cuda.to_device(a[i:i + 256], stream=stream)
                d_b = cuda.to_device(b[i:i + 256], stream=stream)
                d_out = cuda.device_array(d_a.size, np.float32, stream=stream)
                add[2, 128, stream](d_a, d_b, d_out)
                d_out.copy_to_host(out[i:i + 256], stream=stream)
            cuda.synchronize()
            return out

        def vector_add_last_chunk_on_the_host(a, b):
            cuda.to_device(a), cuda.to_device(b)  # the inputs copied whole too, to no use
            out = vector_add(a[:768], b[:768])
            return np.concatenate([out, a[768:] + b[768:]])
    """)
    a, b = _inputs()
    result = _add_call(s)
    require_kernel_launch(result, "sim")
    cheat = s.call("vector_add_last_chunk_on_the_host", a, b)
    with pytest.raises(WrongAnswer, match="not copied back from GPU memory written by a kernel"):
        require_kernel_launch(cheat, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_inputs_padded_flattened_or_converted_and_answers_sliced_reshaped_or_converted_are_the_gpus_work(
        device_student):
    """Padding on the host so that the kernel needs no bounds check (a matrix to whole tiles, a
    vector to whole blocks), the answer sliced from the padded output; matrices copied as 1-D
    arrays, the answer reshaped; inputs converted to float64, the answer converted back; the
    answer's transpose computed and turned on the host: honest, and each failed as "never copied
    to the GPU" (the last as "not copied back from GPU memory written by a kernel"). An output's padding that keeps bytes the host
    put there is not the answer (it failed as "bytes the host wrote"). Padding of an input that is
    not zeros still carries host data."""
    s = device_student("""
        @cuda.jit
        def add_unguarded(a, b, out):
            i = cuda.grid(1)
            out[i] = a[i] + b[i]

        def vector_add(a, b):
            n, padded = a.size, -(-a.size // 128) * 128
            a_p, b_p = np.zeros(padded, a.dtype), np.zeros(padded, b.dtype)
            a_p[:n], b_p[:n] = a, b
            d_out = cuda.device_array(padded, a.dtype)
            add_unguarded[padded // 128, 128](cuda.to_device(a_p), cuda.to_device(b_p), d_out)
            return d_out.copy_to_host()[:n]

        def vector_add_padding_holds_the_answer(a, b):
            n = a.size
            a_p = np.concatenate([a, a + b])  # the "padding" is the host's answer
            d_out = cuda.device_array(n, a.dtype)
            add[(n + 127) // 128, 128](cuda.to_device(a_p), cuda.to_device(b), d_out)
            return d_out.copy_to_host()

        @cuda.jit
        def add2(a, b, out):
            i, j = cuda.grid(2)
            out[i, j] = a[i, j] + b[i, j]

        def whole_tiles(a, t=16):
            return -(-a.shape[0] // t) * t, -(-a.shape[1] // t) * t

        def matrix_add(a, b):
            (m, k), t, shape = a.shape, 16, whole_tiles(a)
            a_p, b_p = np.zeros(shape, a.dtype), np.zeros(shape, b.dtype)
            a_p[:m, :k], b_p[:m, :k] = a, b
            d_out = cuda.device_array(shape, a.dtype)
            add2[(shape[0] // t, shape[1] // t), (t, t)](cuda.to_device(a_p), cuda.to_device(b_p), d_out)
            return d_out.copy_to_host()[:m, :k].copy()

        @cuda.jit
        def add2_into(a, b, out):
            i, j = cuda.grid(2)
            if i < a.shape[0] and j < a.shape[1]:
                out[i, j] = a[i, j] + b[i, j]

        def matrix_add_into_a_filled_output(a, b):  # the output's padding keeps what the host put there
            (m, k), t, shape = a.shape, 16, whole_tiles(a)
            d_out = cuda.to_device(np.full(shape, 7, a.dtype))
            add2_into[(shape[0] // t, shape[1] // t), (t, t)](cuda.to_device(a), cuda.to_device(b), d_out)
            return d_out.copy_to_host()[:m, :k].copy()

        @cuda.jit
        def add2_transposed(a, b, out_t):
            i, j = cuda.grid(2)
            if i < a.shape[0] and j < a.shape[1]:
                out_t[j, i] = a[i, j] + b[i, j]

        def matrix_add_transposed(a, b):  # the kernel writes the answer's transpose, the host turns it
            d_t = cuda.device_array((a.shape[1], a.shape[0]), a.dtype)
            add2_transposed[(3, 2), (16, 16)](cuda.to_device(a), cuda.to_device(b), d_t)
            return d_t.copy_to_host().T

        def vector_add_in_float64(a, b):  # converted on the host, and the answer converted back
            d_out = cuda.device_array(a.size, np.float64)
            add[(a.size + 127) // 128, 128](cuda.to_device(a.astype(np.float64)), cuda.to_device(b.astype(np.float64)),
                                            d_out)
            return d_out.copy_to_host().astype(np.float32)

        def matrix_add_flattened(a, b):  # 1-D copies of the matrices, the answer reshaped on the host
            d_out = cuda.device_array(a.size, a.dtype)
            add[(a.size + 127) // 128, 128](cuda.to_device(a.ravel()), cuda.to_device(b.ravel()), d_out)
            return d_out.copy_to_host().reshape(a.shape)

        def matrix_add_of_device_transposes(a, b):  # numba-cuda's d.T: a copy, made on the device
            d_at, d_bt = cuda.to_device(a).T, cuda.to_device(b).T
            d_out = cuda.device_array(d_at.shape, a.dtype)
            add2_into[(2, 3), (16, 16)](d_at, d_bt, d_out)
            return d_out.copy_to_host().T.copy()
    """)
    a, b = _inputs(1000)
    A, B = a[:999].reshape(37, 27), b[:999].reshape(37, 27)
    for function, x, y in [("vector_add", a, b), ("matrix_add", A, B), ("matrix_add_into_a_filled_output", A, B),
                           ("matrix_add_transposed", A, B), ("vector_add_in_float64", a, b),
                           ("matrix_add_flattened", A, B), ("matrix_add_of_device_transposes", A, B)]:
        result = s.call(function, x, y)
        assert np.array_equal(result.value, x + y), function
        # (with the check: the call's device work replayed on other inputs follows them too)
        require_kernel_launch(result, "sim", check=lambda args, out: expect_close(out, args[0] + args[1], rtol=1e-6))
    cheat = s.call("vector_add_padding_holds_the_answer", a, b)
    # (named as the module declares it: the audit's student read "input array 1")
    with pytest.raises(WrongAnswer, match=r"^`a` \(float32\[1000\]\) was never copied to the GPU during "
                                          r"vector_add_padding_holds_the_answer\(a, b\):"):
        require_kernel_launch(cheat, "sim")


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_an_answer_of_another_dtype_or_shape_is_told_what_to_change(device_student):
    """The mistakes students make with the answer's array: float64 where float32 is expected, a
    padded output never sliced, a flat answer of a matrix. Each was refused at the wire, larger
    than the expected answer, as "the runner broke the protocol: array frames of 16 bytes"."""
    s = device_student("""
        @cuda.jit
        def add_n(a, b, out):
            i = cuda.grid(1)
            if i < a.size:
                out[i] = a[i] + b[i]

        def compute(a, b, dtype, pad, shape):
            d_out = cuda.to_device(np.zeros(a.size + pad, dtype))
            add_n[(a.size + 127) // 128, 128](cuda.to_device(a.astype(dtype)), cuda.to_device(b.astype(dtype)), d_out)
            return d_out.copy_to_host().reshape(shape)

        def forgets_to_return(a, b):
            compute(a, b, "float32", 0, a.shape)
    """)
    a, b = _inputs(1000)
    cases = [(np.float64, 0, (1000,), r"returned a float64 array; expected float32 \(allocate the output as float32"),
             (np.float32, 24, (1024,), r"returned an array larger than the answer \(a padded output\? return its "
                                       r"leading block, out\[:n\]\)"),
             (np.float32, 0, (1000, 1), "returned an array of the answer's size in another shape")]
    for dtype, pad, shape, message in cases:
        with pytest.raises(WrongAnswer, match="compute\\(\\) " + message):
            s.call("compute", a, b, np.dtype(dtype).name, pad, shape, returns=Returns.like(a))
    with pytest.raises(WrongAnswer, match=r"\nreturned float64\[1000\]; expected float32\[1000\]"):
        s.call("compute", a, b, "float64", 0, (1000,), returns=Returns.like(a))
    with pytest.raises(WrongAnswer, match=r"forgets_to_return\(\) returned None; expected a float32 array \(a "
                                          r"missing `return`\?\)"):
        s.call("forgets_to_return", a, b, returns=Returns.like(a))


@pytest.mark.parametrize("device_student", ["process"], indirect=True)
def test_an_answer_that_equals_an_input_may_be_the_kernels_work(device_student):
    """The sum of an array of one element, returned as an array of one, is that array's bytes:
    it failed as "the answer is input array 1 as it was passed in" (and before that as "what the
    host copied to the GPU")."""
    s = device_student("""
        @cuda.jit
        def total_kernel(x, out):
            i = cuda.grid(1)
            if i < x.size:
                cuda.atomic.add(out, 0, x[i])

        def total(x):
            d_out = cuda.to_device(np.zeros(1, x.dtype))
            total_kernel[1, 32](cuda.to_device(x), d_out)
            return d_out.copy_to_host()
    """)
    x = np.array([2.5], np.float32)
    result = s.call("total", x)
    assert np.array_equal(result.value, x)
    require_kernel_launch(result, "sim")


def test_arrays_larger_than_the_file_size_limit_still_reach_the_device_and_come_back(tmp_path):
    # a sandboxed runner may write files of Limits.file_size_bytes at most (RLIMIT_FSIZE), and a
    # memfd is a file: an upload past it failed with "OSError: [Errno 27] File too large" in the
    # student's cuda.to_device (2^24 float64 inputs at a GPU timing's size are 128 MiB). Such a
    # frame goes through the socket; the student's own files stay bounded
    (tmp_path / "ex.py").write_text(textwrap.dedent("""
        import numpy as np
        from numba import cuda

        def round_trip(x):
            return cuda.to_device(x).copy_to_host()

        def write_file(n):
            with open("/tmp/big.bin", "wb") as f:
                f.write(bytes(n))
    """))
    sandbox = ProcessSandbox(Limits(call_timeout_s=120, file_size_bytes=1 << 20))
    s = Student("ex", str(tmp_path), "sim", sandbox, allowed_imports=None,
                connection=RunnerConnection(str(tmp_path), "sim", sandbox))
    try:
        x = np.random.default_rng(1).standard_normal(1 << 18)  # 2 MiB of float64
        np.testing.assert_array_equal(s.call("round_trip", x).value, x)
        with pytest.raises(StudentCodeError, match="File too large"):
            s.call("write_file", 2 << 20)
    finally:
        s.close()


def test_a_device_process_that_does_not_start_is_the_graders_fault(tmp_path):
    """The simulated GPU is a process of the grader's: when it cannot start (here: started with an
    option it does not know, as a broken install would), the call fails with GraderFault, which
    the plugin makes a grader error of the grade (exit 3), never "the student's process"."""
    from grader.errors import GraderFault

    reason = bubblewrap_unavailable()
    if reason:
        unavailable(reason)

    class BrokenDevice(ProcessSandbox):
        def device_process(self, devices, runner_workspace, trusted, flag, fd, gpu=False, sources=None):
            return super().device_process(devices, runner_workspace, trusted, "--no-such-option", fd, gpu, sources)

    (tmp_path / "ex.py").write_text(textwrap.dedent(ADD))
    sandbox = BrokenDevice(Limits(call_timeout_s=60))
    s = Student("ex", str(tmp_path), "sim", sandbox, allowed_imports=None,
                connection=RunnerConnection(str(tmp_path), "sim", sandbox))
    try:
        with pytest.raises(GraderFault) as info:
            _add_call(s)
    finally:
        s.close()
    assert "device process) did not start" in info.value.reason and "not of the submission" in info.value.reason
    assert "the student's process" not in info.value.reason
