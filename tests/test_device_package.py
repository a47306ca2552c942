"""A kernel as data (grader/device/package.py): CPU-jitted helpers and numba.cuda.random's
generators reach the device process as numba-cuda compiles them (device functions)."""

import importlib
import json
import sys
import textwrap

import numpy as np

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
