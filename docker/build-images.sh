#!/usr/bin/env bash
# Build gpugrade's images where no image registry is reachable (CI, this kind of machine):
#   1. a Debian bookworm base (minbase + python3 + venv) made with debootstrap and `docker import`;
#   2. every wheel the images need, fetched on the host (pip cannot reach the package index from
#      inside a container here) for the base's Python, into a wheels/ folder;
#   3. the Dockerfile's `runner` target (what --sandbox docker starts) and its production target.
# The rootfs tarball and the wheels are cached under $GPUGRADE_CACHE, so a second run on the same
# machine takes seconds; a fresh machine needs debootstrap and a package index for the wheels.
# The dependency stages are cached by docker as untagged images: `docker image prune` drops them,
# and the next build reinstalls every wheel (about 3 minutes instead of 15 seconds).
#
#   docker/build-images.sh           # both images
#   docker/build-images.sh runner    # only the runner image (all the docker-sandbox tests need)
#
# Settings (environment): GPUGRADE_CACHE (/var/cache/gpugrade-ci), GPUGRADE_BASE_IMAGE
# (gpugrade-base:bookworm), GPUGRADE_RUNNER_IMAGE (gpugrade-runner:latest), GPUGRADE_IMAGE
# (gpugrade:latest), DEBIAN_MIRROR (http://deb.debian.org/debian), PYTHON (the host Python that runs pip).
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
case "$what" in all|runner) ;; *) echo "usage: $0 [all|runner]" >&2; exit 2 ;; esac
CACHE=${GPUGRADE_CACHE:-/var/cache/gpugrade-ci}
BASE=${GPUGRADE_BASE_IMAGE:-gpugrade-base:bookworm}
RUNNER=${GPUGRADE_RUNNER_IMAGE:-gpugrade-runner:latest}
IMAGE=${GPUGRADE_IMAGE:-gpugrade:latest}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
BASE_PYTHON=3.11   # bookworm's python3: the wheels are fetched for it, whatever Python runs pip here
WHEELS="$CACHE/wheels"
started=$SECONDS
log() { echo "[build-images +$((SECONDS - started))s] $*" >&2; }
mkdir -p "$CACHE" "$WHEELS"

# -- 1. base image -------------------------------------------------------------------------------
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    rootfs_tar="$CACHE/rootfs-bookworm-python3.tar"
    if [ ! -s "$rootfs_tar" ]; then
        command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
        tmp=$(mktemp -d "$CACHE/rootfs.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        log "debootstrap bookworm minbase + python3 python3-venv (about 90 s) ..."
        if ! debootstrap --variant=minbase --include=python3,python3-venv bookworm "$tmp/rootfs" "$MIRROR" \
                >"$tmp/debootstrap.log" 2>&1; then
            tail -20 "$tmp/debootstrap.log" >&2
            exit 1
        fi
        rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
        tar -C "$tmp/rootfs" -cf "$rootfs_tar.part" . && mv "$rootfs_tar.part" "$rootfs_tar"
        rm -rf "$tmp"
        trap - EXIT
    fi
    log "docker import $rootfs_tar -> $BASE"
    docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["/bin/bash"]' "$rootfs_tar" "$BASE" >/dev/null
fi

# -- 2. wheels ----------------------------------------------------------------------------------
# gpugrade's dependencies with the gpu extra, and the build backend for installing gpugrade itself.
requirements="$CACHE/requirements.txt"
"$PYTHON" - "$requirements" <<'EOF'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
lines = project["dependencies"] + project["optional-dependencies"]["gpu"] + ["setuptools>=68", "wheel"]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
# pip does not widen a given --platform to the older manylinux tags it implies: list them all
# (bookworm has glibc 2.36).
arch=$(uname -m)
platforms=(--platform "manylinux2014_$arch" --platform "manylinux2010_$arch" --platform "manylinux1_$arch")
for glibc in $(seq 36 -1 5); do platforms+=(--platform "manylinux_2_${glibc}_$arch"); done
fetch() {
    "$PYTHON" -m pip download -q --disable-pip-version-check --dest "$WHEELS" --only-binary=:all: \
        --python-version "$BASE_PYTHON" --implementation cp --abi "cp${BASE_PYTHON/./}" "${platforms[@]}" \
        "$@" -r "$requirements"
}
if fetch --no-index --find-links "$WHEELS" 2>/dev/null; then
    log "wheels: all cached in $WHEELS"
else
    log "wheels: fetching into $WHEELS (about 400 MB the first time) ..."
    fetch
fi
# The build context's wheels/ (gitignored): hard links to the cache where it is on the same disk.
rm -rf wheels
cp -al "$WHEELS" wheels 2>/dev/null || cp -a "$WHEELS" wheels

# -- 3. images ----------------------------------------------------------------------------------
# The classic builder: it needs no buildx plugin and builds only the stages a target needs
# (in file order), caching each.
# Labelled with the grader's source digest: the tests rebuild an image made from other sources.
source=$(python3 docker/source_digest.py 2>/dev/null || "$PYTHON" docker/source_digest.py)
build() {
    DOCKER_BUILDKIT=0 docker build -q --build-arg BASE="$BASE" --label "gpugrade.source=$source" "$@" . \
        2> >(grep -v -e DEPRECATED -e 'legacy builder' -e 'BuildKit is currently disabled' -e 'environment-variable' \
             -e '^ *$' >&2) >/dev/null
}
log "docker build --target runner -> $RUNNER"
build --target runner -t "$RUNNER"
if [ "$what" = all ]; then
    log "docker build (production) -> $IMAGE"
    build -t "$IMAGE"
fi
log "done"
