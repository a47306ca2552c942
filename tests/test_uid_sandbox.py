"""`--sandbox uid` (grader/sandbox/uid.py): a runner as a fresh unprivileged uid, where no namespace
can be made. What it promises: never root and never a shared uid; the judge's files out of its
reach; its limits set from outside; nothing of it (processes, files in the shared temporary
folders) outlives the grade. What it does not confine (network, other processes' command lines,
world-readable files) is said in docs/SANDBOXES.md, not tested as confined here.
"""

import ast
import os
import secrets
import textwrap
import time

import numpy as np
import pytest

from grader.judge import RunnerConnection, Student
from grader.sandbox import Limits, cgroups
from grader.sandbox.uid import UidSandbox, unavailable as uid_unavailable

from sandbox_support import LEAVE_A_DAEMON, unavailable


@pytest.fixture
def sandbox():
    reason = uid_unavailable()
    if reason:
        unavailable(reason)
    return UidSandbox(Limits(call_timeout_s=60))


@pytest.fixture
def student(tmp_path, sandbox):
    """student(source, backend="gpu") -> a Student over `source` as ex.py (policy off: the attack runs)."""
    made = []

    def make(source: str, backend: str = "gpu", trusted: bool = False) -> Student:
        work = tmp_path / f"work{len(made)}"
        work.mkdir()
        (work / "ex.py").write_text(textwrap.dedent(source))
        connection = RunnerConnection(str(work), backend, sandbox, trusted=trusted)
        s = Student("ex", str(work), backend, sandbox, allowed_imports=None, connection=connection)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _processes_of(uid: int) -> list[int]:
    """The live processes of `uid` (a killed one not yet reaped by init is dead: left out)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    with open(f"/proc/{entry}/stat") as f:
                        if f.read().rpartition(")")[2].split()[0] != "Z":
                            pids.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return pids


def _gone(uid: int) -> bool:
    deadline = time.monotonic() + 10
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _processes_of(uid)


UID = """
    import os
    def uid():
        return os.getuid()
"""


def test_each_runner_is_a_uid_of_its_own_never_root(student):
    uids = [s.call("uid").value for s in (student(UID), student(UID), student(UID, trusted=True))]
    assert 0 not in uids and len(set(uids)) == 3, uids


def test_the_judges_files_are_out_of_reach(student, tmp_path):
    results = tmp_path / "results"  # as Gradescope's /autograder/results: root's, 0755
    results.mkdir(mode=0o755)
    (results / "results.json").write_text('{"score": 0}')
    private = tmp_path / "source"  # as /autograder/source: root's, 0700
    private.mkdir(mode=0o700)
    (private / "course.toml").write_text("secret")
    os.chmod(tmp_path, 0o755)
    s = student(f"""
        import os, grader
        def attack():
            done = []
            for path in ({str(results / "results.json")!r}, {str(results / "forged.json")!r}, grader.__file__):
                try:
                    with open(path, "a") as f:
                        f.write("forged")
                    done.append("wrote " + path)
                except OSError:
                    pass
            for path in ({str(results)!r}, {str(private)!r}):
                try:
                    os.rename(path, path + ".moved")
                    done.append("moved " + path)
                except OSError:
                    pass
            try:
                done.append(os.listdir({str(private)!r}))
            except OSError:
                pass
            return done
    """)
    assert s.call("attack").value == []
    assert (results / "results.json").read_text() == '{"score": 0}'


def test_limits_are_set_from_outside_and_cannot_be_raised(student):
    s = student("""
        import resource
        def raise_them():
            out = {}
            for name in ("RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CORE"):
                limit = getattr(resource, name)
                soft, hard = resource.getrlimit(limit)
                try:
                    resource.setrlimit(limit, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                    out[name] = "raised"
                except (ValueError, OSError):
                    out[name] = hard
            return repr(out)
    """)
    limits = ast.literal_eval(s.call("raise_them").value)
    assert "raised" not in limits.values(), limits
    assert limits["RLIMIT_CPU"] == Limits().cpu_time_s and limits["RLIMIT_NPROC"] == Limits().processes


def test_the_environment_is_an_allowlist(student, monkeypatch):
    secret = secrets.token_hex(8)
    monkeypatch.setenv("GPUGRADE_TEST_SECRET", secret)
    s = student("""
        import os
        def env():
            return repr(dict(os.environ))
    """)
    env = ast.literal_eval(s.call("env").value)
    assert secret not in repr(env)
    assert env["HOME"] == env["TMPDIR"] and env["HOME"] != "/tmp", env


def test_a_daemon_and_its_files_do_not_outlive_the_grade(student, monkeypatch):
    """A runner that forks a daemon (setsid, double fork, deaf to polite signals) and leaves files
    in the shared temporary folders: after its close, none of its uid's processes or files remain.
    Without cgroups, as in a container (its /sys/fs/cgroup read-only): the uid alone must do it."""
    monkeypatch.setattr(cgroups, "available", lambda: False)
    token = secrets.token_hex(6)
    s = student("import os, signal, time\n" + LEAVE_A_DAEMON + f"""
def linger():
    leave_a_daemon("86400")
    made = []
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        path = os.path.join(folder, "left-behind-{token}")
        with open(path, "w") as f:
            f.write("x")
        made.append(path)
    os.mkdir("/tmp/left-folder-{token}")
    time.sleep(0.3)
    return [os.getuid(), made]
""")
    uid, made = s.call("linger").value
    assert len(_processes_of(uid)) >= 2 and all(os.path.exists(p) for p in made)
    s.close()
    assert _gone(uid), "a process of the runner's uid outlived its grade"
    left = [p for p in [*made, f"/tmp/left-folder-{token}"] if os.path.lexists(p)]
    assert left == [], left


def test_a_timeout_ends_every_process_of_the_runner(tmp_path, sandbox, monkeypatch):
    monkeypatch.setattr(cgroups, "available", lambda: False)  # as in a container: the uid alone
    (tmp_path / "ex.py").write_text(textwrap.dedent("""
        import os, time
        def uid():
            return os.getuid()
        def hang():
            for _ in range(3):
                if os.fork() == 0:
                    os.setsid()
                    os.execv("/bin/sleep", ["sleep", "86400"])
            while True:
                time.sleep(1)
    """))
    s = Student("ex", str(tmp_path), "gpu", UidSandbox(Limits(call_timeout_s=3)), allowed_imports=None)
    try:
        uid = s.call("uid").value
        with pytest.raises(Exception, match="timed out after 3 s"):
            s.call("hang")
        assert _gone(uid), "the hung call's children outlived its timeout"
    finally:
        s.close()


def test_kernels_run_on_the_device_process_as_another_uid(student):
    """The sim backend's device process is confined as a uid of its own too (it runs kernels)."""
    s = student("""
        import os
        import numpy as np
        from numba import cuda

        @cuda.jit
        def add_kernel(a, b, out):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = a[i] + b[i]

        def add(a, b):
            d_out = cuda.device_array_like(a)
            add_kernel[4, 32](cuda.to_device(a), cuda.to_device(b), d_out)
            return d_out.copy_to_host()
    """, backend="sim")
    a = np.arange(100, dtype=np.float32)
    assert np.array_equal(s.call("add", a, a).value, 2 * a)
