"""A kernel as data (grader/device/package.py): CPU-jitted helpers and numba.cuda.random's
generators reach the device process as numba-cuda compiles them (device functions)."""

import importlib
import inspect
import json
import linecache
import sys
import textwrap

import numpy as np
import pytest

import grader.sim as sim
from grader.device import package

SOURCE = """
    import numba
    from numba import cuda
    from numba.cuda.random import xoroshiro128p_uniform_float32


    @numba.njit
    def twice(x):
        return 2 * x


    @cuda.jit
    def draw_twice(states, out):
        i = cuda.grid(1)
        out[i] = twice(xoroshiro128p_uniform_float32(states, i))
"""


def test_a_jit_helper_and_numbas_random_generators_pack_and_build(tmp_path, monkeypatch):
    (tmp_path / "student_draws.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    student = importlib.import_module("student_draws")
    try:
        packed = json.loads(json.dumps(package.pack(student.draw_twice)))
    finally:
        sys.modules.pop("student_draws", None)
    options = {spec["name"]: spec["options"] for spec in packed["functions"].values()}
    assert options["twice"]["device"] is True  # built as the device function numba-cuda makes
    kernel_values = next(s["values"] for s in packed["functions"].values() if s["name"] == "draw_twice")
    assert kernel_values["xoroshiro128p_uniform_float32"] == {
        "attribute": ["numba.cuda.random", "xoroshiro128p_uniform_float32"]}

    import numba.cuda
    import numba.cuda.random as nbrandom

    sim.install()
    try:
        kernel = package.Builder(numba.cuda).build(packed)
        states = nbrandom.create_xoroshiro128p_states(32, seed=1)
        reference = states.copy_to_host()
        out = np.zeros(32, np.float32)
        kernel[1, 32](states, out)
    finally:
        sim.uninstall()
    expected = [2 * nbrandom.xoroshiro128p_uniform_float32(reference, i) for i in range(32)]
    np.testing.assert_array_equal(out, np.array(expected, np.float32))


DECLARED = """
    from numba import cuda

    SCALE = 3.0


    @cuda.jit("float32(float32)", device=True)
    def scaled(x):
        return SCALE * x


    @cuda.jit("void(float32[:], float32[:])")
    def scale_all(xs, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = scaled(xs[i])
"""


def test_kernels_declared_with_signatures_build_after_their_globals(tmp_path, monkeypatch):
    # (numba-cuda types a kernel when its signature is compiled: its globals must be there by
    # then; a device function's signature is compiled with the kernel that calls it)
    (tmp_path / "student_declared.py").write_text(textwrap.dedent(DECLARED))
    monkeypatch.syspath_prepend(str(tmp_path))
    import numba.cuda

    sim.install()
    try:
        student = importlib.import_module("student_declared")
        packed = json.loads(json.dumps(package.pack(student.scale_all, sim.current().signatures.declared)))
        assert any(spec["signatures"] for spec in packed["functions"].values())
        compiled = []

        class Recording:  # numba.cuda as the Builder sees it, recording what is compiled and when
            def jit(self, *args, **options):
                make = numba.cuda.jit(*args, **options)

                def wrap(function):
                    dispatcher = make(function)
                    compile_now = dispatcher.compile

                    def compile(sig):
                        compiled.append((function.__name__, "scaled" in function.__globals__))
                        return compile_now(sig)

                    dispatcher.compile = compile
                    return dispatcher
                return wrap

        kernel = package.Builder(Recording()).build(packed)
        xs = np.arange(8, dtype=np.float32)
        out = np.zeros(8, np.float32)
        kernel[1, 8](xs, out)
    finally:
        sim.uninstall()
        sys.modules.pop("student_declared", None)
    np.testing.assert_array_equal(out, 3 * xs)
    assert compiled == [("scale_all", True)]  # with its globals; the device function never as a kernel


# -- a package is the runner's word: the text the simulator reads is the text a kernel was built from
HONEST = """\
from numba import cuda


@cuda.jit
def plus_one(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + 1.0
"""
WORKSPACE = "/workspace"


def _package(files: dict, name: str, line: int, file: str, package_id: str, values=None) -> dict:
    key = f"{file}:{line}:{name}"
    return {"kernel": key, "id": package_id, "files": files,
            "functions": {key: {"name": name, "file": file, "line": line, "options": {}, "signatures": [],
                                "values": values or {"cuda": {"module": "numba.cuda"}}}}}


def test_a_second_text_of_a_file_is_refused_not_run_in_the_device():
    """A kernel built from one text, then a package sending another text of its file: the
    simulator re-reads a kernel's source, so the second text's body (Python numba would never
    compile) ran in the device process, whose records decide the grade."""
    import numba.cuda

    file = f"{WORKSPACE}/ex.py"
    lying = HONEST.replace("a[i] + 1.0", "len(__import__('os').listdir('/'))") + \
        "\n\n@cuda.jit\ndef other(out):\n    out[0] = 1.0\n"
    sim.install(compile_check=True)
    try:
        builder = package.Builder(numba.cuda, WORKSPACE)
        kernel = builder.build(_package({file: HONEST}, "plus_one", 4, file, "honest"))
        with pytest.raises(package.NotPackable, match="ex.py.*another text"):
            builder.build(_package({file: lying}, "other", 11, file, "lying"))
        a, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
        kernel[1, 4](a, out)
    finally:
        sim.uninstall()
    np.testing.assert_array_equal(out, a + 1)


def test_a_file_outside_the_runners_workspace_is_refused():
    """numba's own source sent as a package's file: the simulator reads a library device
    function's source (numba.cuda.random's generators) from the device's linecache."""
    import numba.cuda
    import numba.cuda.random as nbrandom

    numbas = inspect.getsourcefile(nbrandom.xoroshiro128p_uniform_float32.py_func)
    file = f"{WORKSPACE}/ex.py"
    forged = "def xoroshiro128p_uniform_float32(states, index):\n    return 26.0\n"
    builder = package.Builder(numba.cuda, WORKSPACE)
    for outside in (numbas, f"{WORKSPACE}/../etc/ex.py"):
        with pytest.raises(package.NotPackable, match="outside"):
            builder.build(_package({file: HONEST, outside: forged}, "plus_one", 4, file, outside))
        assert linecache.getlines(outside) != forged.splitlines(keepends=True)


def test_only_the_texts_the_judge_read_in_the_workspace_are_built():
    """The first text sent of a file was the runner's word (its linecache is the student's to
    edit): with the judge's digests, a file's text must be the one in the workspace, and a file
    the workspace does not hold is refused."""
    import numba.cuda

    from grader.wire.digests import text_digest

    file = f"{WORKSPACE}/ex.py"
    builder = package.Builder(numba.cuda, WORKSPACE, {"ex.py": text_digest(HONEST)})
    edited = HONEST.replace("a[i] + 1.0", "a[i] + 2.0")
    with pytest.raises(package.NotPackable, match="another text than the submission's file"):
        builder.build(_package({file: edited}, "plus_one", 4, file, "edited"))
    made_up = f"{WORKSPACE}/made_up.py"
    with pytest.raises(package.NotPackable, match="made_up.py is none of the submission's files"):
        builder.build(_package({made_up: HONEST}, "plus_one", 4, made_up, "made up"))
    assert builder.build(_package({file: HONEST}, "plus_one", 4, file, "honest")) is not None
