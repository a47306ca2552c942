"""The proof that an answer is the GPU's work: a kernel ran, the data flow (grader.judge.dataflow)
and, with the test's own check, a replay of the call on other inputs (grader.judge.replay).

Grading tests call `require_kernel_launch` on each call's result, before any other call of the
student's (a replay runs the last call again).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..wire.messages import is_number
from .correctness import WrongAnswer, short_grid
from .dataflow import verify
from .replay import follow
from .signatures import labels as labels_of
from .student import CallResult

_RETURNED = object()


def require_kernel_launch(result: CallResult, backend: str, output: Any = _RETURNED,
                          inputs: list[int] | None = None, check: Callable[[list, Any], None] | None = None,
                          draw: Callable[[list, np.random.Generator], list] | None = None) -> None:
    """The answer must be the GPU's work: some kernel ran and, where the simulated GPU reports
    to this side (the device process), `output` (default: what the function returned) was copied
    back from device memory that kernels of this call wrote from the call's inputs (`inputs`:
    the positions of the arguments that are inputs; default: every array argument), and is not
    bytes the host itself copied there (grader.judge.dataflow). With `check(arguments, answer)`
    (the test's own judgement of an answer, raising WrongAnswer: `output`'s shape, for the
    arguments given), a wrong answer fails first in the test's words (a kernel that never read an
    input because of a bug is told by its wrong answer, not as data the host made), and the call's
    device work is replayed on other inputs, its answer judged again (grader.judge.replay): call
    this before any other call of the student's. `draw(arguments, rng)` makes the replay's
    arguments where the inputs must be of a kind (sorted, positive); default: the inputs' own
    values drawn again with repetition from their lower or upper half.
    On the gpu backend the launches are the runner's own record: an honest host-side answer
    loses its points, a forged record is not detected there (the simulator's device process is
    the proof)."""
    if not result.launches:
        raise WrongAnswer("no kernel was launched: the result must be computed on the GPU")
    wrong = None
    if check is not None:
        try:
            check(result.sent, result.value if output is _RETURNED else output)
        except WrongAnswer as exc:
            wrong = short_grid(exc, result.launches)
    proof = result.proof if result.proof is not None else result
    if proof.device is None:
        if wrong is not None:
            raise wrong
        return
    chosen = [i for i in (range(len(proof.sent)) if inputs is None else inputs)
              if isinstance(proof.sent[i], np.ndarray)]
    # the inputs in the student's terms: the course's parameter names (rank r's buffer of a collective)
    labels, call = labels_of(proof.function, proof.parameters, chosen)
    if result.ranks:
        labels = [f"rank {i}'s buffer" for i in chosen]
    answer = proof.value if output is _RETURNED else _in_proof(output, result, proof)
    try:
        flow = verify(proof.device, [proof.sent[i] for i in chosen], answer, labels,
                      [a for a in proof.sent if isinstance(a, np.ndarray)],
                      [a for a in proof.sent if is_number(a)], call)
    except WrongAnswer as exc:
        if wrong is None:
            raise
        # a wrong answer in the test's words, with what the data flow saw of it (a kernel that
        # never read an input: a loop over the tiles that never runs)
        first, _, rest = str(wrong).partition("\n")
        raise WrongAnswer(f"{first}; {str(exc).splitlines()[0]}" + (f"\n{rest}" if rest else "")) from None
    if wrong is not None:
        raise wrong
    if check is not None and proof.replay is not None and (proof is result or _passes(check, proof.sent, answer)):
        single = not isinstance(answer, (list, tuple))
        follow(proof, flow, chosen, [answer] if single else list(answer), check, single, draw)


def _passes(check: Callable[[list, Any], None], arguments: list, answer: Any) -> bool:
    """Whether the call's own answer passes the test's check (a wrong one is the test's to tell,
    in its own words: a replay would only blame the inputs for it)."""
    try:
        check(arguments, answer)
    except WrongAnswer:
        return False
    return True


def _in_proof(value: Any, result: CallResult, proof: CallResult) -> Any:
    """`value` (the returned value or an argument of `result`) as the proof's call has it."""
    if isinstance(value, (list, tuple)):
        return [_in_proof(v, result, proof) for v in value]
    if value is result.value:
        return proof.value
    for i, arg in enumerate(result.args):
        if arg is not None and value is arg:
            return proof.args[i]
    return value
