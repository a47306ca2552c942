"""The answer must follow the inputs: a call's device work replayed on other inputs (grader.device.replay,
grader.judge.replay).

Each cheat here passes every byte-following rule of the data flow (the kernel reads every input,
no bytes the host made reach the answer, every number a kernel is given could be a size); the
replay holds what the host computed fixed and the answer stays the old one. Each honest program
here does something a replay must reproduce exactly: pieces, older allocations, round trips.
"""


import numpy as np
import pytest

from grader.errors import RunnerError
from grader.judge import RunnerConnection, Student, require_kernel_launch
from grader.judge.correctness import WrongAnswer, expect_close
from grader.sandbox import Limits, ProcessSandbox
from grader.sandbox.bubblewrap import unavailable as bubblewrap_unavailable

from sandbox_support import students_of, unavailable

KERNELS = """
    import numpy as np
    from numba import cuda

    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    @cuda.jit
    def total(x, out):
        i = cuda.grid(1)
        if i < x.size:
            cuda.atomic.add(out, 0, x[i])
"""


REDUCE = """
    def reduce(x):
        d_x, d_out = cuda.to_device(x), cuda.to_device(np.zeros(1, np.float32))
        total[(x.size + 127) // 128, 128](d_x, d_out)
        return d_out.copy_to_host()[0]
"""


@pytest.fixture
def student(tmp_path):
    make, made = students_of(tmp_path, KERNELS, Limits(call_timeout_s=120))
    yield make
    for s in made:
        s.close()


def _inputs(n=1000):
    rng = np.random.default_rng(11)
    return rng.standard_normal(n).astype(np.float32), (rng.standard_normal(n) + 1).astype(np.float32)


def _add_check(args, out):
    expect_close(out, args[0] + args[1], rtol=1e-6, what="vector_add")


def _sum_check(args, got):
    x = args[0].astype(np.float64)
    if abs(float(got) - x.sum()) > 1e-4 * np.abs(x).sum():
        raise WrongAnswer(f"expected {x.sum():.7g}, got {float(got):.7g}")


def _replays(result):
    """`result` counting its replays (the check must have run one)."""
    count = [0]
    replay = result.replay

    def counted(*args):
        count[0] += 1
        return replay(*args)

    result.replay = counted
    return count


def _replayed_once(result, check):
    """`require_kernel_launch` with `check` passes, having replayed the call once."""
    replays = _replays(result)
    require_kernel_launch(result, "sim", check=check)
    assert replays[0] == 1


def _sum_call(s, function="reduce"):
    _, x = _inputs()
    result = s.call(function, x)
    _sum_check([x], result.value)  # the call's own answer is right, whoever computed it
    return result


def test_an_honest_call_follows_its_inputs(student):
    s = student("""
        def vector_add(a, b):
            d_a, d_b = cuda.to_device(a), cuda.to_device(b)
            d_out = cuda.device_array_like(d_a)
            add[(a.size + 127) // 128, 128](d_a, d_b, d_out)
            return d_out.copy_to_host()
    """)
    a, b = _inputs()
    result = s.call("vector_add", a, b)
    _replayed_once(result, _add_check)


def test_a_host_sum_in_numbers_no_larger_than_a_size_does_not_follow(student):
    s = student("""
        @cuda.jit
        def put_together(x, out, high, low, exponent):
            v = high * 4096.0 + low
            e = exponent - 200
            while e > 0:
                v *= 2.0
                e -= 1
            while e < 0:
                v *= 0.5
                e += 1
            out[0] = v + x[0] * 0

        def reduce(x):
            s = float(np.float32(x.astype(np.float64).sum()))  # positive: the inputs' mean is 1
            mantissa, exponent = np.frexp(s)
            bits = int(mantissa * (1 << 24))
            d_x, d_out = cuda.to_device(x), cuda.device_array(1, np.float32)
            put_together[1, 1](d_x, d_out, bits >> 12, bits & 4095, exponent - 24 + 200)
            return d_out.copy_to_host()[0]
    """)
    result = _sum_call(s)
    require_kernel_launch(result, "sim")  # every byte-following rule passes
    with pytest.raises(WrongAnswer, match="does not follow the inputs.*the number .* passed to kernel 'put_together'"):
        require_kernel_launch(result, "sim", check=_sum_check)


