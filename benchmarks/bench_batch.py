"""Batch grading throughput: one roster of 20 local git repositories, graded by the local pool at
1 and 2 jobs and by Dask on 2 local workers, side by side in one run; then a kill -9 midway and
the same command again, against the uninterrupted run's grades.csv.

The roster: 6 correct, 3 stubs, 6 known-wrong (tests/submissions/vector_add_*), one repository
that does not exist, one with a syntax error, one that loops forever, one hostile (a hook, and a
symlink where the module should be), one plain folder. The course is the vector_add exercise
alone (the 4-exercise course grades the same way, 10x longer per submission). Reports
submissions per minute and the overhead per submission beyond its tests (fetch, the judge's
start, the store), and checks every row.

    .venv/bin/python benchmarks/bench_batch.py [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GIT_ENV = {"GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.com", "GIT_COMMITTER_NAME": "s",
           "GIT_COMMITTER_EMAIL": "s@example.com", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def _repo(tmp: Path, name: str, files: dict[str, str], hook: str | None = None) -> Path:
    work, bare = tmp / "work" / name, tmp / "repos" / f"{name}.git"
    work.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=work)
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("->"):
            os.symlink(text[2:], work / path)
        else:
            (work / path).write_text(text)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "submission", cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp)
    if hook:
        for name_ in ("post-checkout", "post-merge", "reference-transaction"):
            (bare / "hooks" / name_).write_text(f"#!/bin/sh\necho ran > {hook}\n")
            (bare / "hooks" / name_).chmod(0o755)
    return bare


def build(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    """(course, roster, what each student's row must say)."""
    course = tmp / "course"
    (course / "tests" / "exercises").mkdir(parents=True)
    shutil.copy(ROOT / "course.toml", course)
    shutil.copy(ROOT / "tests" / "exercises" / "test_vector_add.py", course / "tests" / "exercises")
    for folder in ("solutions", "exercises"):
        (course / folder).mkdir()
        shutil.copy(ROOT / folder / "vector_add.py", course / folder)
    solution = (ROOT / "solutions" / "vector_add.py").read_text()
    stub = (ROOT / "exercises" / "vector_add.py").read_text()
    rows, expect = [], {}
    for i in range(6):
        rows.append((f"correct{i}", _repo(tmp, f"correct{i}", {"exercises/vector_add.py": solution})))
        expect[f"correct{i}"] = "full"
    for i in range(3):
        rows.append((f"stub{i}", _repo(tmp, f"stub{i}", {"vector_add.py": stub})))
        expect[f"stub{i}"] = "zero"
    wrong = sorted((ROOT / "tests" / "submissions").glob("vector_add_*/expected.json"))[:6]
    for path in wrong:
        text = solution
        for m in json.loads(path.read_text())["mutations"]:
            text = text.replace(m["old"], m["new"])
        name = path.parent.name.replace("vector_add_", "")[:40]
        rows.append((name, _repo(tmp, name, {"vector_add.py": text})))
        expect[name] = "partial"
    rows.append(("missing", tmp / "repos" / "never-pushed.git"))
    expect["missing"] = "error"
    rows.append(("syntax", _repo(tmp, "syntax", {"vector_add.py": solution.replace("def vector_add(", "def vector_add(:", 1)})))
    expect["syntax"] = "zero"
    rows.append(("loops", _repo(tmp, "loops", {"vector_add.py": solution.replace(
        "    d_a = cuda.to_device(a)\n", "    while True:\n        pass\n", 1)})))
    expect["loops"] = "partial"
    rows.append(("hostile", _repo(tmp, "hostile", {"vector_add.py": "->/etc/passwd"}, hook=str(tmp / "hook-ran"))))
    expect["hostile"] = "error"
    plain = tmp / "plain"
    plain.mkdir()
    (plain / "vector_add.py").write_text(solution)
    rows.append(("plain", plain))
    expect["plain"] = "full"
    roster = tmp / "roster.csv"
    roster.write_text("student_id,repo\n" + "".join(f"{s},{r}\n" for s, r in rows))
    return course, roster, expect


def _batch(course: Path, roster: Path, out: Path, *extra: str) -> float:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out), "--backend", "sim",
                           "--timeout", "10", "--submission-timeout", "60", *extra], cwd=course,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"batch failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started


