"""Pieces of an array among a call's copies (grader/judge/dataflow.py): an input copied, or an
answer copied back, in chunks of their own allocations. A piece is found by its first values
and confirmed by its digest; the pieces must cover the array. An input padded with zeros is
recognised by the digest of the padded array made on the judge's side."""

import numpy as np
import pytest

from grader.errors import ProtocolError
from grader.judge.dataflow import _converted, _covering, _padded, _pieces, _transposed
from grader.wire import Transfer
from grader.wire.messages import digest


def _copy(piece: np.ndarray, head: np.ndarray | None = None) -> Transfer:
    flat = piece.reshape(-1)
    return Transfer(digest(piece), piece.nbytes, head=(flat[:16] if head is None else head).copy(), shape=piece.shape)


def _chunks(array: np.ndarray, size: int) -> list[Transfer]:
    return [_copy(array[i:i + size]) for i in range(0, len(array), size)]


def test_chunks_of_an_array_whose_values_repeat_everywhere_cover_it():
    ints = np.random.default_rng(0).integers(0, 3, 40009).astype(np.int32)
    copies = _chunks(ints, 1000)  # the last one of 9 elements: found at each place it matches
    assert _covering(_pieces(ints, copies), ints.size) is not None
    assert _covering(_pieces(ints, copies[:20] + copies[21:]), ints.size) is None  # one missing


def test_nans_rows_of_a_matrix_and_forged_first_values():
    rng = np.random.default_rng(1)
    floats = rng.standard_normal(1000).astype(np.float32)
    floats[::7] = np.nan
    assert _covering(_pieces(floats, _chunks(floats, 100)), floats.size) is not None
    matrix = rng.standard_normal((6, 5)).astype(np.float32)
    assert _covering(_pieces(matrix, _chunks(matrix, 2)), matrix.size) is not None  # copies of 2 rows each
    # a copy that claims the first values of a piece but holds other bytes is found nowhere
    other = rng.standard_normal(100).astype(np.float32)
    assert _pieces(floats, [_copy(other, head=floats[:16])]) == []
    # nor is a copy as large as the array (that is the whole-array digest's business)
    assert _pieces(floats, [_copy(floats)]) == []


def test_an_input_padded_with_zeros_is_the_input_and_other_padding_is_not():
    matrix = np.random.default_rng(2).standard_normal((37, 27)).astype(np.float32)
    padded = np.zeros((48, 32), np.float32)
    padded[:37, :27] = matrix
    rows_only = np.zeros((48, 27), np.float32)
    rows_only[:37] = matrix
    ones = np.ones((48, 32), np.float32)
    ones[:37, :27] = matrix
    halves = np.zeros((48, 32), np.float16)
    halves[:37, :27] = matrix
    copies = [Transfer(digest(p), p.nbytes, head=p.reshape(-1)[:16].copy(), id=k, shape=p.shape)
              for k, p in enumerate([padded, rows_only, ones, padded.T.copy(), padded.astype(np.float64), halves],
                                    start=1)]
    # padded with ones, or transposed: not the input; padded in float64 (a power-of-two tree
    # reduction in double precision) is; in float16, which loses bits, is not
    assert _padded(matrix, copies) == {1, 2, 5}
    assert _padded(matrix[:, :1].copy(), copies) == set()


def test_a_downloads_leading_blocks_cross_the_wire_checked():
    doc = {"digest": "ab", "nbytes": 8, "head": np.zeros(2, np.float32), "shape": [2],
           "blocks": [{"shape": [1], "digest": "cd", "carried": 1, "carried_first": 0}]}
    assert Transfer.parse(doc, "d", True).blocks == (((1,), "cd", 1, 0),)
    for bad in ([{"shape": [-1], "digest": "cd"}], [{"shape": [1]}], ["x"], [{"shape": [1], "digest": "c"}] * 33,
                [{"shape": [1], "digest": "cd", "carried": -1}]):
        with pytest.raises(ProtocolError):
            Transfer.parse({**doc, "blocks": bad}, "d", True)


