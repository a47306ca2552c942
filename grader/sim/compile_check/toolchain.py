"""What compiler toolchain is here: numba-cuda's ``compile_ptx`` (NVVM) and ``ptxas``, with
versions, and the reason when either is missing or does not work."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from grader.sim.devices import TARGET_CC

from . import ptxas
from .explain import first_line

_SM = f"sm_{TARGET_CC[0]}{TARGET_CC[1]}"
_NO_PTXAS = "ptxas not found (install nvidia-cuda-nvcc, or set CUDA_HOME or GPUGRADE_PTXAS)"


@dataclass
class ToolchainStatus:
    compile_ptx: bool
    compile_ptx_reason: str  # "" when usable
    ptxas: bool
    ptxas_reason: str
    ptxas_path: str | None = None
    ptxas_version: str | None = None  # e.g. "13.5.37"
    numba_version: str | None = None
    numba_cuda_version: str | None = None  # None: numba's own numba.cuda
    nvvm_version: str | None = None  # NVVM IR version, e.g. "2.0"

    @property
    def available(self) -> bool:
        return self.compile_ptx and self.ptxas

    @property
    def reason(self) -> str:
        return "; ".join(r for r in (self.compile_ptx_reason, self.ptxas_reason) if r)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["available"] = self.available
        return d

    def lines(self) -> list[str]:
        """Human-readable lines for ``gpugrade doctor``."""
        cp = ("ok" if self.compile_ptx else f"unavailable ({self.compile_ptx_reason})")
        px = (f"ok ({self.ptxas_path})" if self.ptxas else f"unavailable ({self.ptxas_reason})")
        return [
            f"numba {self.numba_version or '?'}, numba-cuda {self.numba_cuda_version or 'not installed'}"
            f", NVVM IR {self.nvvm_version or '?'}",
            f"compile_ptx ({_SM}, no GPU needed): {cp}",
            f"ptxas {self.ptxas_version or ''}: {px}".replace("  ", " "),
        ]


# --------------------------------------------------------------------------- ptxas on disk
_ptxas_version_cache: dict[str, str | None] = {}


def find_ptxas() -> str | None:
    """Path of a usable ``ptxas``: ``$GPUGRADE_PTXAS``, the ``nvidia-cuda-nvcc`` wheel
    (``nvidia/cu13/bin``, ``nvidia/cuda_nvcc/bin``), ``$CUDA_HOME``/``$CUDA_PATH``,
    ``PATH``, ``/usr/local/cuda``. None when there is none."""
    exe = "ptxas.exe" if os.name == "nt" else "ptxas"
    candidates: list[Path] = []
    env = os.environ.get("GPUGRADE_PTXAS")
    if env:
        candidates.append(Path(env))
    try:
        import nvidia  # namespace package of the NVIDIA wheels

        roots = [Path(p) for p in getattr(nvidia, "__path__", [])]
    except ImportError:
        roots = []
    wheel_bins: list[Path] = []
    for root in roots:
        # cu13 wheels: nvidia/cu13/bin; cu12 wheels: nvidia/cuda_nvcc/bin. Newest first.
        wheel_bins += sorted(root.glob("cu*/bin"), key=lambda p: _natural_key(p.parent.name),
                             reverse=True)
        wheel_bins.append(root / "cuda_nvcc" / "bin")
    candidates += [b / exe for b in wheel_bins]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / exe)
    which = shutil.which(exe)
    if which:
        candidates.append(Path(which))
    candidates.append(Path("/usr/local/cuda/bin") / exe)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def _natural_key(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _ptxas_version(path: str) -> str | None:
    if path not in _ptxas_version_cache:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
            m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
            _ptxas_version_cache[path] = m.group(1) if m else None
        except (OSError, subprocess.SubprocessError):
            _ptxas_version_cache[path] = None
    return _ptxas_version_cache[path]


def _versions() -> dict[str, str | None]:
    v: dict[str, str | None] = {"numba": None, "numba_cuda": None}
    try:
        import numba

        v["numba"] = numba.__version__
    except Exception:  # noqa: BLE001 - any import failure means "not there"
        pass
    try:
        import numba_cuda

        v["numba_cuda"] = getattr(numba_cuda, "__version__", "?")
    except Exception:  # noqa: BLE001
        pass
    return v


# --------------------------------------------------------------------------- the status
_status_lock = threading.Lock()
_status_cache: ToolchainStatus | None = None
_light_cache: ToolchainStatus | None = None


def _probe_kernel(a):  # compiled by toolchain_status(); never run
    a[0] = a[0] + 1.0


def toolchain_status(refresh: bool = False) -> ToolchainStatus:
    """Whether ``compile_ptx`` and ``ptxas`` work here (by compiling and assembling a
    one-line kernel, once per process), with versions and the reason when not."""
    global _status_cache
    with _status_lock:
        if _status_cache is not None and not refresh:
            return _status_cache
        v = _versions()
        st = ToolchainStatus(compile_ptx=False, compile_ptx_reason="", ptxas=False,
                             ptxas_reason="", numba_version=v["numba"],
                             numba_cuda_version=v["numba_cuda"])
        ptx = None
        try:
            from numba import cuda, float32

            try:
                from numba.cuda.cudadrv import nvvm

                st.nvvm_version = ".".join(map(str, nvvm.NVVM().get_version()))
            except Exception as e:  # noqa: BLE001
                st.compile_ptx_reason = f"NVVM not usable: {first_line(e)}"
            if not st.compile_ptx_reason:
                ptx, _ = cuda.compile_ptx(_probe_kernel, (float32[:],), cc=TARGET_CC)
                st.compile_ptx = True
        except Exception as e:  # noqa: BLE001
            st.compile_ptx_reason = st.compile_ptx_reason or (
                f"numba.cuda.compile_ptx failed: {type(e).__name__}: {first_line(e)}")
        if st.compile_ptx_reason and st.numba_cuda_version is None:
            st.compile_ptx_reason += " (numba-cuda[cu13] is not installed)"

        path = find_ptxas()
        st.ptxas_path = path
        if path is None:
            st.ptxas_reason = _NO_PTXAS
        else:
            st.ptxas_version = _ptxas_version(path)
            if st.ptxas_version is None:
                st.ptxas_reason = f"{path} --version failed"
            elif ptx is not None:
                res = ptxas.run(path, ptx, TARGET_CC)
                if res.returncode != 0:
                    st.ptxas_reason = f"ptxas cannot assemble numba's PTX: {ptxas.errors(res.log)}"
                else:
                    st.ptxas = True
            else:
                st.ptxas = True  # cannot test-assemble without PTX; the binary answers
        _status_cache = st
        return st


def status_for_check() -> ToolchainStatus:
    """What compile_check needs, without toolchain_status()'s probe compile (~0.3 s), so
    that a cache hit in a fresh process stays cheap: versions, numba.cuda.compile_ptx
    importable, ptxas found and answering --version. A toolchain that turns out not to
    work (no NVVM, a ptxas too old for numba's PTX) is detected on the real compile and
    reported as unavailable there."""
    global _light_cache
    with _status_lock:
        if _status_cache is not None:
            return _status_cache
        if _light_cache is not None:
            return _light_cache
    v = _versions()
    st = ToolchainStatus(compile_ptx=False, compile_ptx_reason="", ptxas=False, ptxas_reason="",
                         numba_version=v["numba"], numba_cuda_version=v["numba_cuda"])
    try:
        from numba import cuda

        st.compile_ptx = callable(getattr(cuda, "compile_ptx", None))
        if not st.compile_ptx:
            st.compile_ptx_reason = "numba.cuda has no compile_ptx"
    except Exception as e:  # noqa: BLE001
        st.compile_ptx_reason = f"numba.cuda cannot be imported: {first_line(e)}"
    if st.compile_ptx_reason and st.numba_cuda_version is None:
        st.compile_ptx_reason += " (numba-cuda[cu13] is not installed)"
    st.ptxas_path = find_ptxas()
    if st.ptxas_path is None:
        st.ptxas_reason = _NO_PTXAS
    else:
        st.ptxas_version = _ptxas_version(st.ptxas_path)
        st.ptxas = st.ptxas_version is not None
        if not st.ptxas:
            st.ptxas_reason = f"{st.ptxas_path} --version failed"
    with _status_lock:
        _light_cache = st
    return st
