"""The trust boundary under attack, in both confining sandboxes (`process` and `docker`).

Each test is one class of attack a hostile student tried (issue 9): the runner's uid, the world it
shares with the judge and other runners, limits it might lift, what it might leave behind. Each
asserts the outcome: nothing gained, nothing leaked, nothing left behind. The static policy is
off (`allowed_imports=None`), so that the attack really runs: the policy is feedback, never the
defence.
"""

import ast
import os
import secrets
import textwrap
import time
from pathlib import Path

import pytest

from grader.judge import RunnerConnection, Student
from grader.sandbox import Limits, ProcessSandbox
from grader.sandbox.bubblewrap import unavailable as bubblewrap_unavailable

from sandbox_support import LEAVE_A_DAEMON, unavailable


ROOT = Path(__file__).resolve().parents[1]
NO_POLICY = None


@pytest.fixture(params=["process", "docker"])
def sandbox(request):
    if request.param == "process":
        reason = bubblewrap_unavailable()
        if reason:
            unavailable(reason)
        return ProcessSandbox(Limits(call_timeout_s=60))
    from grader.sandbox.container import DockerSandbox, DockerSettings

    image = request.getfixturevalue("runner_image")
    return DockerSandbox(Limits(call_timeout_s=60), DockerSettings(image=image))


@pytest.fixture
def attack(tmp_path, sandbox):
    """attack(source) -> a Student over a workspace holding `source` as ex.py, in the sandbox."""
    students = []

    def make(source: str, trusted: bool = False) -> Student:
        work = tmp_path / f"work{len(students)}"
        work.mkdir()
        (work / "ex.py").write_text(textwrap.dedent(source))
        os.chmod(work, 0o755)
        connection = RunnerConnection(str(work), "gpu", sandbox, trusted=trusted)
        s = Student("ex", str(work), "gpu", sandbox, allowed_imports=NO_POLICY, connection=connection)
        students.append(s)
        return s

    yield make
    for s in students:
        s.close()


def _processes_of(uid: int) -> list[int]:
    """The processes of a runner's uid (only as root: else the runner has the judge's own uid)."""
    if uid == os.getuid():
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def _processes_with(marker: str) -> list[int]:
    """The processes whose command line holds `marker` (what a runner's children exec)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def _gone(uid: int, marker: str) -> bool:
    deadline = time.monotonic() + 10
    while (_processes_of(uid) or _processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _processes_of(uid) and not _processes_with(marker)


UID = """
    import os
    def uid():
        return os.getuid()