def test_a_host_sum_launched_as_the_grid_does_not_follow(student):
    s = student("""
        @cuda.jit
        def from_the_grid(x, out):
            if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.blockIdx.z == 0:
                out[0] = (cuda.gridDim.y * 4096 + cuda.gridDim.z) / 1024.0 + x[0] * 0

        def reduce(x):
            fixed = int(round(float(x.astype(np.float64).sum()) * 1024))  # the sum in 1/1024ths
            d_x, d_out = cuda.to_device(x), cuda.device_array(1, np.float32)
            from_the_grid[(1, fixed >> 12, fixed & 4095), 1](d_x, d_out)
            return d_out.copy_to_host()[0]
    """)
    result = _sum_call(s)
    require_kernel_launch(result, "sim")
    with pytest.raises(WrongAnswer, match="does not follow the inputs.*grid's y dimension"):
        require_kernel_launch(result, "sim", check=_sum_check)


def test_pieces_older_allocations_and_round_trips_are_replayed_as_they_were(student):
    # The input copied in chunks into views of one allocation (logged as one upload once whole),
    # a partial sum copied to the host and back unchanged, and an accumulator allocated at import
    # (before the call: the replay starts from what it held then).
    s = student("""
        ACC = cuda.to_device(np.zeros(1, np.float32))

        def reduce(x):
            d_x = cuda.device_array(x.size, np.float32)
            for start in range(0, x.size, 300):
                d_x[start:start + 300] = x[start:start + 300]
            d_half = cuda.device_array(1, np.float32)
            d_half.copy_to_device(np.zeros(1, np.float32))
            total[(x.size + 127) // 128, 128](d_x, d_half)
            back = cuda.to_device(d_half.copy_to_host())  # a round trip through the host
            ACC.copy_to_device(np.zeros(1, np.float32))
            add[1, 1](ACC, back, ACC)
            return ACC.copy_to_host()[0]
    """)
    result = _sum_call(s)
    _replayed_once(result, _sum_check)


def test_an_input_with_one_value_is_not_replayed(student):
    s = student(REDUCE)
    x = np.full(64, 2.0, np.float32)
    result = s.call("reduce", x)
    replays = _replays(result)
    require_kernel_launch(result, "sim", check=_sum_check)
    assert replays[0] == 0, "no other values can be drawn: nothing to replay"


def test_a_wrong_answer_is_left_to_the_test_not_blamed_on_the_inputs(student):
    s = student(REDUCE.replace("(x.size + 127) // 128", "(x.size - 1) // 128"))  # BUG: the last block is missing
    _, x = _inputs()
    result = s.call("reduce", x)
    replays = _replays(result)
    with pytest.raises(WrongAnswer, match="^expected .*, got") as failed:  # in the test's own words
        require_kernel_launch(result, "sim", check=_sum_check)
    assert replays[0] == 0 and "follow" not in str(failed.value)


def test_only_the_last_call_can_be_replayed(student):
    s = student(REDUCE)
    first = _sum_call(s)
    _sum_call(s)
    with pytest.raises(RunnerError, match="another call began since"):
        require_kernel_launch(first, "sim", check=_sum_check)



def test_a_call_with_ranks_is_replayed_with_every_ranks_buffer_drawn_again(tmp_path):
    from pathlib import Path

    from grader.judge.collective import expect_allreduced, rank_inputs

    reason = bubblewrap_unavailable()
    if reason:
        unavailable(reason)
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    (work / "allreduce.py").write_text((Path(__file__).resolve().parents[1] / "solutions" / "allreduce.py").read_text())
    (work / "allreduce.py").chmod(0o644)
    sandbox = ProcessSandbox(Limits(call_timeout_s=120))
    s = Student("allreduce", str(work), "sim", sandbox, allowed_imports=None,
                connection=RunnerConnection(str(work), "sim", sandbox))
    try:
        inputs = rank_inputs(np.random.default_rng(5), 4, 1000, np.float32)
        result = s.call_ranks("allreduce_ring", inputs)
        replays = _replays(result)
        require_kernel_launch(result, "sim", check=lambda args, outs: expect_allreduced(outs, args, "ring"))
        assert replays[0] == 1
    finally:
        s.close()


def test_a_wrong_answer_says_what_the_data_flow_saw_of_it(student):
    # a bug, not a cheat: the loop that should read b never runs; the answer is wrong (the test's
    # words first) and the data flow's reason follows on the same line
    s = student("""
        @cuda.jit
        def add_first(a, b, out, rounds):
            i = cuda.grid(1)
            if i < out.size:
                v = a[i]
                for _ in range(rounds):
                    v += b[i]
                out[i] = v

        def vector_add(a, b):
            d_a, d_b = cuda.to_device(a), cuda.to_device(b)
            d_out = cuda.device_array_like(d_a)
            add_first[(a.size + 127) // 128, 128](d_a, d_b, d_out, 0)  # BUG: no round
            return d_out.copy_to_host()
    """)
    a, b = _inputs()
    with pytest.raises(WrongAnswer) as failed:
        require_kernel_launch(s.call("vector_add", a, b), "sim", check=_add_check)
    headline = str(failed.value).splitlines()[0]
    assert headline.startswith("vector_add") and "never read it" in headline, headline