def test_an_input_converted_exactly_or_transposed_is_the_input():
    matrix = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
    halves = matrix.astype(np.float16)
    copies = [Transfer(digest(p), p.nbytes, head=p.reshape(-1)[:16].copy(), id=k, shape=p.shape)
              for k, p in enumerate([matrix.astype(np.float64), halves, matrix.T.copy(), matrix[::-1].copy(),
                                     halves.astype(np.float32)], start=1)]
    assert _converted(matrix, copies) == {1}  # to float16 loses bits: not the input converted exactly
    assert _converted(halves, copies) == {5}  # float16 to float32 is exact
    assert _transposed(matrix, copies) == {3}  # reversed rows are not the input
    doubles = np.ascontiguousarray(matrix.T, dtype=np.float64)
    wide = Transfer(digest(doubles), doubles.nbytes, head=doubles.reshape(-1)[:16].copy(), id=9, shape=(7, 5))
    assert _transposed(matrix, copies + [wide]) == {3, 9}  # transposed and converted exactly


def test_a_sum_of_partial_sums_the_host_copied_back_says_the_last_step_ran_on_the_host():
    from grader.judge.correctness import WrongAnswer
    from grader.judge.dataflow import verify
    from grader.wire import DeviceReport

    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    partials = np.array([x[i:i + 256].sum() for i in range(0, 1000, 256)], np.float32)
    upload = Transfer(digest(x), x.nbytes, head=x[:16].copy(), id=1, shape=x.shape)
    download = Transfer(digest(partials), partials.nbytes, kernel_written=True, head=partials.copy(), sources=(1,),
                        shape=partials.shape, total=float(partials.astype(np.float64).sum()))
    report = DeviceReport(1, [], [], [upload], [download])
    with pytest.raises(WrongAnswer, match="the sum of 4 values a kernel wrote and the host copied back"):
        verify(report, [x], partials.sum())
    with pytest.raises(WrongAnswer, match="was it computed on the host"):
        verify(report, [x], np.float32(x.astype(np.float64).sum() + 1))  # nothing it is the sum of


def test_an_answer_copied_back_from_memory_no_kernel_wrote_says_so_not_that_the_host_computed_it():
    """A bounds guard that leaves every thread out (`i < n - 1` at n = 1): the answer is the fresh
    device array, copied back untouched. Not a host computation: the note asks about the guard."""
    from grader.judge.correctness import WrongAnswer
    from grader.judge.dataflow import verify
    from grader.wire import DeviceReport

    x = np.random.default_rng(4).standard_normal(1).astype(np.float32)
    fresh = np.full(1, np.nan, np.float32)
    upload = Transfer(digest(x), x.nbytes, head=x.copy(), id=1, shape=x.shape)
    download = Transfer(digest(fresh), fresh.nbytes, kernel_written=False, head=fresh.copy(), shape=fresh.shape)
    report = DeviceReport(1, [], [], [upload], [download])
    with pytest.raises(WrongAnswer, match=r"copied back from GPU memory no kernel of this call wrote to \(did every "
                                          r"thread skip its store"):
        verify(report, [x], fresh.copy())


def test_column_panels_of_a_matrix_in_copies_of_their_own_tile_it():
    from grader.judge.dataflow import _tiles, _tiling

    matrix = np.random.default_rng(4).standard_normal((40, 100)).astype(np.float32)
    panels = [np.ascontiguousarray(matrix[:, j:j + 32]) for j in range(0, 100, 32)]  # the last: 4 wide
    copies = [_copy(p) for p in panels]
    assert _tiling(_tiles(matrix, copies), matrix.shape) is not None
    assert _tiling(_tiles(matrix, copies[:-1]), matrix.shape) is None  # one panel missing
    blocks = [_copy(np.ascontiguousarray(matrix[i:i + 16, j:j + 50])) for i in range(0, 40, 16) for j in (0, 50)]
    assert _tiling(_tiles(matrix, blocks), matrix.shape) is not None
    # a copy with a panel's first values and other bytes is no tile
    forged = _copy(np.ascontiguousarray(matrix[:, :32]) + 1, head=matrix[0, :16])
    assert _tiles(matrix, [forged]) == []
