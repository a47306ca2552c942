"""The correctness protocol: the ways a wrong output slips through a tolerance check are closed."""

import numpy as np
import pytest

from grader.judge.correctness import WrongAnswer, expect_close, reduction_rtol

EXPECTED = np.array([1.0, -2.0, 3.5, 4.0], dtype=np.float32)


def test_match_passes():
    expect_close(EXPECTED.copy(), EXPECTED)


@pytest.mark.parametrize("got, message", [
    (np.zeros(4, np.float32), "all zeros"),
    (np.array([1.0, -2.0, np.nan, 4.0], np.float32), "index 2: expected 3.5, got nan"),
    (np.array([1.0, -2.0, 3.5, 4.5], np.float32), "1 of 4 elements wrong; first at index 3"),
    (np.ones(5, np.float32), "shape"),
    (EXPECTED.astype(np.float64), "dtype"),
    ([1.0, -2.0, 3.5, 4.0], "expected a NumPy array"),
])
def test_wrong_outputs_fail_with_a_message_naming_the_first_mismatch(got, message):
    with pytest.raises(WrongAnswer, match=message.replace("(", r"\(")):
        expect_close(got, EXPECTED, atol=0.1)


def test_all_zero_output_fails_even_under_a_huge_absolute_tolerance():
    with pytest.raises(WrongAnswer, match="all zeros"):
        expect_close(np.zeros(4, np.float32), EXPECTED, atol=1e9)


def test_infinity_must_match_infinity():
    with pytest.raises(WrongAnswer):
        expect_close(np.array([np.inf], np.float32), np.array([1.0], np.float32), atol=1e30)


def test_integer_outputs_are_exact_and_2d_indices_are_reported_as_tuples():
    expected = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = expected.copy()
    got[1, 2] += 1
    with pytest.raises(WrongAnswer, match=r"index \(1, 2\)"):
        expect_close(got, expected, rtol=1.0)


def test_reduction_tolerance_grows_with_n():
    assert reduction_rtol(1 << 20) > reduction_rtol(1 << 10) >= 1e-5


def test_matching_infinities_pass_and_nan_never_does():
    expect_close(np.array([np.inf, -np.inf, 1.0], np.float32), np.array([np.inf, -np.inf, 1.0], np.float32))
    with pytest.raises(WrongAnswer, match="got nan"):
        expect_close(np.array([np.nan], np.float32), np.array([np.nan], np.float32))


def test_a_wrong_output_says_what_its_wrong_elements_have_in_common():
    from grader.judge.correctness import WrongAnswer, expect_close

    expected = np.ones((64, 48), np.float32)
    missed = expected.copy()
    missed[32:, :] = np.nan  # the last row of tiles never written
    with pytest.raises(WrongAnswer) as found:
        expect_close(missed, expected, what="matmul")
    message = str(found.value)
    assert "never written" in message and "rows 32..63, columns 0..47" in message and "last rows" in message
    scattered = expected.copy()
    scattered[3, 5] = scattered[40, 7] = 2.0
    with pytest.raises(WrongAnswer) as found:
        expect_close(scattered, expected, what="matmul")
    assert "never written" not in str(found.value) and "rows" not in str(found.value)
    vector = np.ones(1000, np.float32)
    short = vector.copy()
    short[768:] = np.nan  # the last partial block never launched
    with pytest.raises(WrongAnswer) as found:
        expect_close(short, vector, what="vector_add")
    assert "exactly indices 768..999 (the end of the array" in str(found.value)
    short[768:] = 1.0
    short[999] = 0.0
    with pytest.raises(WrongAnswer) as found:
        expect_close(short, vector, what="vector_add")
    assert "the only wrong element is index 999 (the end of the array" in str(found.value)
    short[::2] = 0.0
    with pytest.raises(WrongAnswer) as found:
        expect_close(short, vector, what="vector_add")
    assert "indices" not in str(found.value) and "index 0:" in str(found.value)


def test_a_wrong_matrix_carries_a_coarsened_mask_of_its_wrong_elements():
    """For the feedback's picture: at most 64 cells a side, a cell wrong when any element in it is."""
    expected = np.ones((200, 48), np.float32)
    got = expected.copy()
    got[:, 40:] = 0.0  # the last columns
    with pytest.raises(WrongAnswer) as found:
        expect_close(got, expected, what="matmul")
    wrong = found.value.wrong
    assert wrong["shape"] == [200, 48] and wrong["cell"] == [4, 1] and len(wrong["rows"]) == 50
    assert all(row == "." * 40 + "#" * 8 for row in wrong["rows"])
    with pytest.raises(WrongAnswer) as found:
        expect_close(np.zeros(5, np.float32) + 2, np.ones(5, np.float32))
    assert found.value.wrong is None  # a vector has no picture


