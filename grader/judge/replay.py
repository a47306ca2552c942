"""The answer must follow the inputs: a call's device work replayed on other inputs.

The data flow (grader.judge.dataflow) proves that the answer came back from memory kernels wrote
after reading every input, and that no bytes the host made reached it. It judges the numbers a
kernel is given by their value, and a number no larger than the call's arrays passes as a size:
so a sum the host computed, split into 16-bit integers (or launched as the grid's y and z
dimensions) and put together by a kernel that also reads the inputs, would pass. The replay
asks what the answer depends on. The device runs the call's requests again (grader.device.replay)
with the uploads of the inputs holding other values of the same shapes, in the same forms
(converted, transposed, padded, in pieces: as the data flow found them), and every number, grid,
kernel and other upload as the call had them; the answer is cut from the replayed downloads as
it was from the call's, and the test's own check judges it against the other inputs. An answer
the host computed stays the old one and fails.

The other values are the inputs' own, drawn again with repetition from the lower or the upper
half of them (same dtype, range and kinds of values: infinities and NaNs where the test put them;
an answer moves far beyond any check's tolerance), from a generator seeded by the inputs'
digests, so a verdict is the same on every run with the same inputs; an input with one distinct
value cannot be drawn otherwise and is left as it is.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np

from .correctness import WrongAnswer
from .dataflow import Flow, exactly
from ..wire import DeviceReport
from ..wire.messages import digest
from ..wire.parallel import spread

_DRAWS = 4  # tries at a draw whose values are not the input's own, reordered
GATHER_CHUNK = 1 << 20  # values a thread draws at a time, past which a draw is spread over threads


def follow(result, flow: Flow, chosen: list[int], answers: list[Any], check: Callable[[list, Any], None],
           single: bool, draw: Callable[[list, np.random.Generator], list] | None = None) -> None:
    """Replay `result`'s call (a CallResult with a device report and `replay`) with other values
    for its arguments `chosen` (the inputs, in `flow.inputs`' order), and `check(arguments,
    answer)` the answer (`answers`, cut the same way from the replayed downloads; one value when
    `single`). `draw(arguments, rng)`: the other arguments, where the test knows what its inputs
    must be (sorted, positive, ...; the same shapes and dtypes); default: the inputs' own values
    drawn again. WrongAnswer if the replayed answer fails the check or the replay went otherwise."""
    report: DeviceReport = result.device
    keys = [digest(result.sent[i]) for i in chosen]
    rng = np.random.default_rng(_seed(keys))
    if draw is None:
        arguments = list(result.sent)
        first: dict[str, int] = {}  # an input's digest -> the first input with it (equal inputs share one
        for i, key in zip(chosen, keys):  # upload: they are drawn alike)
            k = first.setdefault(key, i)
            arguments[i] = _drawn(result.sent[i], rng) if k == i else arguments[k]
    else:
        arguments = _own_draw(draw, list(result.sent), rng, chosen)
    if all(arguments[i] is result.sent[i] or np.array_equal(arguments[i], result.sent[i], equal_nan=True)
           for i in chosen):
        return  # nothing can be drawn otherwise: the call's own answer is all there is
    substitutions: dict[int, np.ndarray] = {}
    for i, uploads in zip(chosen, flow.inputs):
        for t, how, detail in uploads:
            substitutions[t.id] = _as_uploaded(arguments[i], t.shape, how, detail)
    index = {id(t): i for i, t in enumerate(report.downloads)}  # (by identity: equal copies are two)
    wanted = sorted({index[id(t)] for ways in flow.answers for t, *_ in ways})
    blocks = sorted({index[id(t)] for ways in flow.answers for t, how, _ in ways if how == "block"})
    replayed = result.replay(substitutions, wanted, blocks)  # (a block is cut as it was from the call's)
    if replayed.diverged is not None:
        raise WrongAnswer(f"the answer does not follow the inputs: the call's GPU work, run again on other inputs of "
                          f"the same sizes, went another way: {replayed.diverged}")
    data = {i: (new, old) for i, new, old in zip(wanted, replayed.downloads, replayed.originals)}
    remade = []
    for value, ways in zip(answers, flow.answers):
        remade.append(_remade(value, [(data[index[id(t)]], how, detail) for t, how, detail in ways]))
    if any(r is _UNKNOWN for r in remade):  # (fail closed: the call's own answer would stand unchecked)
        raise WrongAnswer("the answer could not be cut again from the replayed call's downloads as the data flow "
                          "found it cut from the call's: the grader cannot tell whether it follows the inputs "
                          "(copy the answer back whole from the array a kernel wrote)")
    try:
        check(arguments, remade[0] if single else remade)
    except WrongAnswer as exc:
        raise WrongAnswer(f"the answer does not follow the inputs: the call's GPU work, run again on other inputs "
                          f"of the same sizes with everything else the host made held as it was, gave a wrong "
                          f"answer ({_first_line(exc)}): the kernels were given something the host computed from "
                          f"the inputs{_numbers(report)}; they must compute the answer from the inputs alone"
                          ) from None


_UNKNOWN = object()


def _own_draw(draw, sent: list, rng: np.random.Generator, chosen: list[int]) -> list:
    """The test's `draw`, its arrays as the call's (a test's mistake is told as one)."""
    arguments = list(draw(list(sent), rng))
    for i in chosen:
        new, old = np.asarray(arguments[i]), sent[i]
        if new.shape != old.shape or new.dtype != old.dtype:
            raise ValueError(f"draw() gave argument {i} as {new.dtype}{list(new.shape)}; the call's is "
                             f"{old.dtype}{list(old.shape)}")
        arguments[i] = np.ascontiguousarray(new)
    return arguments


def _seed(keys: list[str]) -> int:
    """A seed from the inputs' digests (a verdict repeats with the same inputs)."""
    h = hashlib.blake2b(digest_size=8)
    for key in keys:
        h.update(key.encode())
    return int.from_bytes(h.digest(), "little")


def _drawn(array: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Other values for `array`: its own, drawn again with repetition from its lower or its upper
    half (so that an answer moves far beyond a check's tolerance: drawn from all of them, a sum of
    40000 moves by about sqrt(n) times their spread, and a float32 sum's tolerance grows with
    sqrt(n) too: a host's sum passed one check in fifty), never only reordered; `array` itself
    where that cannot be."""
    flat = array.reshape(-1)
    if flat.size < 2:
        return array
    pool = flat
    if flat.dtype.kind in "biuf":  # (a partition, not a sort: 2^24 values in 0.05 s, not 2 s; NaNs last)
        half = (flat.size + 1) // 2
        pool = np.partition(flat, half - 1)[:half] if rng.integers(0, 2) else \
            np.partition(flat, flat.size - half)[flat.size - half:]
    for _ in range(_DRAWS):
        drawn = _gathered(pool, flat.size, rng)
        if not _reordered(drawn, flat):
            return drawn.reshape(array.shape)
    return array


def _gathered(pool: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` values of `pool`, each at random (with repetition). Past GATHER_CHUNK values, in
    chunks on a few threads, a child generator each (the same values on every run): a random
    gather of 2^24 values took 0.3 s in one thread here."""
    index = np.int64 if pool.size >> 31 else np.int32
    if size <= GATHER_CHUNK:
        return pool[rng.integers(0, pool.size, size, dtype=index)]
    drawn = np.empty(size, pool.dtype)
    starts = range(0, size, GATHER_CHUNK)

    def fill(chunk: tuple[int, np.random.Generator]) -> None:
        start, generator = chunk
        stop = min(start + GATHER_CHUNK, size)
        drawn[start:stop] = pool[generator.integers(0, pool.size, stop - start, dtype=index)]

    spread(fill, zip(starts, rng.spawn(len(starts))))
    return drawn


def _reordered(drawn: np.ndarray, flat: np.ndarray) -> bool:
    """Whether `drawn` holds exactly the values of `flat`, in another order: told by the sums
    at once but for small arrays (the chance of a draw with repetition being a permutation)."""
    if flat.dtype.kind in "biuf":
        with np.errstate(all="ignore"):
            sums = np.sum(drawn, dtype=np.float64), np.sum(flat, dtype=np.float64)
            if np.isnan(sums).any():  # (nansum copies the array: only where a NaN is there)
                sums = np.nansum(drawn, dtype=np.float64), np.nansum(flat, dtype=np.float64)
            if sums[0] != sums[1]:
                return False
    if flat.dtype.kind not in "biufc":
        drawn, flat = drawn.view(np.uint8), flat.view(np.uint8)
    return np.array_equal(np.sort(drawn), np.sort(flat), equal_nan=flat.dtype.kind in "fc")


def _as_uploaded(array: np.ndarray, shape: tuple[int, ...] | None, how: str, detail: Any) -> np.ndarray:
    """`array` in the form the data flow found the input uploaded in (`Flow.inputs`)."""
    if how == "piece":
        start, stop = detail
        return np.ascontiguousarray(array).reshape(-1)[start:stop].reshape(shape)
    if how == "tile":
        row, col = detail
        return np.ascontiguousarray(array[row:row + shape[0], col:col + shape[1]])
    converted = array if how == "whole" else exactly(array, detail)
    if how == "transposed":
        converted = converted.T
    elif how == "padded":
        padded = np.zeros(shape, converted.dtype)
        padded[tuple(slice(0, d) for d in converted.shape)] = converted
        converted = padded
    return np.ascontiguousarray(converted).reshape(shape)


def _remade(value: Any, ways: list[tuple[tuple[np.ndarray, np.ndarray | None], str, Any]]) -> Any:
    """The answer as the call's `value` was cut from its downloads, cut from the replayed ones
    (each (replayed, the call's), how, detail as in `Flow.answers`); _UNKNOWN where it cannot be."""
    if value is None:
        return None  # (an answer the call did not return: the test's check judges it, as it did the call's)
    if not ways:
        return _UNKNOWN
    if isinstance(value, np.ndarray):
        if ways[0][1] == "piece":
            out = np.empty(value.size, value.dtype)
            for (new, _), _, (start, stop) in ways:
                out[start:stop] = new.reshape(-1)
            return out.reshape(value.shape)
        if ways[0][1] == "tile":
            out = np.empty(value.shape, value.dtype)
            for (new, _), _, (row, col) in ways:
                out[row:row + new.shape[0], col:col + new.shape[1]] = new
            return out
        (new, old), how, _ = ways[0]
        if how == "whole":
            return new.reshape(value.shape)
        if old is None:
            return _UNKNOWN
        key = digest(value)
        for transposed in (False, True) if old.ndim == 2 else (False,):
            block = tuple(slice(0, d) for d in value.shape)
            view = (lambda a: a.T) if transposed else (lambda a: a)
            if len(value.shape) == old.ndim and digest(view(old)[block].astype(value.dtype)) == key:
                return view(new)[block].astype(value.dtype)
            if view(old).size == value.size and digest(view(old).astype(value.dtype)) == key:
                return view(new).astype(value.dtype).reshape(value.shape)
        return _UNKNOWN
    (new, _), _, at = ways[0]
    element = new.reshape(-1)[at]
    return type(value)(element) if isinstance(value, (bool, int, float, complex)) else \
        np.asarray(element).astype(np.asarray(value).dtype)[()]


def _numbers(report: DeviceReport) -> str:
    """The numbers the kernels were given, as the device named them (where a sum may hide)."""
    numbers = [t.what for t in report.uploads if t.what.startswith("the number ") and not t.neutral]
    if not numbers:
        return ""
    more = f", and {len(numbers) - 3} more" if len(numbers) > 3 else ""
    return " (" + "; ".join(numbers[:3]) + more + ")"


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
