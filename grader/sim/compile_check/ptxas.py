"""Running ``ptxas -v`` on numba's PTX and reading its log: resources, errors."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

from .report import CompileReport

_TIMEOUT_S = 120


@dataclass
class Result:
    returncode: int
    log: str
    relocatable: bool = False  # assembled with -c (the PTX calls functions linked at load time)


def run(path: str, ptx: str, cc) -> Result:
    """``ptxas -v --gpu-name sm_XY`` of `ptx` (a negative returncode: it did not run).

    numba's PTX may call functions it links in at load time (its fp16 helpers, cudadevrt for
    cooperative groups): a whole-program ptxas run finds them unresolved and refuses valid code.
    Then it runs again on relocatable code (`-c`), as numba links it (`relocatable`: that log has
    no static shared memory; `static_shared_bytes` reads it from the PTX instead)."""
    result = _ptxas(path, ptx, cc, [])
    if result.returncode > 0 and "Unresolved extern function" in result.log:
        again = _ptxas(path, ptx, cc, ["-c"])
        return Result(again.returncode, again.log, relocatable=True)
    return result


def _ptxas(path: str, ptx: str, cc, flags: list[str]) -> Result:
    with tempfile.TemporaryDirectory(prefix="gpugrade-ptxas-") as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(ptx)
        try:
            r = subprocess.run([path, *flags, "-v", "--gpu-name", f"sm_{cc[0]}{cc[1]}", src,
                                "-o", os.path.join(tmp, "kernel.cubin")],
                               capture_output=True, text=True, timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Result(-1, f"ptxas timed out after {_TIMEOUT_S} s")
        except OSError as e:
            return Result(-1, f"ptxas could not run: {e}")
        return Result(r.returncode, (r.stdout or "") + (r.stderr or ""))


_RE_SHARED = re.compile(r"^\s*\.shared\s+(?:\.align\s+\d+\s+)?\.[bsuf](\d+)\s+[\w$.]+\[(\d+)\]", re.M)


def static_shared_bytes(ptx: str) -> int:
    """Static shared memory the PTX declares (`.shared .align 4 .b8 name[1024];`)."""
    return sum(int(bits) // 8 * int(count) for bits, count in _RE_SHARED.findall(ptx))


_RE_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_RE_PROPS = re.compile(r"Function properties for (\S+)")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")


def parse_log(log: str, r: CompileReport) -> None:
    """Fill the resource fields from ``ptxas -v`` output, for the (single) entry
    function; lines about non-entry functions are skipped."""
    entry = None
    props_for = None
    for line in log.splitlines():
        m = _RE_ENTRY.search(line)
        if m:
            entry = m.group(1)
            continue
        m = _RE_PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _RE_FRAME.search(line)
        if m and props_for is not None and props_for == entry:
            r.local_bytes, r.spill_stores, r.spill_loads = (int(g) for g in m.groups())
            continue
        m = _RE_USED.search(line)
        if m and entry is not None:
            r.registers = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            r.barriers = int(b.group(1)) if b else 0
            s = re.search(r"(\d+) bytes smem", line)
            r.shared_bytes = int(s.group(1)) if s else 0
            cm = [int(x) for x in re.findall(r"(\d+) bytes cmem\[\d+\]", line)]
            r.constant_bytes = sum(cm)
            lm = re.search(r"(\d+) bytes lmem", line)  # older ptxas
            if lm and r.local_bytes is None:
                r.local_bytes = int(lm.group(1))
            entry = None  # later "Used" lines belong to other functions
    for f in ("local_bytes", "spill_stores", "spill_loads"):
        if getattr(r, f) is None and r.registers is not None:
            setattr(r, f, 0)


def errors(log: str) -> str:
    """The error lines of a ptxas log, joined (else its tail)."""
    errs = [ln.split(":", 1)[1].strip() if ":" in ln else ln.strip()
            for ln in log.splitlines() if "error" in ln.lower()]
    return "; ".join(errs) or log.strip()[-300:]


def message(errs: str, kernel: str) -> str:
    """A ptxas rejection for the student: the kernel by name (not mangled); too much static
    shared memory explained."""
    msg = re.sub(r"'_Z[\w$.]+'", f"'{kernel}'", errs)
    m = re.search(r"too much shared data \((0x[0-9a-f]+) bytes, (0x[0-9a-f]+) max\)", msg)
    if m:
        used, mx = int(m.group(1), 16), int(m.group(2), 16)
        return (f"{kernel} declares {used} bytes of static shared memory (cuda.shared.array); "
                f"the limit is {mx} bytes per block. Use smaller tiles, or dynamic shared memory")
    return f"ptxas rejected {kernel}: {msg}"
