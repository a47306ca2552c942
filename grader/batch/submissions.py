"""One student's submission, fetched: only their exercise modules, read safely from a folder or git.

`fetch(entry, exercises, dest)` lays the student's `<exercise>.py` and `<exercise>.ipynb` (found at
the top of the submission or under `exercises/`, as `grader.course.tree.submission_files` finds
them) flat into `dest`, a folder `grade()` takes as is: where both are there, both are taken, and
grading chooses one (grader.course.choice). Nothing else of the submission is taken. Whatever
goes wrong with one student's submission is `Fetched.problem`, in words for the instructor; fetch
only raises on a programmer's error (an unsafe exercise name, a naive deadline).

A plain folder (not a git repository): its modules are copied; `commit` is a content hash of
what was taken ("sha256:<hex>"), so the results store sees a changed file as a new submission;
there is no commit date, and a deadline does not apply (nothing in a folder dates it reliably).

A git repository (a local path, a `file://` URL or any git URL) is fetched into a fresh bare
repository in a temporary folder and the files are read from git's objects (`git ls-tree`,
`git cat-file blob`): there is no work tree, so no checkout ever happens, and with it no
`.gitattributes` filter (smudge), no hook and no fsmonitor of the student's can run. Hooks and
config are never transferred by git anyway; on top of that every git command runs with
`core.hooksPath=/dev/null`, without the system and global config (GIT_CONFIG_NOSYSTEM,
GIT_CONFIG_GLOBAL=/dev/null: the instructor's own filters, hooks and credential helpers do not
apply either, so a private https repository needs its token in the URL or an ssh URL), with no
prompt (GIT_TERMINAL_PROMPT=0, GIT_ASKPASS=/bin/false, ssh BatchMode), only the http(s), ssh and
git protocols allowed, plus `file` for local repositories only. The git CLI is used rather than a
library (GitPython wraps the same CLI; dulwich reimplements git): with hooks and filters disabled
and no checkout, git's plumbing is the well-understood surface, and it speaks every transport.

Bounds: the fetch is shallow (`--depth 1` for a branch, a tag or HEAD; `--depth history_depth`,
200 by default, when a deadline must pick a commit from the history; a commit id is fetched
directly where the server allows it, else from the branches' last `history_depth` commits);
all git commands of one fetch together get `timeout_s` (120 s), after which the whole process
group (git, ssh) is killed; the repository on disk is measured while it downloads and the fetch
killed beyond `max_repo_bytes` (200 MiB; `batch --max-repo-mib` and `--fetch-timeout` set both).
`--filter=blob:limit=` is not used: a local repository's upload-pack ignores it unless the
student's own config allows filters. Each
exercise file must be a regular file (a symlink, mode 120000, or a submodule, 160000, is refused:
it could point outside the repository) of at most `max_file_bytes` (1 MiB; a notebook, outputs
included, up to what grading takes of one, 5 MiB). A missing exercise file is no problem: it is
listed in `missing` and scores 0.

The deadline: the last commit at or before it by **committer date** on the ref
(`git rev-list -1 --before=<deadline>`). The committer date is written by the student's own git
and is forgeable (`GIT_COMMITTER_DATE=... git commit`). Where that matters, grade what the server
saw instead: a tag the course creates on every repository at the deadline (pass it as the ref),
or the commit the git server's push log / reflog shows as pushed before the deadline (GitLab's
audit events, GitHub's push events API or `git reflog` on a self-hosted bare repository with
core.logAllRefUpdates), passed as the ref.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..course.notebooks import MAX_NOTEBOOK_BYTES
from ..course.tree import candidates, copies, linked, submission_files, submission_root
from .roster import URL, Entry, local_path

MiB = 1 << 20
EXERCISE_NAME = re.compile(r"[A-Za-z0-9_]+")
HEX = re.compile(r"[0-9a-fA-F]{4,64}")
SYMLINK, SUBMODULE, FOLDER = "120000", "160000", "040000"
# Every git command: no hook, no fsmonitor, no attributes file of the machine, no background gc
# (a detached gc would outlive the timeout), only well-known network protocols.
SAFE_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.attributesFile=/dev/null",
               "gc.auto=0", "maintenance.auto=false", "fetch.writeCommitGraph=false",
               "protocol.allow=never", "protocol.https.allow=always", "protocol.http.allow=always",
               "protocol.ssh.allow=always", "protocol.git.allow=always")


@dataclass(frozen=True)
class FetchLimits:
    timeout_s: float = 120.0            # all git commands of one fetch together
    max_repo_bytes: int = 200 * MiB     # the fetched repository on disk
    max_file_bytes: int = 1 * MiB       # each exercise file
    history_depth: int = 200            # commits fetched when a deadline or a commit id needs history
    deeper_history_depth: int = 5000    # ... and where the deadline is older than those, once more this many


@dataclass(frozen=True)
class Fetched:
    folder: Path | None                 # the exercise modules, flat; None when there is a problem
    commit: str | None                  # the git commit, or "sha256:<hex>" of a folder's files
    committed_at: datetime | None       # the commit's committer date (timezone-aware); None for a folder
    problem: str | None = None          # why this submission cannot be graded, for the instructor
    missing: list[str] = field(default_factory=list)   # exercises without a file: they score 0
    later: int = 0                      # commits after the graded one on the ref: the deadline left them out


class _Problem(Exception):
    """A reason this student's submission cannot be graded (never leaves fetch)."""

    def __init__(self, reason: str, commit: str | None = None, committed_at: datetime | None = None):
        super().__init__(reason)
        self.commit, self.committed_at = commit, committed_at


