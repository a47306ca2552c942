"""The judge's settings, declared once: the pytest options of the plugin (`--gpugrade-<name>`),
what the plugin reads back, and the argv `grading.grade` passes to the judge all come from the
fields of `JudgeSettings`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from .. import perf_model
from ..backends import Kind
from ..sandbox import SANDBOXES, Limits, SandboxSpec


def _opt(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices})


def _argparse_kwargs(f) -> dict[str, Any]:
    """One field as an option, for pytest's parser and argparse alike."""
    if isinstance(f.default, bool):
        return {"action": "store_true", "default": f.default, "help": f.metadata["help"]}
    kwargs: dict[str, Any] = {"default": f.default, "help": f.metadata["help"]}
    if f.metadata["choices"]:
        kwargs["choices"] = list(f.metadata["choices"])
    if isinstance(f.default, float):
        kwargs["type"] = float
    return kwargs


@dataclass(frozen=True)
class JudgeSettings:
    workspace: str = _opt("", "folder holding the student's exercise modules")
    backend: str = _opt(Kind.SIM.value, "the backend the runners use", tuple(k.value for k in Kind))
    results: str = _opt("", "where to write the results JSON")
    submission: str = _opt("", "submission name shown in results")
    seed: str = _opt("", "hex seed for inputs (default: secret, random)")
    timeout: float = _opt(Limits.call_timeout_s, "wall-clock seconds allowed for one call into student code")
    sandbox: str = _opt(SandboxSpec.name, "how student code is confined: process (default: bubblewrap), docker "
                                          "(a container per runner), uid (a fresh uid per runner, where no "
                                          "namespace can be made: Gradescope), none (a plain subprocess: debugging)",
                        SANDBOXES)
    docker_image: str = _opt(SandboxSpec.docker_image, "--sandbox docker: the runner image "
                                                       "(docker/build-images.sh builds it)")
    gpus: str = _opt("", "--sandbox docker: GPUs for the runner ('all' or ids '0,1'); needed with --backend gpu")
    exercise_budget: float = _opt(0.0, "seconds of student code one exercise may use over all its calls "
                                       "(0: no budget)")
    simulator: str = _opt("device", "sim backend: the simulated GPU as a device process of its own, reporting "
                                    "to the judge (default), or inline in the runner (its records then come "
                                    "through the student's process: debugging and measuring only)",
                          ("device", "inline"))
    stock_simulator: bool = _opt(False, "gpu backend: runners on numba's stock simulator (NUMBA_ENABLE_CUDASIM=1) "
                                        "standing in for a GPU: the gpu code path without one, no real timing")
    stages: str = _opt("", "grade only these stages (comma-separated numbers)")
    only: str = _opt("", "run only the tests with this marker (perf: the performance tests)", ("", "perf"))
    model_gpu: str = _opt("", "the GPU preset the simulator's performance model times kernels on "
                              "(default: the course's model_gpu)", ("", *perf_model.presets()))
    reference: str = _opt("", "folder of reference solutions for performance tests (default: <rootdir>/solutions)")
    record_reference: str = _opt("", "write the reference's counters of every performance test to this JSON file")
    shared_reference: str = _opt("", "sim backend: a folder the judges of one run (validate, a batch) share the "
                                     "reference's counters in; a call another judge ran is read, not run again")

    @staticmethod
    def flag(name: str) -> str:
        return "--gpugrade-" + name.replace("_", "-")

    @classmethod
    def add_options(cls, group) -> None:
        """The plugin's pytest options, one per field."""
        for f in fields(cls):
            group.addoption(cls.flag(f.name), **_argparse_kwargs(f))

    @classmethod
    def add_cli_option(cls, parser, name: str, *aliases: str) -> None:
        """The same setting as an option of the `gpugrade` command (`--<name>`, and `aliases`):
        declared once here, offered by both front ends."""
        f = next(f for f in fields(cls) if f.name == name)
        parser.add_argument("--" + name.replace("_", "-"), *aliases, dest=name, **_argparse_kwargs(f))

    @classmethod
    def from_config(cls, config) -> "JudgeSettings":
        return cls(**{f.name: config.getoption("gpugrade_" + f.name) for f in fields(cls)})

    def argv(self) -> list[str]:
        """These settings as the judge's command line (the values that differ from the defaults)."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default and isinstance(value, bool):
                out.append(self.flag(f.name))
            elif value != f.default:
                out += [self.flag(f.name), f"{value:g}" if isinstance(value, float) else str(value)]
        return out