def _rows(out: Path) -> dict[str, dict]:
    with open(out / "grades.csv", newline="") as f:
        return {r["student_id"]: r for r in csv.DictReader(f)}


def check(rows: dict[str, dict], expect: dict[str, str]) -> list[str]:
    wrong = []
    for student, kind in expect.items():
        row = rows.get(student)
        score, full = (float(row["score"]), float(row["max"])) if row and row["max"] else (0.0, 0.0)
        ok = row is not None and {"full": row["status"] == "graded" and score == full > 0,
                                  "zero": row["status"] == "graded" and score == 0,
                                  "partial": row["status"] == "graded" and 0 <= score < full,
                                  "error": row["status"] == "error" and bool(row["reason"])}[kind]
        if not ok:
            wrong.append(f"{student}: expected {kind}, got {row}")
    return wrong


def _stored(out: Path) -> int:
    try:
        with sqlite3.connect(out / "store.sqlite", timeout=5) as db:
            return db.execute("select count(*) from graded").fetchone()[0]
    except sqlite3.Error:
        return 0


def judged(out: Path) -> tuple[float, float]:
    """(median, total) seconds the judge spent in the graded submissions' tests (their results)."""
    from grader.batch.store import Store

    with Store(out / "store.sqlite") as store:
        rows = [r for r in store.latest(store.assignments()[0]) if r.results is not None]
    times = sorted(r.results.execution_time for r in rows)
    return times[len(times) // 2], sum(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gpugrade-bench-batch-"))
    course, roster, expect = build(tmp)
    n = len(expect)
    report = {"submissions": n}
    for label, extra in (("pool, 1 job", ("--jobs", "1")), ("pool, 2 jobs", ("--jobs", "2")),
                         ("dask, 2 workers", ("--dask", "local:2"))):
        out = tmp / label.replace(", ", "-").replace(" ", "")
        seconds = _batch(course, roster, out, *extra)
        wrong = check(_rows(out), expect)
        median, total = judged(out)
        report[label] = {"seconds": round(seconds, 1), "per_minute": round(n / seconds * 60, 2),
                         "median_judge_s": round(median, 2), "judge_total_s": round(total, 1), "wrong_rows": wrong}
        print(f"{label:>16}: {n} submissions in {seconds:6.1f} s = {n / seconds * 60:5.2f} per minute; "
              f"median judge time {median:.1f} s; rows wrong: {len(wrong)}", flush=True)
        for w in wrong:
            print("   ", w)
    # beyond the tests: the 1-job run's wall time that is not the judge's (fetch, the judge's own
    # start, the store, pages), per submission
    one = report["pool, 1 job"]
    report["overhead_per_submission_s"] = round((one["seconds"] - one["judge_total_s"]) / n, 2)
    print(f"overhead per submission beyond its tests (1 job): {report['overhead_per_submission_s']:.2f} s")
    # kill -9 midway, then the same command
    whole, killed = tmp / "pool-1job", tmp / "killed"
    batch = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(roster), "--out", str(killed), "--backend",
                              "sim", "--timeout", "10", "--submission-timeout", "60", "--jobs", "2"], cwd=course,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while _stored(killed) < n // 2 and batch.poll() is None:
        time.sleep(0.2)
    os.killpg(batch.pid, signal.SIGKILL)
    batch.wait()
    at_kill = _stored(killed)
    _batch(course, roster, killed, "--jobs", "2")
    keep = ("student_id", "score", "max", "status", "reason", "commit")
    same = {k: {c: v[c] for c in keep} for k, v in _rows(killed).items()} == \
        {k: {c: v[c] for c in keep} for k, v in _rows(whole).items()}
    report["kill9"] = {"stored_at_kill": at_kill, "same_csv": same, "hook_ran": (tmp / "hook-ran").exists()}
    print(f"kill -9 with {at_kill} of {n} stored, then the same command: grades.csv "
          f"{'identical to' if same else 'DIFFERENT from'} the uninterrupted run's; hook ran: "
          f"{(tmp / 'hook-ran').exists()}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    ok = same and not any(report[k]["wrong_rows"] for k in ("pool, 1 job", "pool, 2 jobs", "dask, 2 workers"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
