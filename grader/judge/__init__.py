"""THE JUDGE (trusted): the pytest plugin that turns grading tests into a grade (plugin), the
handle on a student's module in its runner (student), and what decides points: answers
(correctness), the proof that an answer is the GPU's (proof: the data flow, dataflow, and the
replay on other inputs, replay), performance criteria (perf), the reference's recorded counters
(recorded_reference), and the static policy, which is early feedback only (policy).

Grading tests import from here: `from grader.judge import require_kernel_launch`.
"""

from .proof import require_kernel_launch
from .student import CallResult, Returns, RunnerConnection, Student, TimeBudget

__all__ = ["CallResult", "Returns", "RunnerConnection", "Student", "TimeBudget", "require_kernel_launch"]