def launch(blocks, threads):
    return {"kernel": "add_kernel", "grid": [blocks, 1, 1], "block": [threads, 1, 1]}


def test_a_wrong_end_is_told_from_the_launch_not_guessed_from_a_power_of_two():
    """The audit's V2: `blocks = n // 256` on n = 1025 launches 4 blocks of 256 threads, and only
    element 1024 is wrong. The comparison alone cannot know the block size, so it claims no "one
    block of 1024 threads"; the call's launch (require_kernel_launch) says what the grid covered."""
    from grader.judge.proof import require_kernel_launch
    from grader.judge.student import CallResult

    expected = np.arange(1025, dtype=np.float32)
    got = expected.copy()
    got[1024:] = np.nan
    with pytest.raises(WrongAnswer) as info:
        expect_close(got, expected)
    assert "one block" not in str(info.value) and "a missed block, or a grid" in str(info.value)

    def check(args, out):
        expect_close(out, expected, what="vector_add")
    with pytest.raises(WrongAnswer, match=r"the launch's 4 blocks of 256 threads cover 1024 elements, and exactly "
                                          r"those are right: round the block count up, \(n \+ 256 - 1\) // 256"):
        require_kernel_launch(CallResult(got, [], [launch(4, 256)]), "sim", check=check)
    got[256:] = np.nan  # each block computed the first block's elements
    with pytest.raises(WrongAnswer, match=r"only the first 256 are right, as many as one block of 256 threads "
                                          r"computes.*cuda.grid\(1\)"):
        require_kernel_launch(CallResult(got, [], [launch(4, 256)]), "sim", check=check)
    got = expected.copy()
    got[300:] = np.nan
    with pytest.raises(WrongAnswer) as info:  # neither: the generic note stays
        require_kernel_launch(CallResult(got, [], [launch(5, 256)]), "sim", check=check)
    assert "a missed block, or a grid" in str(info.value) and "one block" not in str(info.value)


def launch_2d(grid, block):
    return {"kernel": "matmul_tiled_kernel", "grid": [*grid, 1], "block": [*block, 1]}


def test_a_matrix_wrong_past_its_first_rows_and_columns_is_told_from_the_2d_launch():
    """The commonest 2-D mistakes: a grid rounded down, or its x and y swapped (x counts columns). The
    right elements are a top-left corner; the call's one launch says whether its threads reach exactly
    that far, and which mistake it is. A matrix wrong everywhere gets no note on where."""
    from grader.judge.proof import require_kernel_launch
    from grader.judge.student import CallResult

    expected = np.ones((33, 65), np.float32)

    def verdict(got, launches):
        with pytest.raises(WrongAnswer) as info:
            require_kernel_launch(CallResult(got, [], launches), "sim",
                                  check=lambda args, out: expect_close(out, expected, what="matmul"))
        return str(info.value)

    swapped = expected.copy()
    swapped[:, 48:] = np.nan  # grid (ceil(M / 16), ceil(N / 16)) = (3, 5): 48 columns, 80 rows
    told = verdict(swapped, [launch_2d((3, 5), (16, 16))])
    assert "the wrong elements are exactly rows 0..32, columns 48..64 (the last columns: the launch's 3 x 5 blocks " \
           "of 16 x 16 threads reach 80 rows and 48 columns of the 33 x 65 output" in told, told
    assert "are the grid's x and y swapped?" in told and "grid = ((N + 16 - 1) // 16, (M + 16 - 1) // 16)" in told
    floor = expected.copy()
    floor[32:, :] = floor[:, 64:] = np.nan  # grid (N // 16, M // 16) = (4, 2): an L of wrong elements
    told = verdict(floor, [launch_2d((4, 2), (16, 16))])
    assert "the right elements are exactly rows 0..31, columns 0..63; the last rows and columns are wrong: the " \
           "launch's 4 x 2 blocks of 16 x 16 threads reach 32 rows and 64 columns" in told, told
    assert "round the block counts up" in told and "swapped" not in told
    # threads that reach further than the launch's block (a coarsened kernel's 4 rows each): the
    # generic note stays, no claim about the grid
    told = verdict(floor, [launch_2d((2, 1), (32, 8))])
    assert told.endswith("the last rows and columns are wrong: a missed tile or edge?)"), told
    with pytest.raises(WrongAnswer) as info:
        expect_close(np.zeros_like(expected) + 2, expected, what="matmul")
    assert "2145 of 2145 elements wrong" in str(info.value) and "rows" not in str(info.value)
    assert info.value.right_corner is None


