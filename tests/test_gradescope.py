"""`gpugrade release --gradescope`: the autograder zip, run as Gradescope runs it.

A throwaway course (vector_add only, `os` and `time` allowed so that the attack really runs: the
static policy is feedback, never the defence) is released into a zip; the zip is run in a docker
container under docker's DEFAULT seccomp profile (Gradescope's: no namespaces, so bubblewrap cannot
start), as root, in the /autograder layout: setup.sh once (offline: pip from the CI wheel cache;
the container after it is kept as an image per zip digest, so a rerun of unchanged sources starts
at once), then run_autograder in a fresh container per submission. Needs a docker engine and the
base image docker/build-images.sh makes (skipped without, a failure in CI).
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gradescope_schema import RESULTS
from sandbox_support import unavailable, untag_old_sources


ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("GPUGRADE_CACHE", "/var/cache/gpugrade-ci"))
BASE = os.environ.get("GPUGRADE_BASE_IMAGE", "gpugrade-base:bookworm")
REPOSITORY = "gpugrade-gradescope-test"
LABEL = {"gpugrade.test": "gradescope"}
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/wheels"}  # no registry reachable from containers here

# Forks a daemon (setsid, double fork) when the runner imports it, which keeps trying to forge the
# results for 2 minutes: during the grade and after the judge has written them.
DAEMON = """
import os, time
def _forge_results_later():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            end = time.time() + 120
            while time.time() < end:
                for path in ("/autograder/results/results.json", "/autograder/results/forged.json"):
                    try:
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                        os.write(fd, b'{"score": 1000, "tests": []}')
                        os.close(fd)
                    except OSError:
                        pass
                time.sleep(0.1)
        os._exit(0)
    os.wait()
