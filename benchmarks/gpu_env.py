"""The Python environment the device check grades in, made on the GPU machine from its image's
Python and the wheels carried in .whl (`benchmarks/gpu_wheels.sh` fetches them here).

    python3 benchmarks/gpu_env.py --wheels .whl --env /tmp/gpugrade-env   # last line: its python

Why an environment of its own: the judge starts every runner and the device process as
`python -I -m grader...`, and -I ignores PYTHONPATH, so grader and the carried wheels must sit
in a site directory of the interpreter itself. The image's Python is a venv of its own, and a
venv made from it sees the base interpreter's site-packages, not the image's: so the new venv
gets the carried wheels in its own site-packages (first on sys.path) and a .pth file adding this
checkout and the image's site directories after them.

A carried wheel is installed only where the image lacks the package or has another version, and
only when its requirements hold against the image with the other chosen wheels: numba 0.68 over
an image whose llvmlite is not 0.50 is left out (the image's numba stays), and so is anything that
needs it. What was chosen, and why not, is printed, so a mismatch is in the log, not a mystery.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CHECK = "import grader, greenlet, numba, numpy, pytest, rich"


@dataclass
class Wheel:
    path: Path
    name: str  # canonical
    version: Version
    requires: list[Requirement] = field(default_factory=list)  # for this interpreter, extras left out


def read_wheel(path: Path) -> Wheel:
    name, version, _, _ = parse_wheel_filename(path.name)
    env = default_environment() | {"extra": ""}
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    requires = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate(env):
                requires.append(req)
    return Wheel(path, canonicalize_name(name), version, requires)


def choose(wheels: list[Wheel], installed: dict[str, Version]) -> tuple[list[Wheel], dict[str, str]]:
    """The wheels to install over `installed` (canonical name -> version), and why each other one
    is not: a wheel is wanted where its package is missing or of another version, and kept only
    while every requirement of it holds against `installed` with the kept wheels in place."""
    why: dict[str, str] = {}
    kept = []
    for w in wheels:
        if installed.get(w.name) == w.version:
            why[w.name] = f"{w.name} {w.version}: the image has it"
        else:
            kept.append(w)
    changed = True
    while changed:
        changed = False
        versions = dict(installed) | {w.name: w.version for w in kept}
        for w in list(kept):
            unmet = [f"{r} (has {versions.get(canonicalize_name(r.name), 'none')})" for r in w.requires
                     if canonicalize_name(r.name) not in versions
                     or not r.specifier.contains(versions[canonicalize_name(r.name)], prereleases=True)]
            if unmet:
                why[w.name] = (f"{w.name} {w.version} left out (the image keeps "
                               f"{installed.get(w.name, 'none')}): needs {'; '.join(unmet)}")
                kept.remove(w)
                changed = True
                break  # the others against the versions without it
    return kept, why


def installed_versions() -> dict[str, Version]:
    out = {}
    for dist in metadata.distributions():
        try:
            out.setdefault(canonicalize_name(dist.metadata["Name"]), Version(dist.version))
        except Exception:  # a broken dist-info in the image: not ours to judge
            continue
    return out


def ready_here() -> bool:
    """This Python already grades from this checkout: its isolated runners import this grader
    (the check `gpugrade grade` makes itself) and everything grading needs (the dry run with
    .venv/bin/python)."""
    sys.path.insert(0, str(ROOT))
    try:
        from grader.sandbox.process import isolated_import_problem
    except ImportError:  # not even the judge's side imports here
        return False
    return (isolated_import_problem() is None
            and subprocess.run([sys.executable, "-I", "-c", CHECK], capture_output=True).returncode == 0)


def make_env(env: Path, chosen: list[Wheel]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(env)], check=True)
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if chosen:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", purelib, *map(str, (w.path for w in chosen))],
                       check=True)
    image_sites = [p for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"]] if os.path.isdir(p)]
    # the image's prefix in site.PREFIXES too: cuda-pathfinder looks for the NVIDIA wheels' libraries
    # (libnvrtc, libnvvm) under site.getsitepackages()
    lines = [str(ROOT), f"import site; site.PREFIXES.append({sys.prefix!r})"]
    lines += [f"import site; site.addsitedir({p!r})" for p in dict.fromkeys(image_sites)]
    Path(purelib, "_gpugrade_image.pth").write_text("\n".join(lines) + "\n")
    return python


def into_this_python(chosen: list[Wheel]) -> Path:
    """The fallback on a machine that is thrown away after the check: the chosen wheels over this
    Python's own packages, and a .pth naming this checkout."""
    purelib = sysconfig.get_paths()["purelib"]
    if chosen:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", *map(str, (w.path for w in chosen))], check=True)
    Path(purelib, "_gpugrade_checkout.pth").write_text(f"{ROOT}\n")
    return Path(sys.executable)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", default=str(ROOT / ".whl"))
    ap.add_argument("--env", default="/tmp/gpugrade-env")
    ap.add_argument("--fresh", action="store_true", help="make the environment even where this Python grades already")
    args = ap.parse_args(argv)
    if not args.fresh and ready_here():
        print(f"{sys.executable} already grades from this checkout")
        print(sys.executable)
        return 0
    wheels = [read_wheel(p) for p in sorted(Path(args.wheels).glob("*.whl"))] if Path(args.wheels).is_dir() else []
    chosen, why = choose(wheels, installed_versions())
    for w in chosen:
        print(f"install {w.name} {w.version} ({w.path.name})")
    for reason in why.values():
        print(reason)
    try:
        python = make_env(Path(args.env), chosen)
    except (OSError, subprocess.CalledProcessError) as exc:  # no venv module there, say
        print(f"no environment of its own ({exc}): into this Python's own site-packages instead")
        python = into_this_python(chosen)
    # a kernel compiled too, not only imported: the image's numpy 2.5 let numba-cuda import and
    # then failed every kernel's typing (np.row_stack), which a grade found 130 s later
    probe = (f"{CHECK}; import importlib.metadata as m\n"
             "from numba import cuda, float32\n"
             "def _k(a):\n    a[0] = 1.0\n"
             "cuda.compile_ptx(_k, (float32[:],), cc=(9, 0))\n"
             "def v(n):\n    try: return m.version(n)\n    except m.PackageNotFoundError: return 'missing'\n"
             "print('grading with', ', '.join(f'{n} {v(n)}' for n in ('numba', 'numba-cuda', 'llvmlite', "
             "'numpy', 'greenlet', 'cuda-bindings', 'cuda-core', 'cupy-cuda13x')))")
    done = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True)
    print((done.stdout + done.stderr).strip())
    if done.returncode != 0:
        print(f"the environment at {args.env} cannot grade (above); grading would fail in every runner")
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