"""


def test_the_runner_is_never_root_and_never_shares_a_uid(attack, sandbox):
    first, second, reference = attack(UID), attack(UID), attack(UID, trusted=True)
    uids = [s.call("uid").value for s in (first, second, reference)]
    assert 0 not in uids and 65534 not in uids, uids
    if os.getuid() == 0 or sandbox.name == "docker":
        assert os.getuid() not in uids and len(set(uids)) == 3, \
            f"two runners (or a runner and the reference) share a uid: {uids}"
    else:  # an unprivileged judge has one uid to give: each runner keeps it, in namespaces of its own
        assert set(uids) == {os.getuid()}, uids


def test_the_rest_of_the_machine_is_not_in_view(attack, tmp_path):
    marker_tmp = Path("/tmp") / f"gpugrade-test-{secrets.token_hex(6)}"
    marker_tmp.write_text("the judge's")
    shm = Path("/dev/shm") / f"gpugrade-test-{secrets.token_hex(6)}"
    shm.write_text("the judge's")
    secret_dir = tmp_path / "reference-workspace"
    secret_dir.mkdir()
    (secret_dir / "solution_secret.py").write_text("ANSWER = 42\n")
    watched = [str(ROOT / "solutions"), str(ROOT / "tests"), str(ROOT / ".git"), str(ROOT / "course.toml"),
               str(marker_tmp), str(shm), str(secret_dir), "/root/.bash_history", "/var/run/docker.sock",
               "/run/docker.sock"]
    readable = ["/etc/shadow", "/etc/gshadow"]  # an image's own /etc may exist, never readable
    s = attack(f"""
        import os
        def look():
            seen = [p for p in {watched!r} if os.path.exists(p)]
            seen += [p for p in {readable!r} if os.access(p, os.R_OK)]
            for folder, dirs, files in os.walk("/"):
                if folder.startswith(("/proc", "/sys", "/usr", "/opt/gpugrade/venv")) or "site-packages" in folder:
                    dirs[:] = []
                    continue
                seen += [os.path.join(folder, f) for f in files
                         if f in ("course.toml", "solution_secret.py", "test_vector_add.py", "results.json")]
            return seen
    """)
    try:
        assert s.call("look").value == [], "parts of the machine beyond the runner's view are visible"
    finally:
        marker_tmp.unlink()
        shm.unlink()


def test_the_dynamic_loaders_cache_is_readable_in_the_view(attack):
    """The runner's uid can read the loader's cache: ldconfig -p finds libdl (with the /etc bubblewrap
    made for it of mode 0700 it could not, and every interpreter's ctypes.util.find_library fell back to
    running gcc and ld: a tenth of a second in each runner and device process of a grade)."""
    s = attack("""
        import ctypes.util
        def look():
            return ctypes.util._findSoname_ldconfig("dl")
    """)
    found = s.call("look").value
    assert found and found.startswith("libdl.so"), found


def test_nothing_the_grade_depends_on_is_writable(attack):
    s = attack("""
        import os, numpy, grader, json
        def write():
            written = []
            targets = [grader.__file__, os.path.dirname(grader.__file__) + "/forged.py", numpy.__file__,
                       os.__file__, json.__file__, "/usr/bin/python3", "/etc/hosts", "/workspace/ex.py",
                       "/workspace/results.json"]
            for path in targets:
                try:
                    with open(path, "a") as f:
                        f.write("# forged")
                    written.append(path)
                except OSError:
                    pass
                try:
                    os.rename(path, path + ".moved")
                    written.append("renamed " + path)
                except OSError:
                    pass
            return written
    """)
    assert s.call("write").value == []


def test_limits_cannot_be_raised_and_the_cgroup_cannot_be_left(attack):
    s = attack("""
        import os, resource
        def escape():
            gained = []
            for limit in (resource.RLIMIT_CPU, resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC):
                soft, hard = resource.getrlimit(limit)
                if hard != resource.RLIM_INFINITY:
                    try:
                        resource.setrlimit(limit, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                        gained.append(f"rlimit {limit}")
                    except (ValueError, OSError):
                        pass
            for controller in ("memory", "pids", "cpu", "unified", ""):
                procs = os.path.join("/sys/fs/cgroup", controller, "cgroup.procs")
                try:
                    with open(procs, "w") as f:
                        f.write(str(os.getpid()))
                    gained.append(procs)
                except OSError:
                    pass
            return gained
    """)
    assert s.call("escape").value == []


def test_the_judge_and_other_processes_are_invisible_and_out_of_reach(attack):
    s = attack(f"""
        import os, signal
        def reach():
            seen = []
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        with open(f"/proc/{{entry}}/cmdline", "rb") as f:
                            seen.append(f.read().replace(b"\\0", b" ").decode(errors="replace"))
                    except OSError:
                        seen.append("?")
            killed = []
            for pid in ({os.getpid()}, {os.getppid()}):  # the judge's pids, as the host numbers them
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except OSError:
                    pass
            return [seen, killed]
    """)
    seen, killed = s.call("reach").value
    assert not any("pytest" in c or "grader.judge" in c or "dockerd" in c for c in seen), seen
    assert len(seen) <= 4, f"only the sandbox's init and the runner itself are visible: {seen}"
    assert killed == [], f"the runner signalled processes outside itself: {killed}"


def test_every_process_of_a_grade_ends_with_it(attack):
    marker = f"86400.{secrets.randbelow(10**9):09d}"  # sleep's argument: how the host finds it
    s = attack("import os, signal, time\n" + LEAVE_A_DAEMON + f"""
def linger():
    leave_a_daemon("{marker}")
    time.sleep(0.5)
    return os.getuid()
""")
    uid = s.call("linger").value
    assert _processes_with(marker), "the lingering process must exist while the runner does"
    s.close()
    assert _gone(uid, marker), "a process of the runner outlived its grade"


def test_files_written_anywhere_are_gone_with_the_grade(attack):
    token = secrets.token_hex(6)
    s = attack(f"""
        import os
        def litter():
            made = []
            for folder in ("/tmp", "/dev/shm", "/var/tmp", os.path.expanduser("~"), "/workspace"):
                path = os.path.join(folder, "left-behind-{token}")
                try:
                    with open(path, "w") as f:
                        f.write("x")
                    made.append(path)
                except OSError:
                    pass
            return made
    """)
    assert s.call("litter").value, "the runner has somewhere to write (its private /tmp)"
    scratch = getattr(getattr(s.connection._runner, "_scratch", None), "name", None)  # this runner's own
    s.close()
    for folder in ("/tmp", "/dev/shm", "/var/tmp", os.path.expanduser("~"), "/root", s.workspace):
        assert not os.path.lexists(os.path.join(folder, f"left-behind-{token}")), folder
    assert scratch is None or not os.path.lexists(scratch), "its staged workspace and scratch go with it"


def test_the_judges_environment_stays_with_the_judge(attack, monkeypatch):
    secret = secrets.token_hex(8)
    for key in ("GPUGRADE_SEED", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "GPUGRADE_TEST_SECRET"):
        monkeypatch.setenv(key, secret)
    s = attack("""
        import os
        def env():
            return repr(dict(os.environ))
    """)
    env = ast.literal_eval(s.call("env").value)
    assert secret not in repr(env), "a secret of the judge's environment reached the runner"
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR",
                        "GPUGRADE_CACHE_DIR", "PWD", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "CUDA_VISIBLE_DEVICES",
                        "GPUGRADE_PTXAS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                        "HOSTNAME", "LC_CTYPE", "PIP_DISABLE_PIP_VERSION_CHECK"}, sorted(env)  # (the image's own)


def test_no_network_not_even_loopback(attack):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    s = attack(f"""
        import socket
        def connect():
            outcomes = []
            for host, port in (("127.0.0.1", {port}), ("1.1.1.1", 53)):
                try:
                    socket.create_connection((host, port), timeout=2).close()
                    outcomes.append("connected")
                except OSError as exc:
                    outcomes.append(type(exc).__name__)
            return outcomes
    """)
    try:
        assert "connected" not in s.call("connect").value
    finally:
        server.close()


def test_another_runners_files_and_memory_are_out_of_reach(attack):
    victim = attack("""
        import os
        SECRET = "reference-output-" + "7" * 8
        def hold():
            with open("/tmp/held", "w") as f:
                f.write(SECRET)
            with open("/dev/shm/held", "w") as f:
                f.write(SECRET)
            return os.getpid()
    """, trusted=True)
    victim.call("hold")
    thief = attack("""
        import os
        def steal():
            found = []
            for path in ("/tmp/held", "/dev/shm/held"):
                if os.path.exists(path):
                    found.append(path)
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        with open(f"/proc/{entry}/environ", "rb") as f:
                            f.read()
                        os.listdir(f"/proc/{entry}/root/tmp")
                        if "held" in os.listdir(f"/proc/{entry}/root/tmp"):
                            found.append(entry)
                    except OSError:
                        pass
            return found
    """)
    assert thief.call("steal").value == []


def test_a_hostile_runner_leaves_an_honest_one_unchanged(attack):
    hostile = attack("""
        import os
        def vandalise():
            for path in ("/tmp", "/dev/shm"):
                for name in os.listdir(path):
                    try:
                        os.remove(os.path.join(path, name))
                    except OSError:
                        pass
            return 0
    """)
    honest = attack("""
        import numpy as np
        def add(a, b):
            return a + b
    """)
    hostile.call("vandalise")
    import numpy as np

    a = np.arange(5, dtype=np.float32)
    assert np.array_equal(honest.call("add", a, a).value, 2 * a)


def test_the_sandbox_kills_the_whole_process_tree_on_a_timeout(tmp_path, sandbox):
    marker = f"86400.{secrets.randbelow(10**9):09d}"
    (tmp_path / "ex.py").write_text(textwrap.dedent(f"""
        import os, time
        def hang():
            for _ in range(4):
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["sleep", "{marker}"])
            while True:
                time.sleep(1)
        def uid():
            return os.getuid()
    """))
    os.chmod(tmp_path, 0o755)
    limits = Limits(call_timeout_s=3)
    s = Student("ex", str(tmp_path), "gpu", type(sandbox)(limits, *([sandbox.settings] if hasattr(sandbox, "settings") else [])),
                allowed_imports=NO_POLICY)
    try:
        uid = s.call("uid").value
        with pytest.raises(Exception, match="timed out after 3 s"):
            s.call("hang")
        assert _gone(uid, marker), "the hung call's children outlived its timeout"
    finally:
        s.close()


# -- the judge believes no byte: replies forged on the protocol channel itself ---------------------
FORGER = """
    import json, os, stat, struct, sys, time
    def channel():
        if "--out-fd" in sys.argv:
            return int(sys.argv[sys.argv.index("--out-fd") + 1])
        found = []  # --stdio (docker): the protocol's stdin and stdout, duplicated (in, then out)
        for fd in range(3, 32):
            try:
                mode = os.fstat(fd).st_mode
            except OSError:
                continue
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                found.append(fd)
        return found[-1]
    def forge(x):
        body = json.dumps({{"message": {message}, "frames": {frames}}}).encode()
        out = channel()
        os.write(out, struct.pack("!Q", len(body)) + body)
        time.sleep(30)