_forge_results_later()
"""


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    (course / "tests" / "exercises").mkdir(parents=True)
    (course / "solutions").mkdir()
    manifest = (ROOT / "course.toml").read_text()
    assert "\nallow_imports = []\n" in manifest
    (course / "course.toml").write_text(manifest.replace("\nallow_imports = []\n", '\nallow_imports = ["os", "time"]\n'))
    for name in ("test_vector_add.py", "reference_counters.json"):
        shutil.copy(ROOT / "tests" / "exercises" / name, course / "tests" / "exercises" / name)
    shutil.copy(ROOT / "solutions" / "vector_add.py", course / "solutions" / "vector_add.py")
    return course


@pytest.fixture(scope="module")
def autograder_zip(course) -> Path:
    if not (CACHE / "wheels").is_dir():
        unavailable(f"no wheel cache at {CACHE / 'wheels'} (docker/build-images.sh fills it) to build the zip offline")
    target = course / "autograder.zip"
    # (a Gradescope assignment of one homework: the zip grades its exercise only, run_autograder reads which)
    done = subprocess.run([sys.executable, "-m", "grader", "release", "--no-counters", "--gradescope", str(target),
                           "--gradescope-exercises", "vector_add"],
                          cwd=course, capture_output=True, text=True,
                          env=os.environ | {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(CACHE / "wheels")})
    assert done.returncode == 0, done.stderr
    return target


def test_a_zip_of_exercises_the_course_lacks_is_refused_before_anything_is_written(course, tmp_path):
    """(audit) the zip graded every exercise of the course: a one-exercise homework scored 25/111."""
    done = subprocess.run([sys.executable, "-m", "grader", "release", "--no-counters", "--gradescope",
                           str(tmp_path / "a.zip"), "--gradescope-exercises", "matmull"], cwd=course,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "no exercise matmull in the course (it has: vector_add)" in done.stderr, done.stderr
    assert not (tmp_path / "a.zip").exists()
    done = subprocess.run([sys.executable, "-m", "grader", "release", "--no-counters", "--gradescope-exercises",
                           "vector_add"], cwd=course, capture_output=True, text=True)
    assert done.returncode == 2 and "give --gradescope ZIP" in done.stderr, done.stderr


def test_the_zip_holds_the_judge_and_never_the_solutions(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as zf:
        entries = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
    assert entries["setup.sh"] == 0o755 and entries["run_autograder"] == 0o755
    assert {"course/course.toml", "course/tests/exercises/test_vector_add.py",
            "course/tests/exercises/reference_counters.json", "course/tests/exercises/released_files.json",
            "course/exercises/vector_add.py"} <= set(entries)
    assert [n.split("-")[0] for n in entries if n.startswith("dist/")] == ["dist/gpugrade"]  # one wheel
    with zipfile.ZipFile(autograder_zip) as zf:
        assert zf.read("exercises.txt").decode() == "vector_add\n"
    assert not [n for n in entries if "solutions" in n or "submissions" in n], sorted(entries)


@pytest.fixture(scope="module")
def client(docker_client):
    """The engine, with time for what the conftest's client (10 s) does not wait for: committing
    and removing a container of a GiB, a grade."""
    import docker

    slow = docker.from_env(timeout=900)
    yield slow
    slow.close()


@pytest.fixture(scope="module")
def gradescope_image(client, autograder_zip, tmp_path_factory) -> str:
    """The base image after setup.sh of this zip (Gradescope's image build), made once per zip."""
    import hashlib

    import docker.errors

    try:
        client.images.get(BASE)
    except docker.errors.ImageNotFound:
        unavailable(f"no base image {BASE} (docker/build-images.sh makes it)")
    digest = hashlib.sha256(autograder_zip.read_bytes()).hexdigest()[:16]
    image = f"{REPOSITORY}:src-{digest}"
    try:
        client.images.get(image)
        return image
    except docker.errors.ImageNotFound:
        pass
    source = tmp_path_factory.mktemp("source")
    with zipfile.ZipFile(autograder_zip) as zf:
        for info in zf.infolist():  # as Gradescope unzips it: modes kept
            zf.extract(info, source)
            os.chmod(source / info.filename, (info.external_attr >> 16) & 0o777)
    container = client.containers.run(
        BASE, ["bash", "-c", "mkdir -p /autograder && cp -a /zip /autograder/source && "
                             "cp /autograder/source/run_autograder /autograder/ && cd /autograder/source && bash ./setup.sh"],
        volumes={str(source): {"bind": "/zip", "mode": "ro"}, str(CACHE / "wheels"): {"bind": "/wheels", "mode": "ro"}},
        environment=OFFLINE, labels=LABEL, detach=True)
    try:
        status = container.wait(timeout=900)["StatusCode"]
        assert status == 0, container.logs()[-3000:].decode(errors="replace")
        container.commit(REPOSITORY, f"src-{digest}")
    finally:
        container.remove(force=True)
    untag_old_sources(client, image, REPOSITORY)
    return image


def run_autograder(client, image: str, submission: str, tmp_path: Path, before: str = "true", after: str = "") -> dict:
    """run_autograder on `submission` (vector_add.py's text) in a fresh container of `image` with
    docker's default seccomp profile, `before` and `after` it shell commands. Returns {"results":
    results.json, "log": its output, and the other files `after` wrote to /out}."""
    sub, out = tmp_path / "submission", tmp_path / "out"
    sub.mkdir(parents=True)
    out.mkdir(parents=True)
    (sub / "vector_add.py").write_text(submission)
    script = (f"mkdir -p /autograder/submission && cp -a /sub/. /autograder/submission/ && {before} && "
              "/autograder/run_autograder >/out/log 2>&1; cp /autograder/results/results.json /out/results.json; "
              + after)
    container = client.containers.run(image, ["bash", "-c", script], labels=LABEL, detach=True,
                                      volumes={str(sub): {"bind": "/sub", "mode": "ro"}, str(out): {"bind": "/out"}})
    try:
        assert container.wait(timeout=600)["StatusCode"] == 0, container.logs()[-3000:]
    finally:
        container.remove(force=True)
    found = {p.name: p.read_text() for p in out.iterdir()}
    found["results"] = json.loads(found.pop("results.json"))
    return found


def _valid(doc: dict) -> dict:
    import jsonschema

    jsonschema.validate(doc, RESULTS)
    return doc


def test_a_good_and_a_wrong_submission_are_graded_in_the_uid_sandbox(client, gradescope_image, tmp_path):
    good = run_autograder(client, gradescope_image, (ROOT / "solutions" / "vector_add.py").read_text(),
                          tmp_path / "good")
    results = _valid(good["results"])
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0, good["log"][-3000:]
    assert "in the uid sandbox" in results["output"], results["output"]
    wrong = run_autograder(client, gradescope_image,
                           (ROOT / "solutions" / "vector_add.py").read_text().replace("        out[i] = a[i] + b[i]\n",
                                                                                     "        out[i] = a[i] - b[i]\n", 1),
                           tmp_path / "wrong")
    results = _valid(wrong["results"])
    failed = {t["name"].split("[")[0] for t in results["tests"] if t["status"] == "failed"}
    assert 0 < results["score"] < sum(t["max_score"] for t in results["tests"]), wrong["log"][-3000:]
    assert "vector_add::edge_sizes" in failed, failed


def test_a_daemon_cannot_rewrite_the_results_after_the_judge(client, gradescope_image, tmp_path):
    solution = (ROOT / "solutions" / "vector_add.py").read_text()
    after = ("sleep 6; cp /autograder/results/results.json /out/later.json; ls /autograder/results > /out/listing; "
             "python3 -c 'import os; print([p for p in os.listdir(\"/proc\") if p.isdigit() and "
             "os.stat(\"/proc/\" + p).st_uid >= 0x30000000])' > /out/left")
    found = run_autograder(client, gradescope_image, solution + DAEMON, tmp_path, after=after)
    results = _valid(found["results"])
    assert json.loads(found["later.json"]) == results, "the results changed after run_autograder wrote them"
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0, found["log"][-3000:]
    assert found["listing"].split() == ["results.json"], found["listing"]
    assert found["left"].strip() == "[]", f"processes of a runner's uid outlived the grade: {found['left']}"


def test_a_grader_that_cannot_run_still_leaves_valid_results(client, gradescope_image, tmp_path):
    """Gradescope's "autograder failed" is a missing or malformed results.json: a crash of the
    grader (here: its command gone) gives score 0 and says so, to the student and the instructor."""
    found = run_autograder(client, gradescope_image, "def vector_add(a, b):\n    return a + b\n", tmp_path,
                           before="mv /opt/gpugrade/venv/bin/gpugrade /opt/gpugrade/gone")
    results = _valid(found["results"])
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith("The autograder failed: the grader exited with status 127"), results["output"]
    assert "No such file" in results["extra_data"]["log_tail"], results["extra_data"]
