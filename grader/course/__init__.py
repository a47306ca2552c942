"""The course: its tree (`tree`: exercises, grading tests, the student's modules), the manifest of
stages, points and thresholds (`manifest`), the student release (`release`), hints (`hints`) and
the self-check that the course grades itself (`validate`)."""

from .tree import GRADING_TESTS, Course, make_workspace, submission_modules

__all__ = ["GRADING_TESTS", "Course", "make_workspace", "submission_modules"]
