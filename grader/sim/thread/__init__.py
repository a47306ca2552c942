"""The per-thread executor: a kernel's own Python code run once per CUDA thread.

The fallback for what the SIMT executor (`grader.sim.simt`) does not run in lockstep, and the
executor of choice with `executor="thread"`. One greenlet per thread, blocks one after another.

    executor.py   ThreadExecutor: launch set-up, the block loop, the scheduler, blocking calls
    block.py      one block's thread states; completing barriers and warp collectives; misuse
                  and deadlock findings
    arrays.py     ThreadArray (every access instrumented; the hot path) and the memory spaces
    cuda.py       the fake `cuda` a kernel sees (ThreadCuda), atomics, warp and bit intrinsics
    typer.py      numba's types for a launch and its device functions (numba-cuda's inference)
    rewrite.py    the front end: the kernel's AST rewritten to follow those types
    values.py     casts and operations on values as numba types them (what rewritten code calls)
    access.py     element accesses compiled inline, and their per-site logs

    ThreadExecutor(launch).run()
"""
