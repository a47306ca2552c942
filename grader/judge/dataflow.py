"""Data flow: an answer counts only when the simulated GPU says its kernels computed it.

The device process reports every copy of a call (grader.wire.DeviceReport): a digest of each
upload, and of each download with whether a kernel of this call last wrote the memory it came
from. The judge holds the call's inputs and the student's answer, and checks:
- every input array was copied to the device, whole, during the call;
- the answer (an array, or a scalar read from device memory) is bytes some download of the call
  returned, from memory a kernel of this call wrote, computed (through the arrays the kernels
  loaded from, launch after launch) from every input;
- the answer is not bytes the host copied to the device in this call (an answer computed on the
  host, then copied through the GPU by a copy kernel or returned as uploaded).
Each failure is a WrongAnswer that says which rule, in the student's terms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .correctness import WrongAnswer
from ..wire import DeviceReport
from ..wire.messages import digest


def verify(report: DeviceReport, inputs: list[np.ndarray], output: Any, labels: list[str] | None = None) -> None:
    """`labels`: how the messages name each input (default: "input array k")."""
    labels = labels or [f"input array {i + 1}" for i in range(len(inputs))]
    uploaded = {t.digest for t in report.uploads}
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
        _answer(report, value, uploaded, copies, inputs, labels)


def _answer(report: DeviceReport, value: Any, uploaded: set[str], copies: list[set[int]],
            inputs: list[np.ndarray], labels: list[str]) -> None:
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
    for i, ids in enumerate(copies):
        if not any(ids & set(t.sources) for t in found):
            raise WrongAnswer(f"the answer was not computed from {labels[i]} "
                              f"({inputs[i].dtype}{list(inputs[i].shape)}): the kernels that wrote it never read it")


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
