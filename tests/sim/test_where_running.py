"""Where a running kernel is, read from another thread (grader.sim.watch): what a call that runs
out of time says of its kernel. Sampled while real launches run; the assertions are on what is
said, never on how far a launch got by some time."""

import importlib.util
import re
import sys
import textwrap
import threading

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim
from grader.sim.simt.progress import most_iterations
from grader.sim.watch import where_running

KERNELS = """
    from numba import cuda


    @cuda.jit
    def sums_from_its_own_index(x, out):
        acc = 0.0
        for i in range(cuda.grid(1), x.size):  # each thread: everything from its own index on
            acc += x[i]
        out[cuda.grid(1)] = acc


    @cuda.jit
    def nested(x, out):
        acc = 0.0
        for j in range(40):
            k = 0
            while k < x.size:
                acc += x[k]
                k += 1
        out[cuda.grid(1)] = acc


    @cuda.jit(device=True)
    def first_at_least(x, v):
        for i in range(x.size):
            if x[i] >= v:
                return i  # (every lane, at once: the function returns from inside its loop)
        return -1


    @cuda.jit
    def after_a_return_from_a_loop(x, out):
        acc = 0.0
        for k in range(3):
            acc += first_at_least(x, 0.5)
        for i in range(cuda.grid(1), x.size):
            acc += x[i]
        out[cuda.grid(1)] = acc
"""


@pytest.fixture
def kernels(tmp_path):
    """The kernels, in a file of a folder of their own (the device's workspace: the host code that
    launches them is not in it)."""
    (tmp_path / "kernels.py").write_text(textwrap.dedent(KERNELS))
    spec = importlib.util.spec_from_file_location("watch_kernels", tmp_path / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.workspace = str(tmp_path) + "/"
    return module


def _samples(kernels, kernel, executor, blocks, threads, n, every=0.02):
    """What `where_running` says of the main thread every `every` s while `kernel` runs there on
    `executor`, `blocks` x `threads` of them over n ones (its output: one float64 per thread)."""
    said, done, main = [], threading.Event(), threading.get_ident()

    def watch():
        while not done.wait(every):
            said.append(where_running(sys._current_frames().get(main), kernels.workspace))

    with sim.installed(executor=executor):
        d_x, out = cuda.to_device(np.ones(n, np.float32)), cuda.device_array(blocks * threads, np.float64)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            kernel[blocks, threads](d_x, out)
        finally:
            done.set()
            watcher.join()
        kernels.out = out.copy_to_host()
    return [s for s in said if s]


def _line(kernel, offset):
    return kernel.py_func.__code__.co_firstlineno + offset  # (the decorator's line)


def test_a_lockstep_kernel_is_named_with_its_line_its_batch_of_blocks_and_its_range_loop(kernels):
    k = kernels.sums_from_its_own_index
    said = _samples(kernels, k, "simt", 3 * (1 << 15) // 256, 256, 3000)  # three batches of blocks
    loop = _line(k, 3)
    # (any line of the kernel: before its loop, entering it, after it; most samples fall inside it)
    pattern = (rf"kernels.py:\d+ in sums_from_its_own_index, blocks (0 to 127|128 to 255|256 to 383) of 384"
               rf"(, in the loop of line {loop}( at iteration [\d,]+ of up to 3,000 in a thread)?)?")
    assert said and all(re.fullmatch(pattern, s) for s in said), [s for s in said if not re.fullmatch(pattern, s)]
    assert any(re.fullmatch(rf"kernels.py:{loop + 1} in sums_from_its_own_index, blocks \d+ to \d+ of 384, in the loop "
                            rf"of line {loop} at iteration [\d,]+ of up to 3,000 in a thread", s) for s in said), said


def test_loops_inside_loops_are_named_innermost_first_a_while_loop_without_a_bound(kernels):
    k = kernels.nested
    said = _samples(kernels, k, "simt", 1, 32, 200)
    outer, inner = _line(k, 3), _line(k, 5)
    pattern = (rf"kernels.py:\d+ in nested, in the loop of line {inner} at iteration [\d,]+, inside the loop of "
               rf"line {outer} at iteration \d+ of up to 40 in a thread")  # (any: sampled inside both loops)
    assert said and any(re.fullmatch(pattern, s) for s in said), said
    assert np.all(kernels.out == 40 * 200)


def test_a_loop_a_device_function_returned_from_is_not_named_as_still_open(kernels):
    k = kernels.after_a_return_from_a_loop
    said = _samples(kernels, k, "simt", 1, 64, 3000)
    loop = _line(k, 5)
    inside = [s for s in said if f"in the loop of line {loop} at iteration" in s]
    assert inside and all(s.endswith(" of up to 3,000 in a thread") and "inside" not in s for s in inside), said


def test_the_per_thread_executor_is_named_by_its_line_alone(kernels):
    k = kernels.sums_from_its_own_index
    said = _samples(kernels, k, "thread", 1, 64, 4000)
    # (a thread entering the kernel is at its def line now and then)
    assert said and all(re.fullmatch(r"kernels.py:\d+ in sums_from_its_own_index", s) for s in said), said
    assert any(s == f"kernels.py:{_line(k, 4)} in sums_from_its_own_index" for s in said), said


def test_nothing_is_said_of_a_thread_outside_the_kernels_files(kernels):
    assert where_running(sys._current_frames()[threading.get_ident()], kernels.workspace) == ""
    assert where_running(None, kernels.workspace) == ""


@pytest.mark.parametrize("bounds,done,most", [
    (range(5, 100, 7), 3, 14),
    ((np.array([0, 10, 20]), 100, 1, 1), 1, 100),          # lane 0 at its first value: 100 in all
    ((np.array([50, 90, 120]), np.int64(100), 1, 51), 51, 100),
    ((np.array([90, 99]), 0, -3, 4), 4, 4 + 33 - 1),      # counting down
    ((np.array([3, 3]), 10, np.array([0, 0]), 2), 2, 2),  # a step of 0 runs on: no bound past what ran
    (None, 7, None),                                     # a while loop
])
def test_most_iterations_of_a_range_in_one_lane(bounds, done, most):
    assert most_iterations(bounds, done) == most
