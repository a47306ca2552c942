"""Lockstep SIMT executor: runs every lane of a batch of blocks at once with numpy.

`run(launch)` executes one `launch.Launch` (`run_simt(kernel, config, args, instrument)` is the
same without the `Launch` record); `prepare(kernel, args)` only types and transforms. All raise
`SimtUnsupported` (alias `Unsupported`) naming what lockstep cannot model, so the launcher can
fall back to the per-thread executor with that reason.
"""

from .executor import prepare, run, run_simt
from .unsupported import SimtUnsupported

Unsupported = SimtUnsupported

__all__ = ["SimtUnsupported", "Unsupported", "prepare", "run", "run_simt"]
