"""Submissions of a class: the roster CSV, and each student's files fetched from a folder or from
real git repositories made here (bare "server" repositories, pushed to from a work clone, with
controlled commit dates), including hostile ones: hooks, a .gitattributes filter, symlinks, a
huge file, a huge repository, one that does not exist, a server that never answers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from grader.batch.roster import Entry, read_roster, split_ref
from grader.batch.submissions import FetchLimits, fetch
from grader.errors import RosterError, UsageError

EXERCISES = ["vector_add", "matmul", "reduce"]
MAY = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
# The repositories are made with git isolated from this machine's config.
ISOLATED = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Student",
            "GIT_AUTHOR_EMAIL": "s@example.org", "GIT_COMMITTER_NAME": "Student",
            "GIT_COMMITTER_EMAIL": "s@example.org"}


def git(*args, cwd=None, env=None) -> str:
    full = {**os.environ, **ISOLATED, **(env or {})}
    return subprocess.run(["git", *args], cwd=cwd, env=full, check=True, capture_output=True,
                          text=True).stdout.strip()


class Student:
    """A student's bare repository (the server's copy) and the work clone they commit in."""

    def __init__(self, root: Path):
        self.bare, self.work = root / "origin.git", root / "work"
        git("init", "-q", "--bare", "-b", "main", str(self.bare))
        git("init", "-q", "-b", "main", str(self.work))

    def commit(self, files: dict[str, str | bytes], when: datetime = MAY, links: dict[str, str] = {}) -> str:
        for rel, content in files.items():
            path = self.work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        for rel, target in links.items():
            (self.work / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, self.work / rel)
        stamp = when.isoformat()
        git("add", ".", cwd=self.work)
        git("commit", "-q", "-m", f"work of {stamp}", cwd=self.work,
            env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
        return git("rev-parse", "HEAD", cwd=self.work)

    def push(self) -> None:
        git("push", "-q", str(self.bare), "--all", cwd=self.work)
        git("push", "-q", str(self.bare), "--tags", cwd=self.work)


@pytest.fixture
def student(tmp_path) -> Student:
    return Student(tmp_path / "alice")


def entry(repo, ref=None) -> Entry:
    return Entry("alice", str(repo), ref, 2)


def taken(fetched) -> dict[str, str]:
    """The files fetched, by their path in the submission folder."""
    assert fetched.problem is None, fetched.problem
    return {p.relative_to(fetched.folder).as_posix(): p.read_text()
            for p in sorted(fetched.folder.rglob("*")) if p.is_file()}


# ---- git repositories: what is taken ------------------------------------------------------------

def test_only_the_exercise_modules_are_taken_from_a_bare_repository(student, tmp_path):
    sha = student.commit({"exercises/vector_add.py": "V = 1\n", "matmul.py": "M = 1\n", "notes.txt": "no",
                          "exercises/helper.py": "H = 1\n"})
    student.push()
    got = fetch(entry(student.bare), EXERCISES, tmp_path / "out")
    assert taken(got) == {"matmul.py": "M = 1\n", "exercises/vector_add.py": "V = 1\n"}
    assert got.folder == tmp_path / "out" and got.commit == sha and got.missing == ["reduce"]
    assert got.committed_at == MAY and got.committed_at.tzinfo is not None


def test_a_work_tree_and_a_file_url_are_repositories_too_and_uncommitted_files_are_not_taken(student, tmp_path):
    sha = student.commit({"vector_add.py": "V = 1\n"})
    student.push()
    (student.work / "matmul.py").write_text("uncommitted\n")
    for repo in (student.work, student.bare.as_uri()):
        got = fetch(entry(repo), EXERCISES, tmp_path / "out")
        assert taken(got) == {"vector_add.py": "V = 1\n"} and got.commit == sha


def test_both_copies_are_taken_for_grading_to_choose_the_one_worked_in(student, tmp_path):
    # (a released stub at the top beside the work under exercises/: grading chooses, course.choice)
    student.commit({"vector_add.py": "top\n", "exercises/vector_add.py": "nested\n"})
    assert taken(fetch(entry(student.work), ["vector_add"], tmp_path / "out")) == {
        "vector_add.py": "top\n", "exercises/vector_add.py": "nested\n"}
    # a link beside the file itself is left out, not a refusal of the submission
    (student.work / "exercises" / "vector_add.py").unlink()
    student.commit({}, links={"exercises/vector_add.py": "../vector_add.py"})
    assert taken(fetch(entry(student.work), ["vector_add"], tmp_path / "out")) == {"vector_add.py": "top\n"}


def test_dest_is_replaced_not_merged(student, tmp_path):
    student.commit({"vector_add.py": "V = 1\n"})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.py").write_text("old")
    assert taken(fetch(entry(student.work), EXERCISES, tmp_path / "out")) == {"vector_add.py": "V = 1\n"}


# ---- refs and the deadline ------------------------------------------------------------------------

def test_branch_tags_and_commit_ids(student, tmp_path):
    first = student.commit({"vector_add.py": "first\n"})
    git("tag", "v1", cwd=student.work)
    second = student.commit({"vector_add.py": "second\n"}, MAY + timedelta(days=1))
    git("tag", "-a", "v2", "-m", "graded", cwd=student.work)
    git("checkout", "-q", "-b", "late", first, cwd=student.work)
    late = student.commit({"vector_add.py": "late\n"}, MAY + timedelta(days=2))
    git("checkout", "-q", "main", cwd=student.work)
    third = student.commit({"vector_add.py": "third\n"}, MAY + timedelta(days=3))
    student.push()
    cases = {None: third, "main": third, "late": late, "v1": first, "v2": second,
             first: first, first[:10]: first, second: second}
    for ref, sha in cases.items():
        got = fetch(entry(student.bare, ref), ["vector_add"], tmp_path / "out")
        assert got.commit == sha, ref
        assert got.problem is None and (got.folder / "vector_add.py").read_bytes() == git(
            "show", f"{sha}:vector_add.py", cwd=student.work).encode() + b"\n"


def test_a_ref_that_is_not_there_and_an_empty_repository(student, tmp_path):
    student.commit({"vector_add.py": "V\n"})
    student.push()
    got = fetch(entry(student.bare, "nope"), EXERCISES, tmp_path / "out")
    assert got.folder is None and got.problem == f"no branch, tag or commit nope in {student.bare}"
    got = fetch(entry(student.bare, "deadbeef"), EXERCISES, tmp_path / "out")
    assert got.problem == f"no commit deadbeef in the last 200 commits of the branches of {student.bare}"
    empty = Student(tmp_path / "bob")
    assert fetch(entry(empty.bare), EXERCISES, tmp_path / "out").problem == \
        f"{empty.bare} has no commits on its default branch"


def test_the_repo_at_ref_of_a_roster_is_fetched(student, tmp_path):
    first = student.commit({"vector_add.py": "first\n"})
    git("tag", "v1.0", cwd=student.work)
    student.commit({"vector_add.py": "second\n"}, MAY + timedelta(days=1))
    student.push()
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student_id,repo\nalice,{student.bare}@v1.0\nbob,alice/origin.git\n")
    alice, bob = read_roster(roster)
    assert (alice.repo, alice.ref) == (str(student.bare), "v1.0") and bob.repo == str(student.bare)
    assert fetch(alice, ["vector_add"], tmp_path / "a").commit == first
    assert taken(fetch(bob, ["vector_add"], tmp_path / "b")) == {"vector_add.py": "second\n"}


def test_the_deadline_picks_the_last_commit_at_or_before_it_by_committer_date(student, tmp_path):
    days = [student.commit({"vector_add.py": f"day {d}\n"}, MAY + timedelta(days=d)) for d in (0, 2, 4)]
    student.push()
    out = tmp_path / "out"
    chosen = fetch(entry(student.bare), EXERCISES, out, deadline=MAY + timedelta(days=3))
    assert (chosen.commit, chosen.later) == (days[1], 1)  # (audit) the later commit left out is counted
    assert fetch(entry(student.bare), EXERCISES, out, deadline=MAY + timedelta(days=1)).later == 2
    assert fetch(entry(student.bare), EXERCISES, out).later == 0  # no deadline: the newest, nothing left out
    assert taken(fetch(entry(student.bare), EXERCISES, out, deadline=MAY + timedelta(days=3))) == \
        {"vector_add.py": "day 2\n"}
    at = fetch(entry(student.bare), EXERCISES, out, deadline=MAY + timedelta(days=2))  # exactly: included
    assert at.commit == days[1] and at.committed_at == MAY + timedelta(days=2)
    later = datetime(2024, 5, 5, 14, 0, tzinfo=timezone(timedelta(hours=2)))  # 12:00 UTC: the last commit
    newest = fetch(entry(student.bare), EXERCISES, out, deadline=later)
    assert (newest.commit, newest.later) == (days[2], 0)
    assert fetch(entry(student.bare, "main"), EXERCISES, out, deadline=MAY + timedelta(days=9)).commit == days[2]
    none = fetch(entry(student.bare), EXERCISES, out, deadline=MAY - timedelta(hours=1))
    assert none.folder is None and none.commit is None
    assert none.problem == ("no commit before the deadline 2024-05-01T11:00:00+00:00 on the default branch"
                            f" of {student.bare}")


def test_the_deadline_history_is_bounded(student, tmp_path):
    for d in (0, 2, 4):
        student.commit({"vector_add.py": f"day {d}\n"}, MAY + timedelta(days=d))
    got = fetch(entry(student.work), EXERCISES, tmp_path / "out", deadline=MAY + timedelta(days=1),
                limits=FetchLimits(history_depth=2, deeper_history_depth=2))
    assert got.problem.endswith("of %s among its last 2 commits" % student.work)
    # the deadline older than the last commits fetched: once more, further back (the audit: one on-time
    # commit and 205 late ones were "no commit before the deadline ... among its last 200 commits")
    got = fetch(entry(student.work), EXERCISES, tmp_path / "out", deadline=MAY + timedelta(days=1),
                limits=FetchLimits(history_depth=2, deeper_history_depth=3))
    assert got.problem is None and taken(got) == {"vector_add.py": "day 0\n"}
    got = fetch(entry(student.work), EXERCISES, tmp_path / "out", deadline=MAY - timedelta(days=1),
                limits=FetchLimits(history_depth=2, deeper_history_depth=3))
    assert got.problem.startswith("no commit before the deadline") and got.problem.endswith("its last 3 commits")


def test_a_naive_deadline_or_an_unsafe_exercise_name_is_a_programming_error(student, tmp_path):
    with pytest.raises(ValueError, match="timezone-aware"):
        fetch(entry(student.bare), EXERCISES, tmp_path / "out", deadline=datetime(2024, 5, 1))
    with pytest.raises(ValueError, match="unsafe exercise name"):
        fetch(entry(student.bare), ["../x"], tmp_path / "out")


# ---- hostile repositories ---------------------------------------------------------------------------

def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_no_hook_ever_runs_neither_the_students_nor_the_machines(student, tmp_path, monkeypatch):
    marker = tmp_path / "outside" / "hooked"
    student.commit({"vector_add.py": "V\n"})
    student.push()
    events = ("post-checkout", "post-merge", "post-rewrite", "reference-transaction", "pre-auto-gc",
              "post-index-change", "fsmonitor-watchman")
    for folder in (student.bare / "hooks", student.work / ".git" / "hooks", tmp_path / "machine-hooks"):
        for event in events:
            _script(folder / event, f"mkdir -p {marker.parent}; echo {event} >> {marker}")
    git("config", "core.fsmonitor", str(student.bare / "hooks" / "post-checkout"), cwd=student.bare)
    git("config", "uploadpack.packObjectsHook", str(student.bare / "hooks" / "post-checkout"), cwd=student.bare)
    config = tmp_path / "machine.gitconfig"
    config.write_text(f"[core]\n\thooksPath = {tmp_path / 'machine-hooks'}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))  # an instructor's own config with hooks
    # the control: an ordinary clone on this machine does run the hooks
    subprocess.run(["git", "clone", "-q", str(student.bare), str(tmp_path / "plain")], check=True)
    assert marker.is_file()
    marker.unlink()
    for repo in (student.bare, student.work):
        assert taken(fetch(entry(repo), EXERCISES, tmp_path / "out")) == {"vector_add.py": "V\n"}
    assert not marker.exists()


def test_no_gitattributes_filter_ever_runs(student, tmp_path, monkeypatch):
    marker = tmp_path / "outside" / "smudged"
    smudge = _script(tmp_path / "smudge.sh", f"mkdir -p {marker.parent}; touch {marker}; echo SMUDGED")
    student.commit({".gitattributes": "*.py filter=evil\n", "exercises/vector_add.py": "V = 1\n"})
    filter_config = f"[filter \"evil\"]\n\tsmudge = {smudge}\n\trequired = true\n"
    with open(student.work / ".git" / "config", "a") as f:
        f.write(filter_config)  # the student's own config: never transferred by git
    with open(student.bare / "config", "a") as f:
        f.write(filter_config)
    student.push()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(filter_config)  # the machine's config: git-lfs lives there for real
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    subprocess.run(["git", "clone", "-q", str(student.bare), str(tmp_path / "plain")], check=True)
    assert marker.is_file() and (tmp_path / "plain" / "exercises" / "vector_add.py").read_text() == "SMUDGED\n"
    marker.unlink()
    for repo in (student.bare, student.work):
        assert taken(fetch(entry(repo), EXERCISES, tmp_path / "out")) == {"exercises/vector_add.py": "V = 1\n"}
    assert not marker.exists()


def test_a_transport_that_runs_commands_is_not_allowed(tmp_path):
    marker = tmp_path / "transported"
    got = fetch(entry(f"ext::sh -c touch% {marker}"), EXERCISES, tmp_path / "out")
    assert got.folder is None and "transport 'ext' not allowed" in got.problem
    assert not marker.exists()


def test_a_symlink_is_refused_with_a_clear_reason(student, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the instructor's solutions\n")
    sha = student.commit({"matmul.py": "M\n"}, links={"exercises/vector_add.py": str(secret)})
    got = fetch(entry(student.work), EXERCISES, tmp_path / "out")
    assert got.problem == "exercises/vector_add.py is a symlink: submit the file itself"
    assert got.folder is None and got.commit == sha and not (tmp_path / "out").exists()


def test_a_symlinked_exercises_folder_is_refused(student, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "vector_add.py").write_text("V\n")
    student.commit({"matmul.py": "M\n"}, links={"exercises": str(tmp_path / "elsewhere")})
    got = fetch(entry(student.work), EXERCISES, tmp_path / "out")
    assert got.problem == "exercises is a symlink: submit the folder itself"


def test_a_file_over_the_size_limit_is_refused(student, tmp_path):
    student.commit({"vector_add.py": "x = 1  # padding\n" * (3 * 65536)})  # 3 MiB
    got = fetch(entry(student.work), EXERCISES, tmp_path / "out", limits=FetchLimits(max_file_bytes=256 * 1024))
    assert got.folder is None
    assert got.problem == "vector_add.py is 3.19 MiB, over the 256 KiB limit for one file"


def test_a_repository_over_the_size_limit_is_refused(student, tmp_path):
    student.commit({"vector_add.py": "V\n", "data.bin": os.urandom(3 << 20)})  # incompressible
    student.push()
    got = fetch(entry(student.bare), EXERCISES, tmp_path / "out",
                limits=FetchLimits(max_repo_bytes=1 << 20))
    assert got.folder is None
    assert got.problem.startswith(f"{student.bare} is larger than the 1 MiB limit for a repository")
    assert fetch(entry(student.bare), EXERCISES, tmp_path / "out").problem is None


def test_the_batchs_options_set_each_fetchs_limits(student, tmp_path):
    """`batch --max-repo-mib` / `--fetch-timeout` reach every fetch (a course whose repositories
    carry data was stuck at 200 MiB), and the refusal names the option that raises the limit."""
    import subprocess
    import sys

    from grader.batch.run import Options, grade_entry

    student.commit({"vector_add.py": "V\n", "data.bin": os.urandom(3 << 20)})  # incompressible
    student.push()
    small = Options(str(tmp_path), tuple(EXERCISES), max_repo_mib=1)
    assert small.fetch_limits() == FetchLimits(max_repo_bytes=1 << 20)
    assert Options(str(tmp_path), ()).fetch_limits() == FetchLimits()  # the defaults are fetch's own
    refused = grade_entry(entry(student.bare), small, frozenset())
    assert refused.problem.startswith(f"{student.bare} is larger than the 1 MiB limit") and \
        "--max-repo-mib" in refused.problem, refused.problem
    done = subprocess.run([sys.executable, "-m", "grader", "batch", str(tmp_path / "roster.csv"), "--out",
                           str(tmp_path / "o"), "--max-repo-mib", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and "--max-repo-mib: '0' is not a positive number" in done.stderr, done.stderr


def test_repositories_that_do_not_exist_or_cannot_be_fetched(tmp_path):
    out = tmp_path / "out"
    assert fetch(entry(tmp_path / "nobody.git"), EXERCISES, out).problem == \
        f"the repository {tmp_path / 'nobody.git'} does not exist"
    assert fetch(entry((tmp_path / "nobody.git").as_uri()), EXERCISES, out).problem == \
        f"the repository {(tmp_path / 'nobody.git').as_uri()} does not exist"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    got = fetch(entry(f"https://token123@127.0.0.1:{port}/x.git"), EXERCISES, out)  # nothing listens
    assert got.folder is None and got.problem.startswith(f"cannot fetch https://***@127.0.0.1:{port}/x.git: ")
    assert "token123" not in got.problem and "connect" in got.problem.lower()


def test_a_server_that_never_answers_is_given_up_on_in_time(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
    url = f"git://127.0.0.1:{server.getsockname()[1]}/x.git"
    try:
        got = fetch(entry(url), EXERCISES, tmp_path / "out", limits=FetchLimits(timeout_s=1.5))
    finally:
        server.close()
    assert got.folder is None and got.problem.startswith(f"fetching {url} took longer than 1.5 s")


# ---- plain folders -----------------------------------------------------------------------------------

def test_a_plain_folder_gives_its_modules_and_a_content_hash(tmp_path):
    folder = tmp_path / "bob"
    (folder / "exercises").mkdir(parents=True)
    (folder / "exercises" / "vector_add.py").write_text("V\n")
    (folder / "matmul.py").write_text("M\n")
    (folder / "notes.txt").write_text("not taken\n")
    got = fetch(entry(folder), EXERCISES, tmp_path / "out")
    assert taken(got) == {"matmul.py": "M\n", "exercises/vector_add.py": "V\n"} and got.missing == ["reduce"]
    assert got.commit.startswith("sha256:") and len(got.commit) == 7 + 64 and got.committed_at is None
    assert fetch(entry(folder), EXERCISES, tmp_path / "again").commit == got.commit
    (folder / "matmul.py").write_text("M2\n")
    assert fetch(entry(folder), EXERCISES, tmp_path / "out").commit != got.commit
    (folder / "notes.txt").write_text("changed, not taken\n")
    assert fetch(entry(folder), EXERCISES, tmp_path / "out").commit == \
        fetch(entry(folder), EXERCISES, tmp_path / "again").commit


def test_a_plain_folder_refuses_symlinks_and_big_files_and_refs(tmp_path):
    folder = tmp_path / "bob"
    folder.mkdir()
    (tmp_path / "secret.py").write_text("S\n")
    os.symlink(tmp_path / "secret.py", folder / "vector_add.py")
    (folder / "matmul.py").write_text("#" * 5000)
    got = fetch(entry(folder), EXERCISES, tmp_path / "out", limits=FetchLimits(max_file_bytes=1024))
    assert got.folder is None and got.problem == ("vector_add.py is a symlink: submit the file itself; "
                                                  "matmul.py is 4.88 KiB, over the 1 KiB limit for one file")
    assert fetch(entry(folder, "v1"), EXERCISES, tmp_path / "out").problem == \
        f"a ref (v1) was given but {folder} is not a git repository"
    (tmp_path / "afile").write_text("")
    assert fetch(entry(tmp_path / "afile"), EXERCISES, tmp_path / "out").problem == \
        f"{tmp_path / 'afile'} is neither a folder nor a git repository"


# ---- the roster -------------------------------------------------------------------------------------

def _roster(tmp_path, text: str, encoding="utf-8") -> Path:
    path = tmp_path / "class" / "roster.csv"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def test_a_good_roster(tmp_path):
    path = _roster(tmp_path, "Student_ID , repo , ref, email\n"
                             "\n"
                             " alice , repos/alice.git ,  , a@x\n"
                             "bob@uni.edu,https://host/bob.git,feature/x,b@x\n"
                             "carol,git@github.com:c/hw.git@v2,,\n"
                             "dan,https://host/dan.git\n"  # the empty ref and email left out
                             "\n", encoding="utf-8-sig")
    assert read_roster(path) == [
        Entry("alice", str(tmp_path / "class" / "repos" / "alice.git"), None, 3),
        Entry("bob@uni.edu", "https://host/bob.git", "feature/x", 4),
        Entry("carol", "git@github.com:c/hw.git", "v2", 5),
        Entry("dan", "https://host/dan.git", None, 6),
    ]
    assert read_roster(_roster(tmp_path, "student_id,repo\n")) == []


def test_a_deadline_cell_gives_an_extension_takes_one_back_or_says_nothing(tmp_path):
    path = _roster(tmp_path, "student_id,repo,deadline\n"
                             "alice,a.git,2026-12-03T23:59:00+01:00\n"
                             "bob,b.git,None\n"      # takes back an extension an earlier roster gave
                             "carol,c.git,\n"        # says nothing: an earlier roster's stays
                             "dan,d.git,never\n")
    with pytest.raises(RosterError, match=r"line 5: deadline 'never' is not an ISO 8601 time"):
        read_roster(path)
    path.write_text(path.read_text().replace("dan,d.git,never\n", ""))
    alice, bob, carol = read_roster(path)
    assert alice.deadline == datetime(2026, 12, 3, 22, 59, tzinfo=timezone.utc) and not alice.no_extension
    assert (bob.deadline, bob.no_extension) == (None, True)
    assert (carol.deadline, carol.no_extension) == (None, False)


def test_every_malformed_row_is_reported_with_its_line(tmp_path):
    path = _roster(tmp_path, "student_id,repo,ref\n"
                             ",a.git,\n"
                             "bob,,\n"
                             "../etc,c.git,\n"
                             "d e,d.git,\n"
                             "eve,e.git,main,extra\n"
                             "fay,f.git\n"       # the ref left out: no ref
                             "gil\n"             # the repo left out too
                             "gus,g.git,-oops\n"
                             "hal,h.git@v1,v2\n"
                             "ivy,i.git,a..b\n"
                             ".hidden,j.git,\n"
                             "ok,ok.git,\n")
    with pytest.raises(RosterError) as caught:
        read_roster(path)
    assert isinstance(caught.value, UsageError)  # the CLI turns it into exit code 2 and this message
    assert str(caught.value).splitlines() == [
        f"{path}: 10 malformed row(s):",
        "  line 2: no student_id",
        "  line 3: no repo",
        "  line 4: student id '../etc' is not a safe name (1 to 64 of A-Z a-z 0-9 . _ @ -, not starting with '.')",
        "  line 5: student id 'd e' is not a safe name (1 to 64 of A-Z a-z 0-9 . _ @ -, not starting with '.')",
        "  line 6: 4 fields, the header has 3",
        "  line 8: no repo",
        "  line 9: ref '-oops' is not a branch, tag or commit name",
        "  line 10: the ref is given twice (h.git@v1 and the ref column 'v2')",
        "  line 11: ref 'a..b' is not a branch, tag or commit name",
        # the Gradescope export could not name its folder: refused here, before anything is graded
        "  line 12: student id '.hidden' is not a safe name (1 to 64 of A-Z a-z 0-9 . _ @ -, not starting with '.')",
    ]


def test_duplicate_ids_are_refused_naming_both_lines(tmp_path):
    path = _roster(tmp_path, "student_id,repo\nalice,a.git\nbob,b.git\n\nAlice,c.git\n")
    with pytest.raises(RosterError, match=r"line 5: student id 'Alice' is already on line 2"):
        read_roster(path)


def test_a_roster_without_its_header_or_empty_or_missing(tmp_path):
    with pytest.raises(RosterError, match=r"roster.csv:1: the header must name the columns student_id,repo"):
        read_roster(_roster(tmp_path, "alice,a.git\n"))
    with pytest.raises(RosterError, match="the roster is empty"):
        read_roster(_roster(tmp_path, "\n\n"))
    with pytest.raises(RosterError, match="cannot read the roster"):
        read_roster(tmp_path / "nowhere.csv")


@pytest.mark.parametrize("repo, split", [
    ("git@github.com:x/y.git", ("git@github.com:x/y.git", None)),          # ssh, scp-like: no ref
    ("ssh://git@host:22/x/y.git", ("ssh://git@host:22/x/y.git", None)),
    ("https://me@host/x.git", ("https://me@host/x.git", None)),            # user info, not a ref
    ("https://host/x.git@v2", ("https://host/x.git", "v2")),
    ("git@host:x/y.git@main", ("git@host:x/y.git", "main")),
    ("path/to/repo.git@v1.0", ("path/to/repo.git", "v1.0")),
    ("repo@0123abcd", ("repo", "0123abcd")),
    ("repos/alice@uni/", ("repos/alice@uni/", None)),                      # a trailing slash keeps it whole
    ("repo@", ("repo@", None)),
    ("@v1", ("@v1", None)),
])
def test_the_at_ref_rule(repo, split):
    assert split_ref(repo) == split


def test_a_local_path_that_exists_with_an_at_is_never_split(tmp_path):
    (tmp_path / "class" / "alice@uni.edu").mkdir(parents=True)
    path = _roster(tmp_path, "student_id,repo\nalice@uni.edu,alice@uni.edu\nbob,bob.git@uni.edu\n")
    alice, bob = read_roster(path)
    assert (alice.repo, alice.ref) == (str(tmp_path / "class" / "alice@uni.edu"), None)
    assert (bob.repo, bob.ref) == (str(tmp_path / "class" / "bob.git"), "uni.edu")


def test_a_notebook_submission_is_taken_as_the_notebook(student, tmp_path):
    """exercises/<exercise>.ipynb and no .py: the notebook is taken as it is (grading takes its
    code cells)."""
    notebook = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    student.commit({"exercises/vector_add.ipynb": notebook})
    student.push()
    got = fetch(entry(student.bare), ["vector_add"], tmp_path / "dest")
    assert got.problem is None and got.missing == []
    assert taken(got) == {"exercises/vector_add.ipynb": notebook}


def test_a_py_and_a_notebook_are_both_taken_for_grading_to_choose(student, tmp_path):
    """The stub pushed beside the notebook worked in: fetch takes both (grader.course.choice
    decides which is graded, as for `gpugrade grade`), from git and from a folder alike; a
    notebook's outputs may take it past a module's size limit, up to the notebook limit."""
    notebook = '{"cells": [], "metadata": {"big": "%s"}, "nbformat": 4, "nbformat_minor": 5}' % ("x" * 300_000)
    student.commit({"exercises/vector_add.py": "stub\n", "exercises/vector_add.ipynb": notebook,
                    "matmul.py": "M\n", "exercises/matmul.ipynb": notebook})
    student.push()
    want = {"exercises/vector_add.py": "stub\n", "exercises/vector_add.ipynb": notebook, "matmul.py": "M\n",
            "exercises/matmul.ipynb": notebook}
    limits = FetchLimits(max_file_bytes=256 * 1024)
    shutil.copytree(student.work, tmp_path / "plain", ignore=shutil.ignore_patterns(".git"))
    for repo in (student.bare, tmp_path / "plain"):
        got = fetch(entry(repo), EXERCISES, tmp_path / "dest", limits=limits)
        assert taken(got) == want and got.missing == ["reduce"]