def test_a_large_output_is_compared_in_chunks_with_the_same_verdict():
    # (a GPU timing checks 2^24 elements a call: compared in chunks on a few threads, never
    # differently from the whole-array comparison)
    from grader.judge import correctness

    rng = np.random.default_rng(3)
    expected = rng.standard_normal(2 * correctness.CHUNK + 3).astype(np.float32)
    expected[5] = np.inf
    got = expected.copy()
    expect_close(got, expected, rtol=1e-6)  # equal, an infinity where the reference has one: passes
    got[correctness.CHUNK + 1] += 1.0       # the second chunk
    got[-1] = np.nan                        # the last, short one
    whole = correctness._beyond(got, expected, 1e-6, 0.0)
    assert int(np.count_nonzero(whole)) == 2
    with pytest.raises(WrongAnswer, match=rf"^output: 2 of {expected.size} elements wrong; first at index "
                                          rf"{correctness.CHUNK + 1}: "):
        expect_close(got, expected, rtol=1e-6)


def test_a_tolerance_per_element_holds_past_the_chunked_comparison():
    """A matrix product's tolerance is a matrix (it grows with the terms); an answer past CHUNK
    elements is compared in pieces, and each piece takes its piece of the tolerance (a 1024 x 1024
    product, the size timed on a GPU, once raised NumPy's broadcast error instead of grading)."""
    from grader.judge.correctness import CHUNK

    side = 1024
    assert side * side > CHUNK
    expected = np.ones((side, side), np.float32)
    atol = np.full((side, side), 1e-6)
    atol[-1, -1] = 1.0  # only the last element may be that far off
    got = expected.copy()
    got[-1, -1] += 0.5
    expect_close(got, expected, atol=atol)
    got[0, 0] += 0.5
    with pytest.raises(WrongAnswer, match=r"1 of 1048576 elements wrong; first at index \(0, 0\)"):
        expect_close(got, expected, atol=atol)


def test_a_wrong_end_of_a_vector_is_told_from_the_calls_one_launch():
    """Right elements as many as the launch's threads: the grid was rounded down. The launch reaches
    every element and the end is still wrong: the bounds guard stops short (`i < n - 1`)."""
    from grader.judge.correctness import short_grid

    def wrong_end(n, right):
        got = np.ones(n, np.float32)
        got[right:] = np.nan
        with pytest.raises(WrongAnswer) as found:
            expect_close(got, np.ones(n, np.float32), what="out")
        return found.value

    def launch(blocks, threads):
        return [{"grid": [blocks, 1, 1], "block": [threads, 1, 1]}]

    rounded = short_grid(wrong_end(1000, 768), launch(3, 256))
    assert "the launch's 3 blocks of 256 threads cover 768 elements" in str(rounded), str(rounded)
    guard = short_grid(wrong_end(1000, 999), launch(4, 256))
    assert "the launch's 4 blocks of 256 threads reach all 1000 elements, yet the last one is wrong: does a bounds " \
           "guard or a loop's bound stop short of n?" in str(guard), str(guard)
    assert "yet the last 2 are wrong" in str(short_grid(wrong_end(1000, 998), launch(4, 256)))
    assert guard.size == 1000 and guard.right_prefix == 999


def test_a_changed_input_is_named_with_its_first_changed_index():
    """Audit F15: 'changed its inputs' named neither the input nor where it changed."""
    from grader.judge.correctness import expect_inputs_unchanged

    a, b = np.array([0.5, np.nan, 2.0], np.float32), np.array([1.0, 1.0, 1.0], np.float32)
    expect_inputs_unchanged("f(a, b)", {"a": a, "b": b}, [a.copy(), b.copy()])  # NaN stays NaN: unchanged
    after = a.copy()
    after[2] = 3.0
    with pytest.raises(WrongAnswer, match=r"f\(a, b\) changed its input a: 1 of 3 elements, first a\[2\]: "
                                          r"was 2, now 3 \(.*must only be read"):
        expect_inputs_unchanged("f(a, b)", {"a": a, "b": b}, [after, b.copy()])
    with pytest.raises(WrongAnswer, match=r"changed its inputs a: .* and b: 3 of 3 elements, first b\[0\]"):
        expect_inputs_unchanged("f(a, b)", {"a": a, "b": b}, [after, b + 1])