@dataclass
class _Snapshot:
    files: dict[str, bytes]             # file name (<exercise>.py or .ipynb) -> its bytes
    missing: list[str]
    refused: list[str]                  # why a named file cannot be taken
    commit: str | None
    committed_at: datetime | None = None
    later: int = 0


def fetch(entry: Entry, exercises: list[str], dest: Path, *, deadline: datetime | None = None,
          limits: FetchLimits = FetchLimits()) -> Fetched:
    """The student's exercise modules of `entry` laid into `dest` (replaced if it exists)."""
    for name in exercises:
        if not EXERCISE_NAME.fullmatch(name):
            raise ValueError(f"unsafe exercise name {name!r}")
    if deadline is not None and deadline.tzinfo is None:
        raise ValueError("the deadline must be timezone-aware")
    path = local_path(entry.repo)
    try:
        if path is not None and not path.exists():
            raise _Problem(f"the repository {entry.repo} does not exist")
        if path is not None and not _is_git(path):
            if entry.ref:
                raise _Problem(f"a ref ({entry.ref}) was given but {entry.repo} is not a git repository")
            snap = _read_folder(path, exercises, limits)
        else:
            snap = _read_git(entry, path, exercises, deadline, limits)
    except _Problem as exc:
        return Fetched(None, exc.commit, exc.committed_at, str(exc))
    if snap.refused:
        return Fetched(None, snap.commit, snap.committed_at, "; ".join(snap.refused), snap.missing, snap.later)
    _lay_out(snap.files, Path(dest))
    return Fetched(Path(dest), snap.commit, snap.committed_at, None, snap.missing, snap.later)


