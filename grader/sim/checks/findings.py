"""How every checker reports a finding: an `errors.SimError` subclass naming the kernel, the
student's file and line, the block, the thread, the array and its index; `errors.Checks`
raises it or downgrades it to a warning."""

from __future__ import annotations

from ..errors import where


class Findings:
    """Mixin of `memory.Instrument` (reads kernel, filename, config, checks, warnings)."""

    def _fail(self, cls, what: str, block: int, thread: int, line: int, filename=None,
              array=None, index=None) -> None:
        b, t = self.config.block_xyz(int(block)), self.config.thread_xyz(int(thread))
        fn = filename or self.filename
        err = cls(f"{where(self.kernel, fn, line, b, t)}: {what}", kernel=self.kernel,
                  filename=fn, line=line, block=b, thread=t, array=array, index=index)
        self.checks.report(err, self.warnings)

    def _index_of(self, handle, flat: int):
        """The kernel index (an int, or a tuple per dimension) of a position in `handle.flat`."""
        f = flat - handle.offset
        if getattr(handle, "block_stride", 0):
            f %= handle.block_stride
        out = []
        for st in handle.estrides:
            q, f = divmod(f, st) if st else (0, f)
            out.append(int(q))
        return out[0] if len(out) == 1 else tuple(out)
