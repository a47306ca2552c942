"""Data flow: an answer counts only when the simulated GPU says its kernels computed it.

The device process reports every copy of a call (grader.wire.DeviceReport): a digest of each
upload, and of each download with whether a kernel of this call last wrote the memory it came
from. The judge holds the call's inputs and the student's answer, and checks:
- every input array was copied to the device, whole, during the call (or in pieces into one
  allocation: the device logs it as one upload once every element is there);
- the answer (an array, or a scalar read from device memory) is bytes some download of the call
  returned, from memory a kernel of this call wrote, computed (through the arrays the kernels
  loaded from, launch after launch) from every input;
- the answer is not bytes the host copied to the device in this call (an answer computed on the
  host, then copied through the GPU by a copy kernel or returned as uploaded);
- no data the host made went into it: every upload the answer was computed from (the kernels'
  constant arrays count as uploads) is an array of the call's or carries no answer (a single start
  value everywhere: zeros, ones, infinities; random number states); so a kernel that reads the
  inputs *and* a host-computed answer gains nothing;
- at most a sixteenth of its elements are still bytes the host wrote there (a host answer whose
  every element but a few no kernel overwrote; the device compares bytes, element by element).
Each failure is a WrongAnswer that says which rule, in the student's terms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .correctness import WrongAnswer
from ..wire import DeviceReport, Transfer
from ..wire.messages import digest


def verify(report: DeviceReport, inputs: list[np.ndarray], output: Any, labels: list[str] | None = None,
           sent: list[np.ndarray] | None = None) -> None:
    """`labels`: how the messages name each input (default: "input array k"); `sent`: every
    array of the call (default: the inputs): copies of them are not data the host made."""
    labels = labels or [f"input array {i + 1}" for i in range(len(inputs))]
    uploaded = {t.digest for t in report.uploads}
    given = {digest(a) for a in (inputs if sent is None else sent)} | {digest(a) for a in inputs}
    host_made = {t.id: t for t in report.uploads if not t.neutral and t.digest not in given}
    copies: list[set[int]] = []  # per input: the uploads of it in this call
    for i, array in enumerate(inputs):
        key = digest(array)
        ids = {t.id for t in report.uploads if t.digest == key}
        if not ids:
            raise WrongAnswer(f"{labels[i]} ({array.dtype}{list(array.shape)}) was never copied to the GPU "
                              f"during the call: the kernels must read the inputs (copy each whole array with "
                              f"cuda.to_device, or pass it to the kernel)")
        copies.append(ids)
    for value in output if isinstance(output, (list, tuple)) else [output]:
        _answer(report, value, uploaded, copies, inputs, labels, host_made)


def _answer(report: DeviceReport, value: Any, uploaded: set[str], copies: list[set[int]],
            inputs: list[np.ndarray], labels: list[str], host_made: dict[int, Transfer]) -> None:
    if value is None:
        return
    written = [t for t in report.downloads if t.kernel_written]
    if isinstance(value, np.ndarray):
        key = digest(value)
        if key in uploaded:
            raise WrongAnswer("the answer is what the host copied to the GPU: it was computed on the host, not "
                              "by a kernel")
        found = [t for t in written if t.digest == key]
    elif isinstance(value, (bool, int, float, complex, np.generic)):
        found = [t for t in written if _holds(t.head, value)]
    else:
        return
    if not found:
        raise WrongAnswer("the answer was not copied back from GPU memory written by a kernel of this call "
                          "(was it computed on the host?)")
    size = int(np.size(value))
    reasons = [_host_made(t, host_made, size) for t in found]
    if all(reasons):
        raise WrongAnswer(reasons[0])
    found = [t for t, reason in zip(found, reasons) if not reason]
    for i, ids in enumerate(copies):
        if not any(ids & set(t.sources) for t in found):
            raise WrongAnswer(f"the answer was not computed from {labels[i]} "
                              f"({inputs[i].dtype}{list(inputs[i].shape)}): the kernels that wrote it never read it")


def _host_made(download: Transfer, host_made: dict[int, Transfer], size: int) -> str | None:
    """Why this download of the answer is data the host made, or None."""
    for upload in download.sources:
        if upload in host_made:
            return (f"the answer was computed from data the host made, not only from the inputs: "
                    f"{host_made[upload].what or 'an array copied to the GPU'}; the kernels must compute it "
                    f"from the inputs alone")
    carriers = [host_made[u] for u in download.carried_from if u in host_made]
    if carriers and download.carried >= max(1, -(-size // 16)):
        return (f"the answer is bytes the host wrote to the GPU ({carriers[0].what or 'an array copied to the GPU'}) "
                f"that no kernel rewrote: it was computed on the host\n{download.carried} of its {size} elements "
                f"are those bytes, unchanged")
    return None


def _holds(head: np.ndarray | None, value: Any) -> bool:
    """Whether `value` is one of the first values of a download, as the device stored it."""
    if head is None or head.size == 0:
        return False
    try:
        stored = np.asarray(value).astype(head.dtype)
    except (TypeError, ValueError, OverflowError):
        return False
    same = head == stored
    if head.dtype.kind in "fc":
        same |= np.isnan(head) & np.isnan(stored)
    return bool(np.any(same))
