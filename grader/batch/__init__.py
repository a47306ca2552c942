"""Grading a class. Modules: roster (the CSV of students and their repositories), submissions
(one student's files, fetched safely from a folder or git), store (the results store), run (the
batch: fetch, grade and record every roster entry, in parallel, resumable)."""