def test_a_test_that_needs_inputs_of_a_kind_draws_them_itself(student):
    # a count by binary search needs its input sorted: values drawn again are not, and the honest
    # kernel's answer on them would be wrong; the test's own draw keeps them sorted
    s = student("""
        @cuda.jit
        def count_below(xs, limit, out):
            lo, hi = 0, xs.size
            while lo < hi:
                mid = (lo + hi) // 2
                if xs[mid] < limit[0]:
                    lo = mid + 1
                else:
                    hi = mid
            out[0] = lo

        def below(xs, limit):
            d_out = cuda.device_array(1, np.int64)
            count_below[1, 1](cuda.to_device(xs), cuda.to_device(limit), d_out)
            return d_out.copy_to_host()[0]
    """)
    rng = np.random.default_rng(4)
    xs, limit = np.sort(rng.standard_normal(500)).astype(np.float32), np.array([0.25], np.float32)

    def check(args, got):
        if int(got) != int(np.count_nonzero(args[0] < args[1][0])):
            raise WrongAnswer(f"expected {np.count_nonzero(args[0] < args[1][0])}, got {got}")

    result = s.call("below", xs, limit)
    require_kernel_launch(result, "sim", check=check,
                          draw=lambda args, g: [np.sort(g.standard_normal(500)).astype(np.float32), args[1]])
    # unsorted draws: wrong, as said. (Not on every input: values drawn from the half all below
    # the limit, or all above it, are counted right by any search; about one draw in two.)
    misjudged = 0
    for seed in range(8):
        xs = np.sort(np.random.default_rng(seed).standard_normal(500)).astype(np.float32)
        try:
            require_kernel_launch(s.call("below", xs, limit), "sim", check=check)
        except WrongAnswer as exc:
            assert "does not follow the inputs" in str(exc), exc
            misjudged += 1
    assert misjudged >= 2


def test_a_stream_made_at_import_is_replayed_on_as_the_call_used_it(student):
    s = student("""
        STREAM = cuda.stream()

        def vector_add(a, b):
            d_a, d_b = cuda.to_device(a, stream=STREAM), cuda.to_device(b, stream=STREAM)
            d_out = cuda.device_array_like(d_a, stream=STREAM)
            add[(a.size + 127) // 128, 128, STREAM](d_a, d_b, d_out)
            out = d_out.copy_to_host(stream=STREAM)
            STREAM.synchronize()
            return out
    """)
    a, b = _inputs()
    for _ in range(2):  # the second call: the stream has a history
        result = s.call("vector_add", a, b)
        _replayed_once(result, _add_check)


def test_a_matrix_in_column_panels_on_streams_is_the_input_and_the_answer(student):
    # B copied in column panels, each on a stream of its own, C's panels computed and copied back
    # into slices of the answer: the data flow finds the panels as tiles, the replay cuts other
    # inputs the same way
    s = student("""
        @cuda.jit
        def product(A, B, C):
            i, j = cuda.grid(2)
            if i < C.shape[0] and j < C.shape[1]:
                acc = 0.0
                for k in range(A.shape[1]):
                    acc += A[i, k] * B[k, j]
                C[i, j] = acc

        def matmul(A, B):
            C = np.empty((A.shape[0], B.shape[1]), np.float32)
            d_A = cuda.to_device(A)
            for j in range(0, B.shape[1], 32):
                stream = cuda.stream()
                d_B = cuda.to_device(np.ascontiguousarray(B[:, j:j + 32]), stream=stream)
                d_C = cuda.device_array((A.shape[0], d_B.shape[1]), np.float32, stream=stream)
                product[(A.shape[0] // 8 + 1, 5), (8, 8), stream](d_A, d_B, d_C)
                C[:, j:j + 32] = d_C.copy_to_host(stream=stream)
                stream.synchronize()
            return C
    """)
    rng = np.random.default_rng(6)
    A, B = rng.standard_normal((20, 30)).astype(np.float32), rng.standard_normal((30, 70)).astype(np.float32)

    def check(args, got):
        expect_close(got, (args[0].astype(np.float64) @ args[1]).astype(np.float32), rtol=1e-4, atol=1e-4, what="C")

    result = s.call("matmul", A, B)
    _replayed_once(result, check)


