#!/usr/bin/env bash
# The sandbox suites again as an ordinary user (a student's laptop, a grading host run without
# root): bubblewrap then makes an unprivileged user namespace, the runner keeps that user's uid,
# and no cgroups exist; the docker sandbox as a member of the docker group. Called by .ci/run (as root) after `make test`; needs Debian's python3
# with venv (ensurepip). Creates the user `gpugrade-ci`, copies this checkout's HEAD into its home
# and installs the project there, with the wheels docker/build-images.sh cached where they fit.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! /usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null; then  # Debian's python3 without venv
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
user=gpugrade-ci
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
# the docker sandbox as a non-root user: a member of the docker group (the engine is root's)
getent group docker >/dev/null && usermod -aG docker "$user"
home=$(getent passwd "$user" | cut -d: -f6)
wheels=${GPUGRADE_CACHE:-/var/cache/gpugrade-ci}/wheels
as_user() { runuser -u "$user" -- env -i HOME="$home" PATH=/usr/bin:/bin CI="${CI:-1}" "$@"; }

rm -rf "$home/repo"
mkdir -p "$home/repo"
git archive --format=tar HEAD | tar -x -C "$home/repo"  # the checkout may be where the user cannot read
chown -R "$user:" "$home/repo"
links=()
[ -d "$wheels" ] && links=(--find-links "$wheels")
if [ ! -x "$home/venv/bin/python" ]; then
    as_user /usr/bin/python3 -m venv "$home/venv"
fi
as_user "$home/venv/bin/pip" install -q --disable-pip-version-check "${links[@]}" -e "$home/repo[dev]"
cd "$home/repo"
as_user "$home/venv/bin/python" -m pytest -q -p no:cacheprovider -n auto --maxprocesses 4 --dist loadgroup \
    tests/test_sandbox_attacks.py tests/test_device_process.py tests/test_runner.py
