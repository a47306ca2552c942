"""The outcome of one compile check."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from grader.sim.devices import TARGET_CC
from grader.sim.occupancy import Occupancy, occupancy as _occupancy

Stage = str  # "typing" | "lowering" | "ptxas" | None


@dataclass
class CompileReport:
    """Outcome of one compile check.

    ``ok``: the kernel compiled and assembled. ``available`` False: the toolchain is
    missing here (``message`` says why); this is not a failure of the kernel (use
    ``failed`` to test for a real failure). ``stage`` of a failure: ``"typing"`` (the
    kernel uses something that cannot run on the GPU: numba's type inference rejected
    it, or it needs memory allocation at run time), ``"lowering"`` (numba/NVVM could
    not generate code), ``"ptxas"`` (the assembler rejected the PTX, e.g. too much
    static shared memory).
    """

    ok: bool
    available: bool = True
    stage: Stage | None = None
    message: str = ""
    kernel: str = ""
    filename: str | None = None  # file of the offending line (absolute), when known
    lineno: int | None = None
    source_line: str | None = None
    detail: str = ""  # numba's / ptxas's own message, trimmed
    cc: tuple[int, int] = TARGET_CC
    argtypes: list[str] = field(default_factory=list)
    registers: int | None = None  # per thread
    barriers: int | None = None
    shared_bytes: int | None = None  # static shared memory per block
    local_bytes: int | None = None  # per-thread stack frame (local arrays + spills)
    spill_stores: int | None = None  # bytes
    spill_loads: int | None = None  # bytes
    constant_bytes: int | None = None  # sum of the cmem[] banks ptxas reports
    # the PTX's basic blocks, loops and memory instructions by line (issue.profile): what the
    # launch's warp instructions are estimated from; None where it could not be read
    instructions: dict | None = None
    ptxas_log: str = ""
    compile_seconds: float | None = None  # of the real compile (not of a cache hit)
    cached: str | None = None  # None (compiled now) | "memory" | "disk"
    toolchain: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """True only when the toolchain ran and rejected the kernel."""
        return self.available and not self.ok

    def occupancy(self, threads_per_block: int, dynamic_shared: int = 0) -> Occupancy:
        """Theoretical occupancy on ``self.cc`` for a launch with this block size and
        dynamic shared memory (bytes)."""
        if not self.ok or self.registers is None:
            raise ValueError(f"no resource usage for {self.kernel or 'kernel'}: "
                             f"compile check {'unavailable' if not self.available else 'failed'}")
        return _occupancy(self.registers, self.shared_bytes or 0, threads_per_block,
                          dynamic_shared, tuple(self.cc))

    def summary(self) -> str:
        if not self.available:
            return f"compile check unavailable: {self.message}"
        if not self.ok:
            return f"{self.kernel} does not compile for the GPU ({self.stage}): {self.message}"
        spill = (f", spills {self.spill_stores} B stored / {self.spill_loads} B loaded"
                 if (self.spill_stores or self.spill_loads) else "")
        return (f"{self.kernel} compiles for sm_{self.cc[0]}{self.cc[1]}: {self.registers} registers, "
                f"{self.shared_bytes} B shared, {self.local_bytes} B local{spill}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["cc"] = list(self.cc)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CompileReport":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["cc"] = tuple(kw.get("cc", TARGET_CC))
        return cls(**kw)
