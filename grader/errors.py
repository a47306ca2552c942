"""Named errors a user of gpugrade can see. Each says what went wrong in the user's terms."""


class GpugradeError(Exception):
    """Base of the errors gpugrade raises on purpose (never a student's own exception)."""


class UsageError(GpugradeError):
    """The command line or a path given by the user is wrong (exit code 2)."""


class CourseError(UsageError):
    """The course tree (tests/exercises, solutions/, manifest) is missing or malformed."""


class WouldOverwriteWork(UsageError):
    """`release` would replace exercise files changed since the course released them (a student's
    work, in their copy of the course): nothing is written without --force."""


class RosterError(UsageError):
    """The class roster (a CSV of student_id, repo[, ref]) is unreadable or has malformed rows."""


# A message across the judge/runner boundary is malformed: defined in grader.wire, which imports
# nothing of the grader, and named here with the others.
from .wire.frames import ProtocolError  # noqa: E402,F401


class RunnerError(GpugradeError):
    """The student's runner process failed: crashed, timed out or broke the protocol."""

    def __init__(self, reason: str, output: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.output = output


class CallTimeout(RunnerError):
    """A request was not answered within its limit: the runner was killed. `output` holds what it
    wrote last (for a student's call, where its code was: the runner's faulthandler dump);
    `kernel_at`, where the simulated GPU said its kernel was then ("" if it said nothing)."""

    kernel_at = ""


class GraderFault(RunnerError):
    """A process of the grader's own failed (the simulated GPU's device process did not start):
    no fault of the student's. The test fails, and the grade carries a grader error (exit 3; a
    batch grades the submission again), never a zero that reads as the student's."""


class Unavailable(RunnerError):
    """The runner cannot measure what was asked on this machine (no CuPy or NCCL, fewer GPUs than
    ranks, a backend that times nothing): no failure of the student's, nor of the runner's; a test
    reports it as not gradable here. `reason` says why."""


# what the stand-in module of a refused file raises (grader.course.notebooks.refusal_module)
REFUSALS = frozenset({"NotebookRefused", "SubmissionRefused"})


class StudentCodeError(GpugradeError):
    """The student's code raised (or failed to import); `where` is file:line in their module."""

    def __init__(self, kind: str, exc_type: str, message: str, where: str = "", traceback: str = "",
                 finding=None):
        self.kind = kind          # "import" | "not_implemented" | "simulator" | "policy" | "exception"
        self.exc_type = exc_type
        self.message = message
        self.where = where
        self.traceback = traceback
        self.finding = finding    # a simulator finding: its grader.wire.Finding record
        super().__init__(self.summary())

    def summary(self) -> str:
        at = f" ({self.where})" if self.where else ""
        if self.kind == "not_implemented":
            return f"not implemented yet{at}" + (f": {self.message}" if self.message else "")
        if self.kind in ("simulator", "policy", "missing"):  # these messages say it all
            return self.message
        if self.kind == "context_lost":
            return f"{self.message}{at}; the GPU context was lost, later tests ran in a fresh process"
        if self.kind == "import" and self.exc_type in REFUSALS and not self.where:  # the reason says where
            return f"not graded: {self.message}"
        if self.kind == "import":
            return f"could not import the submission{at}: {self.exc_type}: {self.message}"
        return f"{self.exc_type}{at}: {self.message}"
