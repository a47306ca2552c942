"""The docker sandbox under attack: each escape a student might try, and what it gets them.

Needs a docker engine and the runner image (docker/build-images.sh builds it; the session fixture
runs that script when the image is missing). Without an engine these tests skip, except in CI
(the CI environment variable set), where a missing engine is a failure: they must run there.
The static policy is widened in most of them, so that the attack really runs inside the container.
"""

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from grader.sandbox.container import RUNNER_LABEL, DockerSandbox, DockerSettings
from grader.errors import RunnerError, StudentCodeError
from grader.judge import Student
from grader.judge.policy import DEFAULT_ALLOWED_IMPORTS
from grader.sandbox import Limits, NoSandbox

from sandbox_support import unavailable as _unavailable


ROOT = Path(__file__).resolve().parents[1]
PRODUCTION_IMAGE = os.environ.get("GPUGRADE_IMAGE", "gpugrade:latest")
WIDE_POLICY = DEFAULT_ALLOWED_IMPORTS | {"os", "signal", "sys", "socket", "ctypes", "time"}


def runners_of(docker_client, folder) -> list:
    """The runner containers (any state) whose workspace lies under `folder`: this test's own, not
    those another test or a grading beside it made."""
    return [c for c in docker_client.containers.list(all=True, filters={"label": RUNNER_LABEL})
            if any(m.get("Source", "").startswith(f"{folder}/") for m in c.attrs.get("Mounts", []))]


@pytest.fixture
def make_student(tmp_path, runner_image, docker_client):
    students = []

    def make(source: str, timeout: float = 30.0, policy=WIDE_POLICY, limits: Limits | None = None,
             **settings) -> Student:
        work = tmp_path / f"work{len(students)}"
        work.mkdir()
        (work / "ex.py").write_text(textwrap.dedent(source))
        limits = limits or Limits(call_timeout_s=timeout)
        sandbox = DockerSandbox(limits, DockerSettings(image=runner_image, **settings))
        s = Student("ex", str(work), "gpu", sandbox, allowed_imports=policy)
        students.append(s)
        return s

    yield make
    for s in students:
        s.close()
    assert not runners_of(docker_client, tmp_path), "every runner container is removed when its student is closed"


def test_calls_round_trip_through_the_container_and_prints_cannot_forge_a_reply(make_student):
    s = make_student("""
        import sys
        def scale(x, k):
            print('{"ok": true, "returned": 100}' * 1000)
            sys.stdout.buffer.write(bytes(range(256)) * 100)
            x *= k
            return x.sum()
    """)
    x = np.arange(1 << 20, dtype=np.float64)  # 8 MB: many of docker's stream frames each way
    result = s.call("scale", x, 2)
    assert result.value == 2 * x.sum()
    assert np.array_equal(result.args[0], 2 * x)


