"""The course manifest (`course.toml` at the course root): exercise content as data.

Per exercise an ordered list of stages; each stage has a title, the student's host function the
grading tests call, three progressive hints, the simulator criteria of its performance test
(ratios to the reference solution's launch counters) and the real-GPU time threshold. Points stay
in the tests (`@pytest.mark.points`). Everything is validated on load: a mistake in the manifest
is a `CourseError` that names the file and the entry, never a KeyError in the middle of a grade.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..errors import CourseError
from ..judge.policy import DEFAULT_ALLOWED_IMPORTS

MANIFEST = "course.toml"
HINTS_PER_STAGE = 3

# Launch-record counters a criterion may name (docs/SIMULATOR_DESIGN.md, "LaunchRecord").
COUNTERS = frozenset({
    "global_loads", "global_stores", "global_load_requests", "global_store_requests",
    "global_load_sectors", "global_store_sectors", "sectors_per_request", "max_global_loads_per_thread",
    "max_global_stores_per_thread", "shared_loads", "shared_stores", "shared_requests",
    "bank_conflict_wavefronts", "wavefronts_per_shared_request", "atomics", "barriers", "warp_ops",
    "threads_launched", "atomic_same_address",
})


@dataclass(frozen=True)
class Criterion:
    """One simulator counter compared with the reference's on the same input."""
    counter: str
    label: str
    max_ratio: float | None = None   # student <= max_ratio * reference + slack
    min_ratio: float | None = None   # student >= min_ratio * reference
    slack: float = 0.0
    # "warp" ("block"): the counter per warp (block) launched, on both sides (one atomic per warp
    # is the idea, whatever the block size: 512 threads a block launch more warps than the
    # reference's 256)
    per: str | None = None

    def describe(self) -> str:
        if self.max_ratio is not None:
            return f"{self.label}: at most {self.max_ratio:g}x the reference"
        return f"{self.label}: at least {self.min_ratio:g}x the reference"


@dataclass(frozen=True)
class GpuThreshold:
    """The speed verdict: the student's time against the baseline's (measured on a GPU, same GPU,
    same run; modelled on the simulator). Full credit at time ratio <= max_time_ratio (plus the
    noise margin, so a borderline kernel does not flip between runs), linear down to none at
    zero_time_ratio."""
    baseline: str
    max_time_ratio: float
    zero_time_ratio: float = 0.0   # 0: twice max_time_ratio
    noise_margin: float = 0.05
    model_gpu: str = "H100"        # the preset the simulator models the times on ([course] model_gpu)

    def credit(self, ratio: float) -> float:
        """The fraction of the points a time ratio (student / baseline) earns."""
        full = self.max_time_ratio * (1 + self.noise_margin)
        zero = self.zero_time_ratio or 2 * self.max_time_ratio
        if ratio <= full:
            return 1.0
        if ratio >= zero:
            return 0.0
        return round((zero - ratio) / (zero - full), 3)


# What a failure is about, as hints name it (grader.course.hints.failure_kind tells them apart):
# the simulator's checkers, and what a message says.
FAILURE_KINDS = frozenset({"races", "bounds", "uninitialised", "barriers", "warps", "deadlock", "devices",
                           "streams", "compile", "uncoalesced", "extra_accesses", "bank_conflicts", "float64",
                           "atomics", "stub",
                           "wrong_answer", "traffic", "slow"})


@dataclass(frozen=True)
class Stage:
    exercise: str
    number: int
    title: str
    function: str
    hints: tuple[str, ...]
    criteria: tuple[Criterion, ...]
    gpu: GpuThreshold
    # per hint, the failure kinds it answers (grader.course.hints.FAILURE_KINDS); () for any
    hint_kinds: tuple[tuple[str, ...], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.exercise}:{self.number}"


@dataclass(frozen=True)
class Exercise:
    name: str
    title: str
    stages: tuple[Stage, ...]

    def stage(self, number: int) -> Stage:
        if not 1 <= number <= len(self.stages):
            raise CourseError(f"exercise {self.name!r} has stages 1..{len(self.stages)}, not {number}")
        return self.stages[number - 1]