"""
NAN_LAUNCH = ('{"ok": True, "returned": 1.0, "args": [None], "launches": [{"kernel": "k", "grid": [1, 1, 1], '
              '"block": [32, 1, 1], "counters": {"global_load_requests": 1, "global_load_sectors": float("nan")}}]}')


@pytest.mark.parametrize("message, frames, reason", [
    (NAN_LAUNCH, "[]", r"launches\[0\]\.counters\.global_load_sectors: nan is not a finite number"),
    ('{"ok": True, "returned": {"__ndarray__": 0, "dtype": "<f4", "shape": [536870912]}, "args": [None]}',
     "[2147483648]", "array frames of 2147483648 bytes; at most"),
    ('{"ok": True, "returned": "x" * (40 << 20), "args": [None]}', "[]", "a message of .* bytes; at most"),
    ('{"ok": True, "returned": 100.0, "args": [None], "score": 100, "launches": "many"}', "[]",
     "launches: expected a list"),
], ids=["nan-counters", "2GiB-frame", "40MB-message", "not-a-list"])
def test_a_forged_reply_is_a_protocol_error_naming_what_is_wrong(attack, message, frames, reason):
    s = attack(FORGER.format(message=message, frames=frames))
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        s.call("forge", 1.0)
    assert type(info.value).__name__ == "RunnerError"
    assert "the runner broke the protocol" in str(info.value) and __import__("re").search(reason, str(info.value))
    assert time.monotonic() - started < 20, "refused at once, not after reading or waiting"


def test_a_forged_timing_faster_than_the_judges_clock_is_refused(attack):
    """The gpu timing harness runs in the runner: kernel times that add up to more than the wall
    time the judge itself waited cannot be true."""
    reply = ('{"ok": True, "times_ms": [4000.0, 4000.0], "launches_per_call": 1, "wall_s": 8.0, '
             '"stopped": "precise", "device": "forged GPU", "outputs": [1.0]}')
    s = attack(FORGER.format(message=reply, frames="[]"))
    with pytest.raises(Exception) as info:
        s.time("forge", [(1.0,)])
    assert type(info.value).__name__ == "RunnerError" and "a forged timing" in str(info.value), info.value
