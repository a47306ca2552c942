"""Helpers of the sandbox suites (tests/conftest.py has their fixtures)."""

import os

import pytest

OTHER_SOURCES_KEPT_S = 2 * 86400  # another source's image tag is removed once the image is older than this


# Student code (after `import os, signal`) that leaves a daemon behind: a grandchild in a session
# of its own, deaf to polite signals, running `sleep <argument>` (the argument: how the host finds it).
LEAVE_A_DAEMON = """
def leave_a_daemon(argument):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            os.execv("/bin/sleep", ["sleep", argument])
        os._exit(0)
    os.wait()
"""


def unavailable(reason: str):
    """A sandbox this test needs is missing: skipped here, a failure in CI (where it must run)."""
    if os.environ.get("CI"):
        pytest.fail(f"the sandbox tests must run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def students_of(tmp_path, kernels: str, limits, **connection):
    """A maker of Students of module `ex` (`kernels` then the source it is given) in the process
    sandbox, each in a workspace of its own, on the sim backend (`connection`: RunnerConnection's
    options, `gpu_device=True` for the GPU's device process), and a list of those made to close."""
    import textwrap

    from grader.judge import RunnerConnection, Student
    from grader.sandbox import ProcessSandbox
    from grader.sandbox.bubblewrap import unavailable as bubblewrap_unavailable

    reason = bubblewrap_unavailable()
    if reason:
        unavailable(reason)
    made = []

    def make(source: str):
        work = tmp_path / f"work{len(made)}"
        work.mkdir(mode=0o755)
        (work / "ex.py").write_text(textwrap.dedent(kernels) + textwrap.dedent(source))
        (work / "ex.py").chmod(0o644)
        sandbox = ProcessSandbox(limits)
        made.append(Student("ex", str(work), "sim", sandbox, allowed_imports=None,
                            connection=RunnerConnection(str(work), "sim", sandbox, **connection)))
        return made[-1]

    return make, made


def solution_student(tmp_path, module: str, backend: str, limits, **connection):
    """A Student of the course's solutions/<module>.py in the process sandbox, in a workspace of
    its own (`connection`: RunnerConnection's options); the caller closes it."""
    import shutil
    from pathlib import Path

    from grader.judge import RunnerConnection, Student
    from grader.sandbox import ProcessSandbox
    from grader.sandbox.bubblewrap import unavailable as bubblewrap_unavailable

    reason = bubblewrap_unavailable()
    if reason:
        unavailable(reason)
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    shutil.copy(Path(__file__).resolve().parents[1] / "solutions" / f"{module}.py", work / f"{module}.py")
    (work / f"{module}.py").chmod(0o644)
    sandbox = ProcessSandbox(limits)
    return Student(module, str(work), backend, sandbox, allowed_imports=None,
                   connection=RunnerConnection(str(work), backend, sandbox, **connection))


def untag_old_sources(client, keep: str, repository: str) -> None:
    """Remove the tags of other sources' images of `repository` (`<repository>:src-<digest>`) older
    than OTHER_SOURCES_KEPT_S (each is over a GiB; one is left per source change otherwise). One in
    use by a container stays."""
    import datetime

    import docker.errors

    now = datetime.datetime.now(datetime.timezone.utc)
    for found in client.images.list(name=repository):
        created = datetime.datetime.fromisoformat(found.attrs["Created"][:19]).replace(tzinfo=datetime.timezone.utc)
        if (now - created).total_seconds() < OTHER_SOURCES_KEPT_S:
            continue
        for tag in found.tags:
            if tag.startswith(f"{repository}:src-") and tag != keep:
                try:
                    client.images.remove(tag)
                except docker.errors.APIError:
                    pass  # in use: its owner's
