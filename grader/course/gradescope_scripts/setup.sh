#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (the zip is at
# /autograder/source; `gpugrade release --gradescope` wrote it). It installs Python's venv where it
# is missing, gpugrade from the zip's wheel into /opt/gpugrade/venv (readable by every user: the
# runners' own uids run its interpreter) with its dependencies from PyPI (or wherever pip's own
# settings point: PIP_INDEX_URL, PIP_NO_INDEX + PIP_FIND_LINKS), and bubblewrap where apt can: the
# process sandbox where the container lets it make namespaces, else run_autograder uses the uid one.
set -euo pipefail
SOURCE=$(cd "$(dirname "$0")" && pwd)
VENV=/opt/gpugrade/venv

apt_install() {
    command -v apt-get >/dev/null || return 1
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

command -v python3 >/dev/null || apt_install python3 python3-venv
mkdir -p /opt/gpugrade
if ! python3 -m venv "$VENV"; then  # Debian and Ubuntu ship venv's pip apart: python3.X-venv
    rm -rf "$VENV"
    apt_install python3-venv "python3.$(python3 -c 'import sys; print(sys.version_info[1])')-venv"
    python3 -m venv "$VENV"
fi
if ! command -v bwrap >/dev/null; then
    apt_install bubblewrap || echo "setup.sh: bubblewrap not installed: grading will use the uid sandbox"
fi
wheel=$(ls "$SOURCE"/dist/gpugrade-*.whl)
# a course released with notebooks is submitted with them: reading one needs the notebooks extra
if compgen -G "$SOURCE/course/exercises/*.ipynb" >/dev/null; then wheel="$wheel[notebooks]"; fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
chmod -R a+rX,go-w /opt/gpugrade
"$VENV/bin/gpugrade" doctor || true
