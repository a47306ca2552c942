"""THE UNTRUSTED SIDE: `python -m grader.runner` imports the student's module and runs its host
code for the judge (grader.runner.serve). It imports grader.wire, the simulator's device client
(grader.device.client) or the simulator itself, and nothing of the judge (import contracts)."""