def test_a_script_keeps_so_much_and_then_says_it_is_too_large_to_replay():
    from grader.device import replay

    script = replay.Script(1)
    for _ in range(replay.SCRIPT_REQUESTS + 5):
        script.replied(script.record({"op": "stream"}, {}), {"ok": True, "stream": 1})
    assert script.too_large and len(script.requests) == replay.SCRIPT_REQUESTS
    big = replay.Script(2)
    big.record({"op": "upload", "handle": 1, "data": np.zeros(replay.SCRIPT_BYTES // 8 + 1)}, {})
    assert big.too_large and big.record({"op": "sync"}, {}) == -1
    assert "too much to replay" in replay.run(None, big, {}, [])["diverged"]


def test_an_answer_that_cannot_be_cut_again_from_the_replay_fails_closed():
    from grader.judge import replay

    old = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert replay._remade(None, []) is None  # an answer the call did not return stays so
    assert replay._remade(old[:2, :3].copy(), [((old + 1, old), "block", None)]).tolist() == (old + 1)[:2, :3].tolist()
    for ways in ([], [((old + 1, None), "block", None)], [((old + 1, old), "block", None)]):
        assert replay._remade(np.full((2, 3), 7, np.float32), ways) is replay._UNKNOWN
    # follow: a block the device kept no copy of cannot be cut again; the call's answer does not stand
    from types import SimpleNamespace
    from grader.judge.dataflow import Flow
    from grader.judge.student import Replayed
    from grader.wire import DeviceReport
    from grader.wire.messages import Transfer

    a = np.arange(1.0, 7.0, dtype=np.float32)
    up, down = Transfer("u", a.nbytes, id=1, shape=(6,)), Transfer("d", 64, kernel_written=True, shape=(16,))
    result = SimpleNamespace(sent=[a], device=DeviceReport(1, [], [], [up], [down]),
                             replay=lambda *_: Replayed([np.zeros(16, np.float32)], [None]))
    flow = Flow(inputs=[[(up, "whole", None)]], answers=[[(down, "block", None)]])
    with pytest.raises(WrongAnswer, match="cannot tell whether it follows the inputs"):
        replay.follow(result, flow, [0], [a * 2], lambda args, got: None, True)


def test_a_host_array_a_kernel_adds_into_is_replayed_from_what_it_held_before_the_call(student):
    # numba copies a host array handed to a kernel back into it after the launch: the script keeps
    # what it held before, or the replay would start the sum from the call's answer
    s = student("""
        def reduce(x):
            out = np.zeros(1, np.float32)
            total[(x.size + 127) // 128, 128](cuda.to_device(x), out)
            return out[0]
    """)
    _replayed_once(_sum_call(s), _sum_check)


def test_equal_inputs_share_their_uploads_and_are_drawn_alike(student):
    s = student("""
        def vector_add(a, b):
            d_a = cuda.to_device(a)
            d_out = cuda.device_array_like(d_a)
            add[(a.size + 127) // 128, 128](d_a, cuda.to_device(b), d_out)
            return d_out.copy_to_host()
    """)
    a, _ = _inputs()
    _replayed_once(s.call("vector_add", a, a.copy()), _add_check)


def test_other_inputs_move_a_sum_far_beyond_a_float32_sums_tolerance():
    # drawn from all of the inputs' values, a sum of 40000 moved by about 200 against a tolerance
    # of about 4.5: a host's sum passed one replay in forty (seen in CI); drawn from one half of
    # them it moves by about 30000
    from grader.judge.correctness import reduction_rtol
    from grader.judge.replay import _drawn

    for seed in range(50):
        x = (np.random.default_rng(seed).standard_normal(40000) + 1).astype(np.float32)
        drawn = _drawn(x, np.random.default_rng(seed)).astype(np.float64)
        assert drawn.shape == x.shape and np.isin(drawn, x).all(), "the inputs' own values"
        allowed = reduction_rtol(x.size) * np.abs(drawn).sum()
        assert abs(drawn.sum() - x.astype(np.float64).sum()) > 100 * allowed


def test_a_large_draw_is_spread_over_threads_and_the_same_on_every_run():
    from grader.judge.replay import GATHER_CHUNK, _drawn

    x = np.random.default_rng(5).standard_normal(2 * GATHER_CHUNK + 7).astype(np.float32)
    one, two = _drawn(x, np.random.default_rng(9)), _drawn(x, np.random.default_rng(9))
    assert np.array_equal(one, two) and one.shape == x.shape and one.dtype == x.dtype
    assert not np.array_equal(one, x) and np.isin(one, x).all()
    half = np.sort(x)
    low, high = half[:(x.size + 1) // 2], half[x.size // 2:]
    assert (one <= low[-1]).all() or (one >= high[0]).all()  # from one half of the values
