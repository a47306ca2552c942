"""The simulated GPU as a process of its own (the device process) and the runner's client of it.

server: the device process (`python -m grader.device`): device memory, launches, checkers and
        counters; reports to the judge directly.
client: in the runner: numba.cuda's host API and launches as requests to the device process.
package: a kernel as data, so that the device never imports the student's module.
"""
