"""The course: its tree (`tree`: exercises, grading tests, the student's modules), which of a `.py`
and an `.ipynb` is graded (`choice`), the manifest of stages, points and thresholds (`manifest`),
the student release (`release`), hints (`hints`) and the self-check that the course grades itself
(`validate`)."""

from .choice import graded_files, submission_modules
from .tree import GRADING_TESTS, Course, make_workspace

__all__ = ["GRADING_TESTS", "Course", "graded_files", "make_workspace", "submission_modules"]
