"""Data flow: an answer counts only when the simulated GPU says its kernels computed it.

The device process reports every copy of a call (grader.wire.DeviceReport): a digest of each
upload, and of each download with whether a kernel of this call last wrote the memory it came
from. The judge holds the call's inputs and the student's answer, and checks:
- every input array was copied to the device, whole, during the call (in any shape; converted
  exactly to another dtype; a matrix transposed; padded with zeros at the end of its axes; in
  pieces into one allocation: the device logs it as one upload once every element is there; or in
  pieces into several: each piece, a run of its elements or a tile of a matrix, found in the input
  by its first values and confirmed by its digest);
- the answer (an array, or a scalar read from device memory) is bytes some download of the call
  returned (or the leading block of one: a padded output sliced on the host; or one converted to
  the answer's dtype on the host; or downloads of pieces of it, found the same way as an input's:
  chunks on streams), from memory a kernel of this call wrote, computed (through the arrays the
  kernels loaded from, launch after launch) from every input, and is not an input as it was
  passed in (unless a kernel computed those very bytes: the sum of one element is that element);
- the answer is not bytes of data the host made and copied to the device in this call (an answer
  computed on the host, then copied through the GPU by a copy kernel or returned as uploaded);
- no data the host made went into it: every upload the answer was computed from (the kernels'
  constant arrays count as uploads) is an array of the call's or carries no answer (a single start
  value everywhere: zeros, ones, infinities; random number states); so a kernel that reads the
  inputs *and* a host-computed answer gains nothing;
- none of its elements are still bytes the host wrote there, no kernel having stored to them
  since (a host answer whose every element but a few a kernel overwrote; a kernel that leaves the
  tail of the array to a host loop). The device knows which elements kernels stored to, so a
  kernel that stores the very value the host had put there has computed it.
Each failure is a WrongAnswer that says which rule, in the student's terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .correctness import WrongAnswer
from ..wire import DeviceReport, Transfer
from ..wire.messages import digest


MAX_PIECES = 4096  # copies of one call tried as pieces of one array
STRUCTURAL = 1 << 16  # an integer a kernel is given up to this (or the largest array or answer) is a size or an index
_TRIED_STARTS = 64  # places a piece's first values are tried at
_RUN = 16  # first values of a piece looked for together (as many as a copy reports)


@dataclass
class Flow:
    """How the data went, where `verify` passed (what a replay needs, grader.judge.replay): per
    input, its uploads, each as (copy, how, detail): "whole" (its bytes in any shape),
    "converted", "transposed" or "padded" (detail: the upload's dtype), "piece" (detail: (start,
    stop) of the input's elements, C order), "tile" (detail: (row, column) of a matrix's tile);
    per answer, the downloads it is, each as (copy, how, detail): "whole", "block" (a leading
    block, in the answer's dtype, of the download or of its transpose), "piece" or "tile" (as
    the inputs') or "scalar" (detail: its index in the download)."""

    inputs: list[list[tuple[Transfer, str, Any]]] = field(default_factory=list)
    answers: list[list[tuple[Transfer, str, Any]]] = field(default_factory=list)


def verify(report: DeviceReport, inputs: list[np.ndarray], output: Any, labels: list[str] | None = None,
           sent: list[np.ndarray] | None = None, numbers: list | None = None, call: str = "the call") -> Flow:
    """`labels`: how the messages name each input (grader.judge.signatures: "`y`"; default:
    "input array k"); `sent`: every array of the call (default: the inputs): copies of them,
    whole or in pieces, are not data the host made; `numbers`: the call's scalar arguments
    (SAXPY's alpha): passed on to a kernel, they are not data the host made either; `call`: how
    the messages name the call ("saxpy_inplace(alpha, x, y)"). The flow it found, where it passes."""
    labels = labels or [f"input array {i + 1}" for i in range(len(inputs))]
    others = [a for a in sent or () if not any(a is b for b in inputs)]
    # uploads that are the call's own arrays, or pieces of them, or numbers kernels were given
    # that carry no answer: the call's own, or structural integers
    # (the answer's size too: a grid of one thread per element of a matrix product outgrows its inputs),
    # or arrays of one of the call's own numbers everywhere
    answers = output if isinstance(output, (list, tuple)) else [output]
    largest = max([STRUCTURAL] + [int(np.size(a)) for a in list(inputs) + list(sent or ()) + list(answers)
                                  if isinstance(a, np.ndarray)])
    given: set[int] = {t.id for t in report.uploads if t.shape == () and t.head is not None and t.head.size == 1
                       and _not_an_answer(t.head[0], numbers or (), largest)}
    given |= {t.id for t in report.uploads if t.shape and _filled_with_own(t, numbers or ())}
    copies: list[set[int]] = []  # per input: the uploads of it (whole, or pieces covering it)
    keys: list[str] = []  # per input: its digest
    flow = Flow()
    by_id = {t.id: t for t in report.uploads}
    for i, array in enumerate(list(inputs) + others):
        key = digest(array)
        whole, how = _copies(array, key, report.uploads)
        pieces = [] if whole else _pieces(array, [t for t in report.uploads if not t.neutral])
        covered = _covering(pieces, array.size)
        tiles = [] if whole or covered else _tiles(array, [t for t in report.uploads if not t.neutral])
        given |= whole | {t.id for *_, t in pieces + tiles}
        if i >= len(inputs):
            continue
        keys.append(key)
        flow.inputs.append([(by_id[u], how, by_id[u].head.dtype if by_id[u].head is not None else None)
                            for u in sorted(whole)] + [(t, "piece", (start, stop)) for start, stop, t in pieces]
                           + [(t, "tile", (row, col)) for row, col, t in tiles])
        ids = whole or {t.id for *_, t in covered or _tiling(tiles, array.shape) or ()}
        if not ids:
            raise WrongAnswer(f"{labels[i]} ({array.dtype}{list(array.shape)}) was never copied to the GPU "
                              f"during {call}: the kernels must read the inputs (copy each whole array with "
                              f"cuda.to_device, or pass it to the kernel)")
        copies.append(ids)
    host_made = {t.id: t for t in report.uploads if not t.neutral and t.id not in given}
    # an answer whose bytes equal an input's, or any upload but those the host made, may be the
    # kernels' work all the same (the sum of an array of one element is that element)
    made = {t.digest for t in host_made.values()}
    computed = {t.digest for t in report.downloads if t.kernel_written}
    for value in answers:
        key = digest(value) if isinstance(value, np.ndarray) else None
        if key not in computed:
            _unchanged(key, inputs, keys, labels)
        flow.answers.append(_answer(report, value, key, made, copies, inputs, labels, host_made))
    return flow


def _copies(array: np.ndarray, key: str, uploads: list[Transfer]) -> tuple[set[int], str]:
    """The uploads that are `array` whole (in any shape; converted exactly to another dtype; a
    matrix transposed; padded with zeros), and which of these."""
    conversions: dict = {}  # dtype -> `array` converted exactly to it (or None), for the three below
    for how, found in (("whole", lambda: {t.id for t in uploads if t.digest == key}),
                       ("converted", lambda: _converted(array, uploads, conversions)),
                       ("transposed", lambda: _transposed(array, uploads, conversions)),
                       ("padded", lambda: _padded(array, uploads, conversions))):
        ids = found()
        if ids:
            return ids, how
    return set(), ""


def _unchanged(key: str | None, inputs: list[np.ndarray], keys: list[str], labels: list[str]) -> None:
    """An answer (of digest `key`) that is one of the inputs as it was passed in, and no kernel
    computed those bytes: nothing a kernel computed reached it (an array to update in place that
    the result was never copied back into)."""
    for array, input_key, label in zip(inputs, keys, labels):
        if key is not None and array.size and input_key == key:
            raise WrongAnswer(f"the answer is {label} ({array.dtype}{list(array.shape)}) as it was passed in: nothing "
                              f"a kernel computed reached it (an array the function must update in place? copy the "
                              f"device's result into the caller's array: `d_out.copy_to_host(out)`)")


def _answer(report: DeviceReport, value: Any, key: str | None, made: set[str], copies: list[set[int]],
            inputs: list[np.ndarray], labels: list[str], host_made: dict[int, Transfer]
            ) -> list[tuple[Transfer, str, Any]]:
    """`key`: the digest of `value` when it is an array; `made`: the digests of the uploads of
    data the host made. The downloads the answer is (`Flow.answers`)."""
    if value is None:
        return []
    written = [t for t in report.downloads if t.kernel_written]
    # each way the answer came back: its copies, each with how many of the answer's elements it
    # brought back still the host's bytes and the first of them (a padded output: the answer is
    # its leading block), and how the answer is made of them (`Flow.answers`)
    found: list[list[tuple[Transfer, int, int]]]
    how: list[list[tuple[Transfer, str, Any]]]
    if isinstance(value, np.ndarray):
        found, how = [], []
        for t in written:
            held = (t.carried, t.carried_first) if t.digest == key else _block_carried(t, value.shape, key)
            if held is not None:
                found.append([(t, *held)])
                how.append([(t, "whole" if t.digest == key else "block", None)])
        if not found:  # copied back in pieces (chunks on streams) into one host array?
            pieces = _covering(_pieces(value, written), value.size)
            found = [[(t, t.carried, -1) for *_, t in pieces]] if pieces else []
            how = [[(t, "piece", (start, stop)) for start, stop, t in pieces]] if pieces else []
        if not found:  # or in tiles of a matrix (column panels)?
            tiles = _tiling(_tiles(value, written), value.shape)
            found = [[(t, t.carried, -1) for *_, t in tiles]] if tiles else []
            how = [[(t, "tile", (row, col)) for row, col, t in tiles]] if tiles else []
        if key in made or any(t.digest in made for copied in found if len(copied) > 1 for t, *_ in copied):
            raise WrongAnswer("the answer is what the host copied to the GPU: it was computed on the host, not "
                              "by a kernel")
    elif isinstance(value, (bool, int, float, complex, np.generic)):
        places = [(t, _held_at(t.head, value)) for t in written]
        found = [[(t, t.carried, -1)] for t, at in places if at >= 0]
        how = [[(t, "scalar", at)] for t, at in places if at >= 0]
    else:
        return []
    if not found:
        _summed_on_the_host(value, written)
        if key is not None and any(t.digest == key and not t.kernel_written for t in report.downloads):
            raise WrongAnswer("the answer was copied back from GPU memory no kernel of this call wrote to (did "
                              "every thread skip its store: a bounds guard or a grid that leaves them all out?)")
        raise WrongAnswer("the answer was not copied back from GPU memory written by a kernel of this call "
                          "(was it computed on the host?)")
    reasons = [_host_made(copied, host_made, np.shape(value)) for copied in found]
    if all(reasons):
        raise WrongAnswer(reasons[0])
    how = [way for way, reason in zip(how, reasons) if not reason]
    found = [copied for copied, reason in zip(found, reasons) if not reason]
    for i, ids in enumerate(copies):
        if not any(ids & {u for t, *_ in copied for u in t.sources} for copied in found):
            raise WrongAnswer(f"the answer was not computed from {labels[i]} "
                              f"({inputs[i].dtype}{list(inputs[i].shape)}): the kernels that wrote it never read it")
    # the way that was computed from every input (the last such copy: the answer as it came back)
    complete = [way for way, copied in zip(how, found)
                if all(ids & {u for t, *_ in copied for u in t.sources} for ids in copies)]
    return (complete or how)[-1]


def _summed_on_the_host(value: Any, written: list[Transfer]) -> None:
    """A number that is the sum of an array kernels wrote and the host copied back (partial sums
    per block, added up with NumPy): the last step of the reduction ran on the host."""
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        return
    value = float(value)
    for t in written:
        if t.total is not None and abs(value - t.total) <= 1e-5 * max(abs(t.total), abs(value)) + 1e-6:
            size = int(np.prod(t.shape, dtype=np.int64)) if t.shape is not None else 0
            raise WrongAnswer(f"the answer is the sum of {size} values a kernel wrote and the host copied back: the "
                              f"last step of the reduction ran on the host (launch a kernel on those partial sums "
                              f"too, until one value is left, and copy that value back from GPU memory)")


def _block_carried(t: Transfer, shape: tuple[int, ...], key: str | None) -> tuple[int, int] | None:
    """(how many elements of the answer (of `shape`, digest `key`) are still the host's bytes,
    the first of them), if the answer is a block of the download `t` made on the host; None if
    it is not."""
    return next(((carried, first) for block, digest_, carried, first in t.blocks
                 if block == shape and digest_ == key), None)


def _host_made(copied: list[tuple[Transfer, int, int]], host_made: dict[int, Transfer],
               shape: tuple[int, ...]) -> str | None:
    """Why the answer (of `shape`), as these downloads brought it back (each with how many of
    the answer's elements it holds still as the host wrote them, and the first), is data the
    host made, or None."""
    for upload in (u for t, *_ in copied for u in t.sources):
        if upload in host_made:
            return (f"the answer was computed from data the host made, not only from the inputs: "
                    f"{host_made[upload].what or 'an array copied to the GPU'}; the kernels must compute it "
                    f"from the inputs alone")
    carriers = [(count, first, [host_made[u] for u in t.carried_from if u in host_made]) for t, count, first in copied]
    carried = sum(count for count, _, made in carriers if made)
    if not carried:
        return None
    what = next(made[0].what for count, _, made in carriers if made and count) or "an array copied to the GPU"
    first = next((first for count, first, made in carriers if made and count), -1)
    size = int(np.prod(shape, dtype=np.int64))
    at = ""
    if len(copied) == 1 and 0 <= first < size and shape:
        index = tuple(int(i) for i in np.unravel_index(first, shape))
        at = f", the first at index {index if len(index) > 1 else index[0]}"
    return (f"the answer is bytes the host wrote to the GPU ({what}) that no kernel rewrote: it was computed on "
            f"the host\n{carried} of its {size} elements are those bytes{at}: no kernel stored to them")


def _converted(array: np.ndarray, uploads: list[Transfer], conversions: dict | None = None) -> set[int]:
    """The uploads that are `array` converted exactly to another dtype (float32 to float64 for a
    more accurate sum): confirmed by the digest of the conversion made here. `conversions`: the
    exact conversions of `array` made so far (`exactly`), shared with the checks beside this."""
    found, keys = set(), {}  # dtype -> the digest of the exact conversion to it (None: not exact)
    for t in uploads:
        dtype = t.head.dtype if t.head is not None else None
        if dtype is None or dtype == array.dtype or t.nbytes != array.size * dtype.itemsize:
            continue
        if dtype not in keys:
            converted = exactly(array, dtype, conversions)
            keys[dtype] = digest(converted) if converted is not None else None
        if keys[dtype] == t.digest:
            found.add(t.id)
    return found


def exactly(array: np.ndarray, dtype: np.dtype, conversions: dict | None = None) -> np.ndarray | None:
    """`array` converted to `dtype` (numbers to numbers), if the conversion loses nothing; made
    once per dtype where `conversions` keeps them."""
    if array.dtype == dtype:
        return array
    if conversions is not None and dtype in conversions:
        return conversions[dtype]
    converted = None
    if dtype.kind in "biufc" and array.dtype.kind in "biufc":
        with np.errstate(all="ignore"):
            converted = array.astype(dtype)
            if not np.array_equal(converted.astype(array.dtype), array, equal_nan=array.dtype.kind in "fc"):
                converted = None
    if conversions is not None:
        conversions[dtype] = converted
    return converted


def _transposed(array: np.ndarray, uploads: list[Transfer], conversions: dict | None = None) -> set[int]:
    """The uploads that are a matrix transposed on the host (`np.ascontiguousarray(B.T)`, so that
    a warp reads consecutive elements): the same elements, in another order (converted exactly
    to another dtype, too)."""
    if array.ndim != 2 or array.shape[0] == 1 or array.shape[1] == 1:
        return set()
    keys: dict = {}  # dtype -> the digest of the transposed copy in it (digest() takes C-order bytes)
    found = set()
    for t in uploads:
        if t.head is None or t.nbytes != array.size * t.head.dtype.itemsize:
            continue
        if t.head.dtype not in keys:
            converted = exactly(array, t.head.dtype, conversions)
            keys[t.head.dtype] = digest(converted.T) if converted is not None else None
        if keys[t.head.dtype] == t.digest:
            found.add(t.id)
    return found


def _padded(array: np.ndarray, uploads: list[Transfer], conversions: dict | None = None) -> set[int]:
    """The uploads that are `array` padded with zeros at the end of its axes (a matrix padded to
    whole tiles so that the kernel needs no bounds checks; converted exactly to another dtype,
    too: a vector padded to a power of two in float64): confirmed by the digest of the padded
    array made here. Zeros add nothing a kernel could compute an answer from."""
    if array.ndim == 0 or array.size == 0:
        return set()
    conversions = {} if conversions is None else conversions  # (one conversion per dtype, not per upload)
    found = set()
    for t in uploads:
        if t.shape is None or len(t.shape) != array.ndim or t.shape == array.shape or t.head is None \
                or not t.head.size or not all(d <= e for d, e in zip(array.shape, t.shape)):
            continue
        converted = exactly(array, t.head.dtype, conversions)
        if converted is None or np.ascontiguousarray(converted).reshape(-1)[:1].tobytes() != t.head[:1].tobytes():
            continue
        padded = np.zeros(t.shape, t.head.dtype)
        padded[tuple(slice(0, d) for d in array.shape)] = converted
        if digest(padded) == t.digest:
            found.add(t.id)
    return found


def _pieces(array: np.ndarray, transfers: list[Transfer]) -> list[tuple[int, int, Transfer]]:
    """The copies smaller than `array` whose bytes are a run of its elements (C order): found
    by their first values, confirmed by their digests; (start, stop, copy) each."""
    flat = np.ascontiguousarray(array).reshape(-1)
    width = flat.dtype.itemsize
    candidates = [t for t in transfers if t.head is not None and t.head.size and t.shape is not None
                  and t.head.dtype == flat.dtype and 0 < t.nbytes < flat.nbytes][:MAX_PIECES]
    if not candidates or width not in (1, 2, 4, 8):
        return []
    places = _Places(flat)
    keys = places.keys
    found = []
    for t in candidates:
        head, n = np.ascontiguousarray(t.head).view(keys.dtype), t.nbytes // width
        if int(np.prod(t.shape, dtype=np.int64)) != n:
            continue
        for start in places.of(head[:min(_RUN, head.size, n)]):  # every place it is (a short piece: several)
            stop = start + n
            if stop <= flat.size and np.array_equal(keys[start:start + head.size], head) \
                    and digest(flat[start:stop].reshape(t.shape)) == t.digest:
                found.append((start, stop, t))
    return found


def _tiles(matrix: np.ndarray, transfers: list[Transfer]) -> list[tuple[int, int, Transfer]]:
    """The copies that are a tile of `matrix` narrower than its rows (a column panel, a block:
    `np.ascontiguousarray(B[:, j:j + 64])` on a stream of its own), found by their first row's
    first values, confirmed by their digests; (row, column, copy) each. Runs of whole rows are
    `_pieces`'."""
    if matrix.ndim != 2 or 1 in matrix.shape:
        return []
    rows, cols = matrix.shape
    candidates = [t for t in transfers if t.head is not None and t.head.size and t.shape is not None
                  and len(t.shape) == 2 and t.head.dtype == matrix.dtype and t.shape[0] <= rows
                  and t.shape[1] < cols and t.nbytes == t.shape[0] * t.shape[1] * matrix.itemsize][:MAX_PIECES]
    if not candidates or matrix.dtype.itemsize not in (1, 2, 4, 8):
        return []
    places = _Places(np.ascontiguousarray(matrix).reshape(-1))
    keys = places.keys
    found = []
    for t in candidates:
        height, wide = t.shape
        # the first row's first values (a tile's rows are not contiguous here)
        head = np.ascontiguousarray(t.head[:min(_RUN, wide)]).view(keys.dtype)
        run = head.size
        for place in places.of(head):
            row, col = divmod(place, cols)
            if row + height <= rows and col + wide <= cols and np.array_equal(keys[place:place + run], head) \
                    and digest(matrix[row:row + height, col:col + wide]) == t.digest:
                found.append((row, col, t))
    return found


def _tiling(tiles: list[tuple[int, int, Transfer]], shape: tuple[int, ...]) -> list[tuple[int, int, Transfer]] | None:
    """The tiles, when together they hold every element of a matrix of `shape`."""
    if not tiles:
        return None
    held = np.zeros(shape, bool)
    for row, col, t in tiles:
        held[row:row + t.shape[0], col:col + t.shape[1]] = True
    return tiles if held.all() else None


class _Places:
    """Where runs of values occur in a flat array: each place keyed by a hash of the values from
    it (as many as a copy's first values), so that a value repeated all over the array (zeros of
    an int array) still tells places apart; one sorted index per run length, made once."""

    def __init__(self, flat: np.ndarray):
        self.keys = flat.view(np.dtype(f"u{flat.dtype.itemsize}"))  # bytes compared, NaNs included
        self._indexes: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def of(self, head: np.ndarray) -> list[int]:
        """The places (at most _TRIED_STARTS) whose values may begin with `head` (keys' dtype):
        a hash match, for the caller to confirm."""
        run = head.size
        if run not in self._indexes:
            hashes = _run_hashes(self.keys, run)
            order = np.argsort(hashes, kind="stable")
            self._indexes[run] = order, hashes[order]
        order, ordered = self._indexes[run]
        key = _run_hashes(head, run)[0]
        lo, hi = np.searchsorted(ordered, key, "left"), np.searchsorted(ordered, key, "right")
        return order[lo:hi][:_TRIED_STARTS].tolist()


def _run_hashes(keys: np.ndarray, run: int) -> np.ndarray:
    """For each place of `keys` with `run` values from it, a hash of those values (uint64,
    wrapping: a match is confirmed by digest)."""
    n = keys.size - run + 1
    hashes = np.zeros(max(n, 0), np.uint64)
    with np.errstate(over="ignore"):
        for j in range(run):
            hashes = hashes * np.uint64(1_000_003) + keys[j:j + n].astype(np.uint64)
    return hashes


def _covering(pieces: list[tuple[int, int, Transfer]], size: int) -> list[tuple[int, int, Transfer]] | None:
    """The pieces, when together they hold every element of an array of `size`."""
    reach = 0
    for start, stop, _ in sorted(pieces, key=lambda piece: piece[:2]):
        if start > reach:
            return None
        reach = max(reach, stop)
    return pieces if pieces and reach >= size else None


def _not_an_answer(number: np.generic, numbers, largest: int) -> bool:
    """Whether a number a kernel was given (an argument, a constant) carries no answer: one of
    the call's own numbers, or an integer that is a size, an offset, a stride or an index (no
    larger than the call's largest array, or STRUCTURAL), or a bit mask (2^k - 1: FULL_MASK)."""
    if _own(number, numbers):
        return True
    if number.dtype.kind not in "iu":
        return False
    value = abs(int(number))
    return value <= largest or (value & (value + 1)) == 0


def _own(number: np.generic, numbers) -> bool:
    """Whether `number` is one of the call's own numbers (as given, or rounded to float32 as the
    reference passes SAXPY's alpha)."""
    try:
        return any(number == x or np.float32(number) == np.float32(x) for x in numbers)
    except (TypeError, ValueError, OverflowError):
        return False


def _filled_with_own(t: Transfer, numbers) -> bool:
    """Whether the upload `t` is an array holding one of the call's own numbers everywhere (SAXPY's
    alpha copied to the GPU, `cuda.to_device(np.full(1, alpha))`): confirmed by the digest of
    such an array made here."""
    if not numbers or t.head is None or not t.head.size or t.head.dtype.kind not in "biufc":
        return False
    first = t.head[0]
    if not (t.head == first).all() or not _own(first, numbers) or t.nbytes != np.prod(t.shape) * t.head.itemsize:
        return False
    return digest(np.full(t.shape, first, t.head.dtype)) == t.digest


def _held_at(head: np.ndarray | None, value: Any) -> int:
    """Where `value` is among the first values of a download, as the device stored it or
    converted to the value's own type (a sum computed in float64, returned as float32); -1: not."""
    if head is None or head.size == 0:
        return -1
    value = np.asarray(value)
    try:
        with np.errstate(all="ignore"):
            pairs = [(head, value.astype(head.dtype)), (head.astype(value.dtype), value)]
    except (TypeError, ValueError, OverflowError):
        return -1
    for stored, wanted in pairs:
        same = stored == wanted
        if stored.dtype.kind in "fc":
            same |= np.isnan(stored) & np.isnan(wanted)
        if np.any(same):
            return int(np.argmax(same))
    return -1