@dataclass(frozen=True)
class Manifest:
    title: str
    exercises: dict[str, Exercise]
    path: str = MANIFEST
    # modules student code may import beyond grader.judge.policy's defaults ([course] allow_imports)
    allow_imports: tuple[str, ...] = ()
    # the GPU the simulator's performance model times kernels on ([course] model_gpu; gpus.toml)
    model_gpu: str = "H100"

    def exercise(self, name: str) -> Exercise:
        try:
            return self.exercises[name]
        except KeyError:
            known = ", ".join(self.exercises) or "none"
            raise CourseError(f"{self.path}: no exercise {name!r} (it has: {known})") from None

    def stage(self, exercise: str, number: int) -> Stage:
        return self.exercise(exercise).stage(number)

    def imports_allowed(self) -> frozenset[str]:
        """The static policy's import allowlist: the defaults, widened by `[course] allow_imports`."""
        return DEFAULT_ALLOWED_IMPORTS | frozenset(self.allow_imports)


# -- loading ------------------------------------------------------------------------------------
def load(path: str | os.PathLike) -> Manifest:
    """Read and validate a manifest file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CourseError(f"no course manifest: {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise CourseError(f"{path}: not valid TOML: {exc}") from None
    return parse(data, str(path))


def find(course_root: str | os.PathLike) -> Manifest:
    """The manifest of the course rooted at `course_root`."""
    return load(Path(course_root) / MANIFEST)


class _Reader:
    """Typed access to one TOML table; every error names the file and the entry."""

    def __init__(self, table: Any, where: str, source: str):
        if not isinstance(table, dict):
            raise CourseError(f"{source}: {where} must be a table")
        self.table, self.where, self.source = table, where, source
        self.used: set[str] = set()

    def fail(self, message: str) -> CourseError:
        return CourseError(f"{self.source}: {self.where}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        self.used.add(key)
        if key not in self.table:
            if default is ...:
                raise self.fail(f"missing {key!r}")
            return default
        value = self.table[key]
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(f"{key!r} must be {names}, not {type(value).__name__}")
        return value

    def text(self, key: str) -> str:
        value = self.get(key, str).strip()
        if not value:
            raise self.fail(f"{key!r} is empty")
        return value

    def number(self, key: str, default: Any = ...) -> float | None:
        value = self.get(key, (int, float), default)
        if value is None:
            return None
        value = float(value)
        if not math.isfinite(value) or value < 0:
            raise self.fail(f"{key!r} must be a finite number >= 0, not {value}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise self.fail(f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}")


def parse(data: dict, source: str = MANIFEST) -> Manifest:
    """Build the manifest model from parsed TOML, validating everything."""
    top = _Reader(data, "top level", source)
    course = _Reader(top.get("course", dict, {}), "[course]", source)
    title = course.get("title", str, "")
    allow = course.get("allow_imports", list, [])
    if not all(isinstance(m, str) and m.replace(".", "_").isidentifier() for m in allow):
        raise course.fail("'allow_imports' must be a list of module names")
    model_gpu = course.get("model_gpu", str, "H100")
    from ..perf_model import presets

    if model_gpu not in presets():
        raise course.fail(f"model_gpu {model_gpu!r} is not a GPU preset ({', '.join(presets())})")
    course.done()
    exercises_table = top.get("exercises", dict)
    top.done()
    exercises = {}
    for name, table in exercises_table.items():
        if not name.isidentifier():
            raise CourseError(f"{source}: exercise name {name!r} must be a Python module name")
        exercise = _exercise(name, _Reader(table, f"exercises.{name}", source))
        exercises[name] = replace(exercise, stages=tuple(replace(st, gpu=replace(st.gpu, model_gpu=model_gpu))
                                                         for st in exercise.stages))
    if not exercises:
        raise CourseError(f"{source}: no exercises")
    return Manifest(title=title, exercises=exercises, path=source, allow_imports=tuple(allow),
                    model_gpu=model_gpu)


def _exercise(name: str, r: _Reader) -> Exercise:
    title = r.text("title")
    stage_tables = r.get("stages", list)
    r.done()
    if not stage_tables:
        raise r.fail("no stages")
    stages = tuple(_stage(name, number, _Reader(t, f"{r.where}.stages[{number}]", r.source))
                   for number, t in enumerate(stage_tables, start=1))
    functions = [s.function for s in stages]
    if len(set(functions)) != len(functions):
        raise r.fail(f"two stages name the same function: {functions}")
    return Exercise(name=name, title=title, stages=stages)


def _stage(exercise: str, number: int, r: _Reader) -> Stage:
    title = r.text("title")
    function = r.text("function")
    if not function.isidentifier():
        raise r.fail(f"function {function!r} is not a Python name")
    hints, kinds = [], []
    for h in r.get("hints", list):  # a string, or {text = "...", kinds = ["races", ...]}
        if isinstance(h, dict) and set(h) <= {"text", "kinds"} and isinstance(h.get("text"), str) \
                and isinstance(h.get("kinds", []), list):
            unknown = [k for k in h.get("kinds", []) if k not in FAILURE_KINDS]
            if unknown:
                raise r.fail(f"hint kinds {unknown} unknown; known: {', '.join(sorted(FAILURE_KINDS))}")
            hints.append(h["text"])
            kinds.append(tuple(h.get("kinds", [])))
        else:
            hints.append(h)
            kinds.append(())
    if len(hints) != HINTS_PER_STAGE or not all(isinstance(h, str) and h.strip() for h in hints):
        raise r.fail(f"'hints' must be {HINTS_PER_STAGE} non-empty strings (or {{text, kinds}} tables), "
                     f"from gentle to explicit")
    criteria = tuple(_criterion(_Reader(t, f"{r.where}.criteria[{i}]", r.source))
                     for i, t in enumerate(r.get("criteria", list, []), start=1))
    counters = [c.counter for c in criteria]
    if len(set(counters)) != len(counters):
        raise r.fail(f"a counter appears in two criteria: {counters}")
    gpu = _Reader(r.get("gpu", dict), f"{r.where}.gpu", r.source)
    threshold = GpuThreshold(baseline=gpu.text("baseline"), max_time_ratio=gpu.number("max_time_ratio"),
                             zero_time_ratio=gpu.number("zero_time_ratio", 0.0),
                             noise_margin=gpu.number("noise_margin", 0.05))
    gpu.done()
    if threshold.max_time_ratio <= 0:
        raise gpu.fail("'max_time_ratio' must be > 0")
    if threshold.zero_time_ratio and threshold.zero_time_ratio <= threshold.max_time_ratio * (1 + threshold.noise_margin):
        raise gpu.fail("'zero_time_ratio' must be above max_time_ratio (with its noise margin)")
    r.done()
    return Stage(exercise=exercise, number=number, title=title, function=function,
                 hints=tuple(h.strip() for h in hints), criteria=criteria, gpu=threshold, hint_kinds=tuple(kinds))


def _criterion(r: _Reader) -> Criterion:
    counter = r.text("counter")
    if counter not in COUNTERS:
        raise r.fail(f"unknown counter {counter!r} (known: {', '.join(sorted(COUNTERS))})")
    label = r.get("label", str, counter)
    max_ratio, min_ratio = r.number("max_ratio", None), r.number("min_ratio", None)
    slack = r.number("slack", 0.0)
    per = r.get("per", str, None)
    r.done()
    if (max_ratio is None) == (min_ratio is None):
        raise r.fail("give exactly one of 'max_ratio' and 'min_ratio'")
    if (max_ratio if max_ratio is not None else min_ratio) <= 0:
        raise r.fail("the ratio must be > 0")
    if per not in (None, "warp", "block"):
        raise r.fail(f"'per' must be \"warp\" or \"block\" (the counter per warp or block launched), not {per!r}")
    return Criterion(counter=counter, label=label, max_ratio=max_ratio, min_ratio=min_ratio, slack=slack, per=per)
