"""`gpugrade validate`: the course grades itself.

Every reference solution must score full marks, every stub zero, and every known-wrong submission
must fail exactly the tests its expected.json lists (so it loses exactly their points). A
known-wrong submission is the reference solution with a bug put in: tests/submissions/<name>/
expected.json holds `mutations` ({file, old, new}: `old` occurs exactly once in solutions/<file>),
so it stays in step with the solution it breaks; a folder may also hold whole modules. The manifest must agree with the grading tests. `validate()` is a pure core
returning a `Validation`; `render()` makes the per-stage table the CLI prints.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .choice import submission_modules
from .tree import Course
from ..errors import CourseError
from ..grading import grade
from .manifest import find as find_manifest
from ..report.results import Results, Status
from ..report.text import first_line
from ..sandbox import SandboxSpec

SUBMISSIONS = Path("tests") / "submissions"


@dataclass
class KnownWrong:
    name: str
    why: str
    expected_failing: set[str]
    mutations: list[dict] = field(default_factory=list)
    folder: Path | None = None
    # tests that must fail with partial credit (a slower kernel): name -> (lowest, highest) fraction
    partial: dict[str, tuple[float, float]] = field(default_factory=dict)
    # what the feedback of a failing test must say: name -> the phrases its output must hold
    says: dict[str, list[str]] = field(default_factory=dict)
    results: Results | None = None

    def materialize(self, course: Course, dest: Path) -> Path:
        """Write the submission into `dest`: its own modules, then solutions/ with the mutations."""
        dest.mkdir(parents=True, exist_ok=True)
        for module in sorted(self.folder.glob("*.py")) if self.folder else []:
            shutil.copyfile(module, dest / module.name)
        texts: dict[str, str] = {}
        for m in self.mutations:
            text = texts.get(m["file"]) or (course.root / "solutions" / m["file"]).read_text()
            if text.count(m["old"]) != 1:
                raise CourseError(f"{self.name}: the mutation of {m['file']} must match exactly once in "
                                  f"solutions/{m['file']}, matches {text.count(m['old'])} times: {m['old'][:80]!r}")
            texts[m["file"]] = text.replace(m["old"], m["new"])
        for name, text in texts.items():
            (dest / name).write_text(text)
        return dest

    @property
    def failing(self) -> set[str]:
        return _failing(self.results) if self.results else set()

    def expected_credit(self, name: str) -> tuple[float, float]:
        """The (lowest, highest) fraction of its points test `name` must earn."""
        if name not in self.expected_failing:
            return 1.0, 1.0
        return self.partial.get(name, (0.0, 0.0))

    def as_expected(self, test) -> bool:
        low, high = self.expected_credit(test.name)
        credit = test.score / test.max_score if test.max_score else 1.0
        return low - 1e-9 <= credit <= high + 1e-9

    def expected_score(self, exercise: str | None = None, stage: int | None = None) -> float:
        """Full marks minus the points of exactly the tests that must fail; a partial-credit test
        within its range counts at what it earned (optionally: of one exercise, one stage)."""
        tests = [t for t in (self.results.tests if self.results else [])
                 if (exercise is None or t.exercise == exercise) and (stage is None or t.stage == stage)]
        kept = sum(t.max_score for t in tests if t.name not in self.expected_failing)
        kept += sum(t.score for t in tests if t.name in self.partial and self.as_expected(t))
        return round(kept, 6)


@dataclass
class Validation:
    reference: Results
    stubs: Results
    known_wrong: list[KnownWrong]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def load_known_wrong(course: Course) -> list[KnownWrong]:
    found = []
    for spec in sorted((course.root / SUBMISSIONS).glob("*/expected.json")):
        try:
            data = json.loads(spec.read_text())
            failing, mutations = data["failing"], data.get("mutations", [])
            partial = {str(k): (float(v[0]), float(v[1])) for k, v in data.get("partial", {}).items()}
            says = data.get("says", {})
            if not isinstance(says, dict) or not all(
                    isinstance(v, list) and v and all(isinstance(p, str) and p for p in v) for v in says.values()):
                raise TypeError("'says' must map test names to lists of phrases their feedback holds")
            if not set(partial) | set(says) <= set(failing):
                raise TypeError("every test in 'partial' and 'says' must be in 'failing' too")
            if not isinstance(failing, list) or not all(isinstance(n, str) for n in failing):
                raise TypeError("'failing' must be a list of test names")
            if not isinstance(mutations, list) or not all(
                    isinstance(m, dict) and all(isinstance(m.get(k), str) for k in ("file", "old", "new"))
                    for m in mutations):
                raise TypeError("'mutations' must be a list of {file, old, new} strings")
        except (ValueError, KeyError, TypeError) as exc:
            raise CourseError(f"{spec}: {exc}") from None
        found.append(KnownWrong(spec.parent.name, str(data.get("why", "")), set(failing), mutations, spec.parent,
                                partial=partial, says={str(k): list(v) for k, v in says.items()}))
    return found


def _check_manifest(course: Course, reference: Results) -> list[str]:
    problems = []
    manifest = find_manifest(course.root)
    for exercise in course.exercises():
        stages = {t.stage for t in reference.tests if t.exercise == exercise}
        if exercise not in manifest.exercises:
            problems.append(f"course.toml has no exercise {exercise!r} (tests/exercises/test_{exercise}.py does)")
            continue
        declared = set(range(1, len(manifest.exercise(exercise).stages) + 1))
        if stages != declared:
            problems.append(f"{exercise}: the tests grade stages {sorted(stages)}, course.toml declares "
                            f"{sorted(declared)}")
    for exercise in manifest.exercises:
        if exercise not in course.exercises():
            problems.append(f"course.toml lists {exercise!r} but there is no tests/exercises/test_{exercise}.py")
    return problems


def validate(course: Course | None = None, *, backend: str = "sim", seed: str = "", jobs: int | None = None,
             timeout: float | None = None, sandbox: SandboxSpec = SandboxSpec(),
             progress: Callable[[str], None] | None = None, only: list[str] | None = None) -> Validation:
    """Grade the references, the stubs and every known-wrong submission; collect every problem.
    `progress(line)`: told of each grade as it ends (a run stopped at a time limit still says
    what it found). `only`: these known-wrong submissions alone, started in this order (the
    submission just edited; on a GPU, where each grade's timings take turns, those that matter
    first)."""
    course = course or Course.find()
    wrong = _chosen(load_known_wrong(course), only)
    exercises = course.exercises()
    jobs = jobs or min(4, os.cpu_count() or 1)

    with ThreadPoolExecutor(max_workers=jobs) as pool, tempfile.TemporaryDirectory(prefix="gpugrade-validate-") as tmp:
        # the reference's counters, shared: each performance test's reference call runs once, not per grade
        shared = Path(tmp) / "reference"
        shared.mkdir(mode=0o700)

        def run(folder: Path, chosen: list[str] | None, name: str) -> Results:
            return grade(folder, chosen, backend=backend, course=course, seed=seed, timeout=timeout, name=name,
                         sandbox=sandbox, shared_reference=shared)

        reference = pool.submit(run, course.root / "solutions", None, "reference solutions")
        stubs = pool.submit(run, course.root / "exercises", None, "stubs")
        pending = []
        for kw in wrong:
            folder = kw.materialize(course, Path(tmp) / kw.name)
            chosen = sorted(submission_modules(folder, exercises))
            pending.append((kw, pool.submit(run, folder, chosen, kw.name) if chosen else None))
        if progress is not None:
            named = {reference: ("reference solutions", None), stubs: ("stubs", None)}
            named.update({future: (kw.name, kw) for kw, future in pending if future is not None})
            for future in as_completed(named):
                progress(_finished(*named[future], future))
        for kw, future in pending:
            kw.results = future.result() if future else None
        v = Validation(reference.result(), stubs.result(), wrong)

    for label, results in (("reference solutions", v.reference), ("stubs", v.stubs)):
        v.problems += [f"{label}: grader error: {e.strip().splitlines()[0] if e.strip() else e}"
                       for e in results.errors]
    v.problems += [f"reference solutions: {t.name} failed: {t.output.strip().splitlines()[0] if t.output else ''}"
                   for t in v.reference.tests if t.status != Status.PASSED]
    if v.stubs.score != 0:
        passed = [t.name for t in v.stubs.tests if t.score]
        v.problems.append(f"stubs score {v.stubs.score:g}, not 0 (passing: {', '.join(passed)})")
    names = {t.name for t in v.reference.tests}
    for kw in wrong:
        if kw.results is None:
            v.problems.append(f"{kw.name}: holds no exercise module")
            continue
        v.problems += [f"{kw.name}: grader error: {e.strip().splitlines()[0]}" for e in kw.results.errors if e.strip()]
        unknown = kw.expected_failing - names
        if unknown:
            v.problems.append(f"{kw.name}: expected.json names tests that do not exist: {sorted(unknown)}")
        if kw.failing != kw.expected_failing:
            extra, missing = sorted(kw.failing - kw.expected_failing), sorted(kw.expected_failing - kw.failing)
            detail = "; ".join(part for part in (f"also failed {extra}" if extra else "",
                                                 f"did not fail {missing}" if missing else "") if part)
            v.problems.append(f"{kw.name}: scored {kw.results.score:g}, expected {kw.expected_score():g} ({detail})")
        for t in kw.results.tests:
            if not kw.as_expected(t):
                low, high = kw.expected_credit(t.name)
                credit = t.score / t.max_score if t.max_score else 1.0
                why = first_line(t.output)
                v.problems.append(f"{kw.name}: {t.name} earned {credit:.0%} of its points, expected "
                                  f"{low:.0%}" + (f" to {high:.0%}" if high != low else "") + (f": {why}" if why else ""))
            unsaid = [phrase for phrase in kw.says.get(t.name, []) if phrase not in (t.output or "")]
            if unsaid:
                v.problems.append(f"{kw.name}: {t.name}'s feedback does not say {unsaid[0]!r}: "
                                  f"{first_line(t.output) or '(no output)'}")
    try:
        v.problems += _check_manifest(course, v.reference)
    except CourseError as exc:
        v.problems.append(str(exc))
    return v


def _chosen(wrong: list[KnownWrong], only: list[str] | None) -> list[KnownWrong]:
    if only is None:
        return wrong
    by_name = {kw.name: kw for kw in wrong}
    unknown = [name for name in only if name not in by_name]
    if unknown:
        raise CourseError(f"no known-wrong submission {', '.join(map(repr, unknown))} in {SUBMISSIONS} "
                          f"(there are: {', '.join(sorted(by_name))})")
    return [by_name[name] for name in dict.fromkeys(only)]


def _finished(name: str, kw: KnownWrong | None, future) -> str:
    """One line on a grade that ended: its score and, for a known-wrong submission, whether it
    failed what it should."""
    try:
        results = future.result()
    except Exception as exc:  # (validate() raises it again, in its place)
        return f"validate: {name}: the grade failed: {exc}"
    line = f"validate: {name}: {_num(results.score)}/{_num(results.max_score)}"
    if results.errors:
        line += f", {len(results.errors)} grader error(s)"
    if kw is not None:
        failing = _failing(results)
        line += " (failed what it should)" if failing == kw.expected_failing else \
            f" (expected to fail {sorted(kw.expected_failing)}, failed {sorted(failing)})"
    return line


def _failing(results: Results) -> set[str]:
    """The tests a grade failed (by name)."""
    return {t.name for t in results.tests if t.status == Status.FAILED}


def _num(x: float) -> str:
    return f"{x:g}"


def render(v: Validation, width: int = 120) -> str:
    """Per stage: points, the reference's, the stubs' and each known-wrong submission's score."""
    console = Console(file=StringIO(), width=width, record=True, force_terminal=False)
    grid = Table(title=f"course validation  [{v.reference.backend} backend]")
    for column, justify in (("stage", "left"), ("points", "right"), ("reference", "right"), ("stub", "right"),
                            ("known-wrong (score / expected)", "left")):
        grid.add_column(column, justify=justify, overflow="fold")
    for exercise in v.reference.exercises():
        for stage in sorted({t.stage for t in v.reference.tests if t.exercise == exercise}):
            ref, out_of = v.reference.subtotal(exercise, stage)
            stub, _ = v.stubs.subtotal(exercise, stage)
            cells = []
            for kw in v.known_wrong:
                if kw.results is None or not any(t.exercise == exercise and t.stage == stage
                                                 for t in kw.results.tests):
                    continue
                got, _ = kw.results.subtotal(exercise, stage)
                want = kw.expected_score(exercise, stage)
                if got == out_of and want == out_of:
                    continue  # this submission does not target this stage
                style = "green" if kw.failing == kw.expected_failing else "red"
                cells.append(Text(f"{kw.name} {_num(got)} / {_num(want)}", style=style))
            grid.add_row(f"{exercise} {stage}", _num(out_of),
                         Text(_num(ref), style="green" if ref == out_of else "red"),
                         Text(_num(stub), style="green" if stub == 0 else "red"),
                         Text("\n").join(cells) if cells else "")
    console.print(grid)
    honest = [kw for kw in v.known_wrong if not kw.expected_failing and kw.results is not None]
    if honest:  # submissions that must keep every point (an honest way the grader once refused)
        console.print(Text("honest, every point kept: ") + Text(", ").join(
            Text(f"{kw.name} {_num(kw.results.score)} / {_num(kw.results.max_score)}",
                 style="green" if not kw.failing else "red") for kw in honest))
    for problem in v.problems:
        console.print(Text(f"problem: {problem}", style="bold red"))
    console.print("validate: ok" if v.ok else f"validate: {len(v.problems)} problem(s)")
    return console.export_text()