def test_the_container_is_confined_as_configured(make_student, docker_client, tmp_path):
    s = make_student("def f():\n    return 0\n")
    s.call("f")
    (container,) = runners_of(docker_client, tmp_path)
    host, config = container.attrs["HostConfig"], container.attrs["Config"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["Memory"] == host["MemorySwap"] == DockerSettings.memory_bytes
    assert host["PidsLimit"] == DockerSettings.pids and host["NanoCpus"] == int(DockerSettings.cpus * 1e9)
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert not host.get("DeviceRequests"), "no GPU unless --gpus asks for one"
    assert host["Binds"] == [f"{s.workspace}:/workspace:ro"]
    assert host["IpcMode"] == "private" and host["CgroupnsMode"] == "private"
    uid = int(config["User"].split(":")[0])
    assert "/tmp" in host["Tmpfs"] and uid not in (0, 65534), "a uid of its own, never root or nobody"


def test_gpus_become_device_requests():
    from grader.sandbox.container import _gpu_requests

    assert _gpu_requests("") == []
    (every,) = _gpu_requests("all")
    assert every["Count"] == -1 and every["Capabilities"] == [["gpu"]]
    (some,) = _gpu_requests("0, 1")
    assert some["DeviceIDs"] == ["0", "1"]


def test_infinite_loop_times_out_and_the_next_call_gets_a_fresh_container(make_student):
    s = make_student("""
        def spin():
            while True:
                pass
        def ok():
            return 7
    """, timeout=5)
    started = time.monotonic()
    with pytest.raises(RunnerError, match="timed out after 5 s"):
        s.call("spin")
    assert time.monotonic() - started < 15, "a hard kill, not a polite wait"
    assert s.call("ok").value == 7


def test_memory_bomb_is_killed_as_out_of_memory(make_student):
    s = make_student("""
        def bomb():
            hoard = []
            while True:
                hoard.append(b"x" * (16 << 20))
        def ok():
            return 1
    """, memory_bytes=256 << 20)
    with pytest.raises(RunnerError, match="killed: out of memory"):
        s.call("bomb")
    assert s.call("ok").value == 1


def test_fork_bomb_stops_at_the_pids_limit_and_the_judge_survives(make_student):
    s = make_student("""
        import os, time
        def bomb():
            parent = os.getpid()
            while True:
                try:
                    os.fork()
                except OSError:
                    if os.getpid() != parent:
                        while True:  # children hold their slot, as a real bomb's would
                            time.sleep(1)
                    raise
        def ok():
            return 2
    """)
    with pytest.raises(StudentCodeError, match="BlockingIOError|Resource temporarily unavailable"):
        s.call("bomb")
    s.close()  # the container goes, with every process in it
    assert s.call("ok").value == 2


def test_cpu_time_limit_kills_a_busy_runner(make_student):
    s = make_student("""
        def spin():
            while True:
                pass
    """, limits=Limits(call_timeout_s=60, cpu_time_s=2))
    with pytest.raises(RunnerError, match="killed: CPU time limit of 2 s exceeded"):
        s.call("spin")


def test_no_network_at_all(make_student):
    s = make_student("""
        import socket
        def reach():
            outcomes = []
            for host, port in (("1.1.1.1", 53), ("172.17.0.1", 2375), ("deb.debian.org", 80)):
                try:
                    socket.create_connection((host, port), timeout=2).close()
                    outcomes.append("connected")
                except OSError as exc:
                    outcomes.append(type(exc).__name__)
            return ",".join(outcomes)
    """)
    outcomes = s.call("reach").value.split(",")
    assert "connected" not in outcomes, outcomes


def test_course_files_are_not_mounted(make_student):
    s = make_student(f"""
        import os
        def look():
            found = [p for p in ({str(ROOT / "solutions")!r}, {str(ROOT / "tests")!r}, "/workspace/../solutions",
                                 "/opt/gpugrade/course") if os.path.exists(p)]
            for folder, dirs, files in os.walk("/"):
                if folder.startswith(("/proc", "/sys")):
                    dirs[:] = []
                found += [os.path.join(folder, f) for f in files if f in ("course.toml", "test_vector_add.py")]
                found += [os.path.join(folder, d) for d in dirs if d == "solutions"]
            return ";".join(found) + "|" + ",".join(sorted(os.listdir("/workspace")))
    """)
    found, workspace = s.call("look").value.split("|")
    assert found == "", f"course files visible inside the container: {found}"
    assert workspace == "ex.py", "the workspace holds the student's module only"


def test_a_fake_results_file_cannot_be_written_where_the_judge_looks(make_student, tmp_path):
    judge = tmp_path / "judge"
    judge.mkdir()
    results = judge / "results.json"
    results.write_text('{"score": 0}')
    s = make_student(f"""
        import os
        FORGED = '{{"score": 100, "tests": []}}'
        def forge():
            outcomes = {{}}
            for path in ({str(results)!r}, "/workspace/results.json", "/results.json", "/autograder/results/results.json"):
                try:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.write(fd, FORGED.encode())
                    os.close(fd)
                    outcomes[path] = "written"
                except OSError as exc:
                    outcomes[path] = os.strerror(exc.errno)
            return repr(outcomes)
    """)
    outcomes = ast.literal_eval(s.call("forge").value)
    # the judge's own path lies under /tmp here: inside, that is the container's private tmpfs
    assert {p: o for p, o in outcomes.items() if not p.startswith("/tmp/")} == dict.fromkeys(
        ["/workspace/results.json", "/results.json", "/autograder/results/results.json"], "Read-only file system")
    assert results.read_text() == '{"score": 0}', "the judge's results file is out of reach"
    assert not (Path(s.workspace) / "results.json").exists()


def test_garbage_on_the_protocol_stream_costs_that_call_only(make_student):
    s = make_student("""
        import os
        def scribble():
            for fd in range(3, 10):
                try:
                    os.write(fd, b"\\xff" * 64)
                except OSError:
                    pass
            return 1
        def ok():
            return 4
    """)
    started = time.monotonic()
    with pytest.raises(RunnerError, match="broke the protocol"):
        s.call("scribble")
    assert time.monotonic() - started < 5
    assert s.call("ok").value == 4


def test_exit_at_import_is_a_runner_failure_not_a_pass(make_student):
    s = make_student("""
        import os
        os._exit(0)
    """)
    with pytest.raises(RunnerError, match="exited with code 0 before answering"):
        s.call("f")


def test_interpreter_crash_is_reported_by_signal(make_student):
    s = make_student("""
        import ctypes
        def boom():
            return ctypes.string_at(1, 16)  # page 0 is never mapped (address 0 itself means "new bytes")
        def ok():
            return 3
    """)
    with pytest.raises(RunnerError, match="crashed: killed by SIGSEGV"):
        s.call("boom")
    assert s.call("ok").value == 3


def test_the_students_output_reaches_the_failure_message(make_student):
    s = make_student("""
        import os
        def talk():
            print("about to leave")
            os._exit(5)
    """)
    with pytest.raises(RunnerError, match="exited with code 5") as info:
        s.call("talk")
    assert "about to leave" in info.value.output


def test_no_sandbox_runs_the_same_calls_without_limits(tmp_path):
    (tmp_path / "ex.py").write_text("def f(x):\n    return x + 1\n")
    s = Student("ex", str(tmp_path), "gpu", NoSandbox(Limits(call_timeout_s=30)))
    try:
        assert s.call("f", 41).value == 42
    finally:
        s.close()


# -- the command line --------------------------------------------------------------------------
def gpugrade(*args):
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_reference_vector_add_scores_full_marks_in_the_docker_sandbox(runner_image, tmp_path):
    out = tmp_path / "r.json"
    done = gpugrade("grade", "solutions", "vector_add", "--sandbox", "docker", "--docker-image", runner_image,
                    "--backend", "sim", "--format", "gradescope", "--output", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["tests"] and all(t["status"] == "passed" for t in doc["tests"]), doc
    assert doc["score"] == sum(t["max_score"] for t in doc["tests"]) > 0


def test_sandbox_none_grades_through_the_same_path():
    done = gpugrade("grade", "solutions", "vector_add", "--sandbox", "none", "--backend", "sim")
    assert done.returncode == 0 and re.search(r"Total: (\d+)/\1 ", done.stdout), done.stdout + done.stderr


def test_a_missing_runner_image_is_a_usage_error(docker_client):
    done = gpugrade("grade", "solutions", "vector_add", "--sandbox", "docker", "--docker-image",
                    "gpugrade-no-such-image:none", "--backend", "sim")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "docker/build-images.sh" in done.stderr


def test_gpus_apply_to_the_docker_sandbox_only():
    done = gpugrade("grade", "solutions", "vector_add", "--gpus", "all", "--backend", "sim")
    assert done.returncode == 2 and "--sandbox docker only" in done.stderr, done.stderr


@pytest.mark.slow
def test_production_image_grades_a_mounted_submission(docker_client, tmp_path):
    import docker.errors

    try:
        docker_client.images.get(PRODUCTION_IMAGE)
    except docker.errors.ImageNotFound:
        _unavailable(f"no production image {PRODUCTION_IMAGE}: docker/build-images.sh builds it")
    # the runners' bubblewrap needs what `--security-opt seccomp=unconfined --security-opt
    # systempaths=unconfined` gives (the SDK spells the second as empty masked and read-only paths)
    api = docker_client.api
    host = api.create_host_config(binds={str(ROOT / "solutions"): {"bind": "/submission", "mode": "ro"}},
                                  network_mode="none", security_opt=["seccomp=unconfined"])
    host.update(MaskedPaths=[], ReadonlyPaths=[])
    created = api.create_container(PRODUCTION_IMAGE, ["grade", "/submission", "vector_add", "--backend", "sim",
                                                      "--format", "json"], host_config=host)
    try:
        api.start(created["Id"])
        code = api.wait(created["Id"], timeout=600)["StatusCode"]
        output = api.logs(created["Id"], stdout=True, stderr=False)
        errors = api.logs(created["Id"], stdout=False, stderr=True)
    finally:
        api.remove_container(created["Id"], force=True)
    assert code == 0, (errors + output).decode()[-4000:]  # (a grader error is in the JSON: its "errors")
    doc = json.loads(output)
    assert doc["tests"] and all(t["status"] == "passed" for t in doc["tests"]), doc
    # the course's grading tests and known-wrong submissions, not the developer suite (whose
    # conftest the judge's pytest would load)
    listing = docker_client.containers.run(PRODUCTION_IMAGE, ["-c", "import os; print(sorted(os.listdir('tests')))"],
                                           entrypoint="python", network_mode="none", remove=True)
    assert listing.decode().strip() == "['exercises', 'submissions']", listing
