"""The roster: which students to grade and where each one's submission is.

A CSV file whose header names the columns `student_id`, `repo` and, optionally, `ref` and
`deadline` (any order; other columns are ignored; a UTF-8 BOM, blank lines, whitespace around
fields and trailing empty fields left out are tolerated). A row's `deadline` (ISO 8601 with its
time zone) is that student's extension: their commit is chosen by it instead of the batch's. The
batch folder keeps an extension once a roster gave it: an empty deadline cell (or no deadline
column) keeps the one recorded by an earlier roster (an extension given in a roster of its own
survives the class's next batch), and `none` (any case) takes it back: the class's deadline again.
Every malformed row is reported at once, each with its line number, in one RosterError.

`repo` is a submission folder, a local git repository, a `file://` URL or any git URL (https,
ssh, `user@host:path`). A relative local path is taken relative to the roster's folder. The ref
(branch, tag or commit) comes from the `ref` column or from a `repo@ref` suffix. The suffix rule:
the text after the LAST `@` is a ref only if it is not empty and holds neither `/` nor `:`, so
`git@github.com:x/y.git` and `https://me@host/x.git` have no ref while `https://host/x.git@v2`
and `git@host:x/y.git@main` do. A ref holding `/` (`feature/x`) goes in the ref column. A local
path that exists as written is never split (`repos/alice@uni.edu` is Alice's folder); a trailing
slash also keeps a path whole (`repos/alice@uni/`).
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import RosterError

# A student id names the student's folder in the batch output: nothing a path could escape with,
# and no leading '.' (a hidden folder, `..`), which the Gradescope export refuses for the whole class.
SAFE_ID = re.compile(r"(?!\.)[A-Za-z0-9._@-]{1,64}")
# A ref is passed to git as an argument: never an option (a leading '-'), never a revision
# expression (`..`, `@{`, `^`, `~`, `:`), only what branch, tag and commit names are made of.
SAFE_REF = re.compile(r"(?!-)(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/+@-]{1,200}")
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
COLUMNS = ("student_id", "repo", "ref", "deadline")
NO_EXTENSION = "none"  # a deadline cell taking back an extension an earlier roster gave


@dataclass(frozen=True)
class Entry:
    student_id: str
    repo: str            # a local path (absolute once read from a roster) or a git URL, no @ref
    ref: str | None      # branch, tag or commit; None: the repository's default branch (HEAD)
    line: int            # the roster line, for messages
    deadline: datetime | None = None  # this student's own deadline (an extension); None: not given here
    no_extension: bool = False        # the deadline cell reads `none`: an extension recorded earlier is taken back


def parse_deadline(text: str) -> datetime:
    """An ISO 8601 time with its time zone (`Z` for UTC); ValueError saying what is wrong. One
    without a zone is refused rather than read as UTC: an hour or more off in most places."""
    try:  # (Python 3.10's fromisoformat takes no "Z")
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (2026-12-01T23:59:00+01:00)") from None
    if when.utcoffset() is None:
        raise ValueError(f"{text!r} has no time zone: give it (2026-12-01T23:59:00+01:00, or Z for UTC)")
    return when


def read_roster(path: str | os.PathLike) -> list[Entry]:
    """The entries of the roster CSV at `path`, in file order; RosterError lists every bad row."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise RosterError(f"cannot read the roster {path}: {exc}") from None
    rows = csv.reader(text.splitlines(keepends=True))
    header, columns = None, {}
    entries: list[Entry] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}   # student id, case-folded (a folder name on macOS) -> line
    for fields in rows:
        line = rows.line_num
        fields = [f.strip() for f in fields]
        if not any(fields):
            continue
        if header is None:
            header = [f.lower() for f in fields]
            columns = {name: header.index(name) for name in COLUMNS if name in header}
            if "student_id" not in columns or "repo" not in columns:
                raise RosterError(f"{path}:{line}: the header must name the columns student_id,repo[,ref] "
                                  f"(found: {','.join(fields)})")
            continue
        entry = _entry(fields, header, columns, line, path.parent, problems)
        if entry is None:
            continue
        key = entry.student_id.casefold()
        if key in first_line:
            problems.append(f"line {line}: student id {entry.student_id!r} is already on line {first_line[key]}")
            continue
        first_line[key] = line
        entries.append(entry)
    if header is None:
        raise RosterError(f"{path}: the roster is empty (a header student_id,repo[,ref] is required)")
    if problems:
        raise RosterError(f"{path}: {len(problems)} malformed row(s):\n  " + "\n  ".join(problems))
    return entries


def _entry(fields: list[str], header: list[str], columns: dict[str, int], line: int, base: Path,
           problems: list[str]) -> Entry | None:
    if len(fields) > len(header):
        problems.append(f"line {line}: {len(fields)} fields, the header has {len(header)}")
        return None
    # trailing empty fields left out (`bob,b.git` under `student_id,repo,ref`, as hand-edited
    # rosters have them) are empty: a required one then says it is missing
    fields = fields + [""] * (len(header) - len(fields))
    student, repo = fields[columns["student_id"]], fields[columns["repo"]]
    column_ref = fields[columns["ref"]] if "ref" in columns else ""
    bad = []
    deadline = None
    cell = fields[columns["deadline"]] if "deadline" in columns else ""
    no_extension = cell.casefold() == NO_EXTENSION
    if cell and not no_extension:
        try:
            deadline = parse_deadline(cell)
        except ValueError as exc:
            bad.append(f"deadline {exc}")
    if not student:
        bad.append("no student_id")
    elif not SAFE_ID.fullmatch(student):
        bad.append(f"student id {student!r} is not a safe name (1 to 64 of A-Z a-z 0-9 . _ @ -, not starting with '.')")
    if not repo:
        bad.append("no repo")
    repo, suffix_ref = split_ref(repo, base)
    if suffix_ref and column_ref:
        bad.append(f"the ref is given twice ({repo}@{suffix_ref} and the ref column {column_ref!r})")
    ref = suffix_ref or column_ref or None
    if ref is not None and not SAFE_REF.fullmatch(ref):
        bad.append(f"ref {ref!r} is not a branch, tag or commit name")
    if repo.startswith("-"):
        bad.append(f"repo {repo!r} starts with '-'")
    if bad:
        problems.append(f"line {line}: " + "; ".join(bad))
        return None
    if local_path(repo) is not None and not URL.match(repo):
        repo = os.path.normpath(base.absolute() / Path(repo).expanduser())
    return Entry(student, repo, ref, line, deadline, no_extension)


def split_ref(repo: str, base: Path = Path(".")) -> tuple[str, str | None]:
    """`repo@ref` -> (repo, ref) by the rule of the module docstring; (repo, None) without one."""
    before, at, after = repo.rpartition("@")
    if not at or not before or not after or "/" in after or ":" in after:
        return repo, None
    whole = local_path(repo)
    if whole is not None and not URL.match(repo) and (base / whole.expanduser()).exists():
        return repo, None
    return before, after


def local_path(repo: str) -> Path | None:
    """The filesystem path of a local repository or folder (a path or a file:// URL); None for a
    remote URL. Git's rule: `host:path` is ssh only when no '/' comes before the first ':'."""
    if URL.match(repo):
        parts = urlsplit(repo)
        return Path(unquote(parts.path)) if parts.scheme == "file" else None
    colon, slash = repo.find(":"), repo.find("/")
    if colon > 0 and (slash < 0 or colon < slash):
        return None
    return Path(repo)