def _is_git(path: Path) -> bool:
    """A work tree (`.git` folder or file) or a bare repository; decided without running git in it."""
    return (path / ".git").exists() or (
        (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir())


def _size(n: int) -> str:
    return f"{n / MiB:.3g} MiB" if n >= MiB else f"{n / 1024:.3g} KiB" if n >= 1024 else f"{n} bytes"


def _limit(name: str, limits: FetchLimits) -> int:
    """A file's size limit: a notebook's outputs make it larger than a module, and grading refuses
    one over MAX_NOTEBOOK_BYTES itself, with the reason in the student's feedback."""
    return max(limits.max_file_bytes, MAX_NOTEBOOK_BYTES) if name.endswith(".ipynb") else limits.max_file_bytes


def _too_big(where: str, size: int, limits: FetchLimits) -> str:
    return f"{where} is {_size(size)}, over the {_size(_limit(where, limits))} limit for one file"


def _read_folder(root: Path, exercises: list[str], limits: FetchLimits) -> _Snapshot:
    if not root.is_dir():
        raise _Problem(f"{root} is neither a folder nor a git repository")
    root = submission_root(root)  # (a folder holding only the repository's folder: that one)
    files, refused = {}, []
    found = submission_files(root, exercises)
    # every copy (at the top and under exercises/): grading takes the one worked in (course.choice)
    taken = [path for name in found for path in copies(root, name)]
    plain = {m.name for m in taken if not linked(m)}
    for module in taken:
        where = module.relative_to(root).as_posix()
        if linked(module):
            if module.name in plain:
                continue  # a link beside the file itself: the file is graded
            refused.append(f"{where} is a symlink: submit the file itself")
            continue
        try:  # O_NOFOLLOW: a file swapped for a link after the check is still not followed
            fd = os.open(module, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = f.read(_limit(module.name, limits) + 1)
                size = os.fstat(f.fileno()).st_size
        except OSError as exc:
            refused.append(f"cannot read {where}: {exc.strerror}")
            continue
        if len(data) > _limit(module.name, limits):
            refused.append(_too_big(where, size, limits))
            continue
        files[where] = data  # <exercise>.py and/or <exercise>.ipynb, where they were: grading chooses
    digest = hashlib.sha256()
    for name in sorted(files):  # names and lengths framed: two splits of the same bytes differ
        digest.update(b"%s\0%d\0" % (name.encode(), len(files[name])) + files[name])
    missing = [e for e in exercises if e not in found]
    return _Snapshot(files, missing, refused, "sha256:" + digest.hexdigest())


def _read_git(entry: Entry, path: Path | None, exercises: list[str], deadline: datetime | None,
              limits: FetchLimits) -> _Snapshot:
    shown = _redact(entry.repo)
    url = entry.repo if path is None or URL.match(entry.repo) else path.absolute().as_uri()
    git = _Git(limits, local=path is not None, shown=shown)
    with tempfile.TemporaryDirectory(prefix="gpugrade-fetch-") as tmp:
        repo = Path(tmp) / "repo.git"
        (Path(tmp) / "template").mkdir()  # an empty template: not even the sample hooks
        git.run(["init", "--bare", "--quiet", f"--template={Path(tmp) / 'template'}", str(repo)], Path(tmp))
        git.repo = repo
        depth = limits.history_depth if deadline else 1
        fetched = git.fetch(url, entry.ref or "HEAD", depth)
        if fetched:
            tip = "FETCH_HEAD"
        elif entry.ref and HEX.fullmatch(entry.ref):
            # a commit id the server would not hand out by itself: look for it in the branches' history
            if not git.fetch(url, "+refs/heads/*:refs/remotes/origin/*", limits.history_depth):
                raise _Problem(git.failure)
            tip = entry.ref
        else:
            raise _Problem(git.failure)
        commit = git.out(["rev-parse", "--verify", "--quiet", f"{tip}^{{commit}}"], missing_ok=True).strip()
        if not commit:
            raise _Problem(f"no commit {entry.ref} in the last {limits.history_depth} commits of the "
                           f"branches of {shown}")
        newest, later = commit, 0
        if deadline is not None:
            before = deadline.isoformat(timespec="seconds")  # git dates are whole seconds: floor is exact
            found = git.out(["rev-list", "-1", f"--before={before}", commit]).strip()
            depth = limits.history_depth
            if not found and _shallow(git) and fetched and limits.deeper_history_depth > depth:
                # a student who pushed hundreds of commits after the deadline: look further back, once
                depth = limits.deeper_history_depth
                if git.fetch(url, entry.ref or "HEAD", depth):
                    found = git.out(["rev-list", "-1", f"--before={before}", commit]).strip()
            commit = found
            if not commit:
                among = f" among its last {depth} commits" if _shallow(git) else ""
                raise _Problem(f"no commit before the deadline {before} on {entry.ref or 'the default branch'}"
                               f" of {shown}{among}")
            # said beside the grade: a student's newer pushes were not graded, and how many
            later = int(git.out(["rev-list", "--count", f"{commit}..{newest}"]).strip() or 0)
        committed_at = datetime.fromisoformat(git.out(["log", "-1", "--format=%cI", commit]).strip())
        snap = _read_tree(git, commit, committed_at, exercises, limits)
        snap.later = later
        return snap


def _shallow(git: "_Git") -> bool:
    return git.out(["rev-parse", "--is-shallow-repository"]).strip() == "true"


def _read_tree(git: "_Git", commit: str, committed_at: datetime, exercises: list[str],
               limits: FetchLimits) -> _Snapshot:
    wanted = ["exercises"] + [p for e in exercises for where in candidates(e).values() for p in where]
    entries = {}  # path -> (mode, type, oid, size)
    listing = git.out(["ls-tree", "-z", "-l", "--full-tree", commit, "--", *wanted])
    for record in filter(None, listing.split("\0")):
        meta, where = record.split("\t", 1)
        mode, kind, oid, size = meta.split()
        entries[where] = (mode, kind, oid, size)
    files, missing, refused = {}, [], []
    for name in exercises:
        # of each kind, every place that is not a folder (grading takes the copy worked in: course.choice)
        found = [c for places in candidates(name).values() for c in places if c in entries and entries[c][0] != FOLDER]
        if not found:
            outer = entries.get("exercises", ("",))[0]
            if outer in (SYMLINK, SUBMODULE):
                refused.append(f"exercises is a {'symlink' if outer == SYMLINK else 'submodule'}: "
                               f"submit the folder itself")
            missing.append(name)
            continue
        blobs = 0
        plain = {Path(w).name for w in found if entries[w][0] not in (SYMLINK, SUBMODULE) and entries[w][1] == "blob"}
        for where in found:
            mode, kind, oid, size = entries[where]
            if mode in (SYMLINK, SUBMODULE) and Path(where).name in plain:
                continue  # a link beside the file itself (exercises/x.py -> ../x.py): the file is graded
            if mode == SYMLINK:
                refused.append(f"{where} is a symlink: submit the file itself")
            elif mode == SUBMODULE:
                refused.append(f"{where} is a submodule: submit the file itself")
            elif kind == "blob":
                blobs += 1
                if int(size) > _limit(where, limits):
                    refused.append(_too_big(where, int(size), limits))
                else:
                    files[where] = git.out(["cat-file", "blob", oid], binary=True)
        if not blobs and all(entries[where][0] not in (SYMLINK, SUBMODULE) for where in found):
            missing.append(name)
    return _Snapshot(files, missing, list(dict.fromkeys(refused)), commit, committed_at)


def _lay_out(files: dict[str, bytes], dest: Path) -> None:
    """Write the modules beside `dest`, then rename: a `dest` that exists is always complete."""
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for where, data in files.items():  # (paths of the course's candidates: at the top or under exercises/)
        (partial / where).parent.mkdir(parents=True, exist_ok=True)
        (partial / where).write_bytes(data)
    if dest.exists():
        shutil.rmtree(dest)
    partial.rename(dest)


def _redact(text: str) -> str:
    """URLs' user info (a token in https://TOKEN@host/...) never reaches a message."""
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", text)


def _disk_size(root: Path) -> int:
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:  # a temporary pack renamed while we look
                pass
    return total


class _Git:
    """git commands of one fetch: a shared time budget, a size watch, a hardened environment."""

    def __init__(self, limits: FetchLimits, *, local: bool, shown: str):
        self.limits, self.shown = limits, shown
        self.ends = time.monotonic() + limits.timeout_s
        self.repo: Path | None = None
        self.failure = ""  # why the last fetch failed, in the instructor's words
        config = [*SAFE_CONFIG, f"protocol.file.allow={'always' if local else 'never'}"]
        self.config = [arg for item in config for arg in ("-c", item)]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self.env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_ATTR_NOSYSTEM="1",
                        GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false", SSH_ASKPASS="/bin/false",
                        LC_ALL="C", GIT_SSH_COMMAND=os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"))

    def fetch(self, url: str, refspec: str, depth: int) -> bool:
        done = self.run(["fetch", "--quiet", "--no-tags", f"--depth={depth}", "--", url, refspec], self.repo,
                        watch=True)
        if done.returncode == 0:
            return True
        said = [line.strip() for line in done.stderr.decode(errors="replace").splitlines()
                if line.strip() and not line.startswith("hint:")]
        if any("couldn't find remote ref" in line for line in said):
            self.failure = (f"no branch, tag or commit {refspec} in {self.shown}" if refspec != "HEAD"
                            else f"{self.shown} has no commits on its default branch")
        else:
            login = any(s in line for line in said for s in ("terminal prompts disabled", "Authentication failed",
                                                               "Permission denied", "could not read Username"))
            reason = _redact(" / ".join(said[:3])) or f"git exited with code {done.returncode}"
            self.failure = f"cannot fetch {self.shown}: " + ("it needs a login (a private repository?): "
                                                           if login else "") + reason
        return False

    def out(self, args: list[str], *, binary: bool = False, missing_ok: bool = False):
        done = self.run(args, self.repo)
        if done.returncode != 0 and not missing_ok:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise _Problem(f"git {args[0]} failed on {self.shown}: {_redact(said[-1]) if said else done.returncode}")
        return done.stdout if binary else done.stdout.decode(errors="replace")

    def run(self, args: list[str], cwd: Path | None, *, watch: bool = False) -> subprocess.CompletedProcess:
        """One git command within the fetch's time left; killed with its children on expiry, or when
        the repository grows over the size limit (`watch`)."""
        try:
            proc = subprocess.Popen(["git", *self.config, *args], cwd=cwd, env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            raise _Problem("git is not installed on the grading machine") from None
        while True:
            left = self.ends - time.monotonic()
            try:  # retrying communicate after a timeout loses no output
                out, err = proc.communicate(timeout=max(0.01, min(0.2, left)))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= self.ends:
                    self._kill(proc)
                    raise _Problem(f"fetching {self.shown} took longer than {self.limits.timeout_s:g} s (the batch's "
                                   f"--fetch-timeout raises the limit)") from None
                if watch and _disk_size(self.repo) > self.limits.max_repo_bytes:
                    self._kill(proc)
                    raise self._too_large() from None
        if watch and proc.returncode == 0 and _disk_size(self.repo) > self.limits.max_repo_bytes:
            raise self._too_large()
        return subprocess.CompletedProcess(args, proc.returncode, out, err)

    def _too_large(self) -> _Problem:
        return _Problem(f"{self.shown} is larger than the {_size(self.limits.max_repo_bytes)} limit for a repository "
                        f"(the batch's --max-repo-mib raises it)")

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
