# The CUDA image that grades: `docker run --gpus all --security-opt seccomp=unconfined --security-opt
# systempaths=unconfined IMAGE grade /submission` (the submission folder mounted there; every
# `gpugrade grade` option works, e.g. --format gradescope --output ...).
# Two targets from one file:
#   (default)  the production image: gpugrade[gpu] and the course (course.toml, tests/exercises/,
#              tests/submissions/, solutions/, exercises/), run as the user `grader`; ENTRYPOINT gpugrade.
#   runner     what `gpugrade grade --sandbox docker` starts for every runner: python, gpugrade's
#              dependencies and the grader package, no course files at all (docker build --target runner).
# BASE is any image with python3 >= 3.10 and venv (installed with apt when missing): nvidia/cuda, or
# the Debian base that docker/build-images.sh makes with debootstrap where no registry is reachable.
# The CUDA user-space libraries come from the numba-cuda[cu13] and CuPy wheels; the NVIDIA container
# toolkit injects the driver at `docker run --gpus`.
# wheels/ (optional, gitignored): every wheel needed, for machines without a package index; it is
# what docker/build-images.sh fills (pip cannot reach the index from inside a build there).
ARG BASE=nvidia/cuda:13.0.0-base-ubuntu24.04

FROM ${BASE} AS python
RUN if ! command -v python3 >/dev/null || ! python3 -m venv --help >/dev/null 2>&1; then \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv && \
        rm -rf /var/lib/apt/lists/*; \
    fi && \
    (id grader >/dev/null 2>&1 || useradd --create-home --uid 10001 grader)
ENV LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

# The dependencies alone (a stub stands in for the grader), so that editing the grader or the
# course reinstalls nothing heavy.
FROM python AS deps
COPY pyproject.toml wheel[s] /opt/gpugrade/build/
RUN mkdir -p /opt/gpugrade/build/grader && touch /opt/gpugrade/build/grader/__init__.py /opt/gpugrade/build/README.md && \
    if ls /opt/gpugrade/build/*.whl >/dev/null 2>&1; then \
        export PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/gpugrade/build; \
    fi && \
    python3 -m venv /opt/gpugrade/venv && \
    /opt/gpugrade/venv/bin/pip install --no-cache-dir "setuptools>=68" wheel /opt/gpugrade/build && \
    /opt/gpugrade/venv/bin/pip uninstall -y gpugrade

FROM deps AS deps-gpu
RUN if ls /opt/gpugrade/build/*.whl >/dev/null 2>&1; then \
        export PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/gpugrade/build; \
    fi && \
    /opt/gpugrade/venv/bin/pip install --no-cache-dir "/opt/gpugrade/build[gpu]" && \
    /opt/gpugrade/venv/bin/pip uninstall -y gpugrade

# The runner image: the student's side. No course files; the docker sandbox mounts the student's
# workspace read-only at /workspace and runs this as a uid of its own, without network.
FROM python AS runner
COPY --from=deps /opt/gpugrade/venv /opt/gpugrade/venv
COPY pyproject.toml README.md /opt/gpugrade/src/
COPY grader /opt/gpugrade/src/grader
RUN /opt/gpugrade/venv/bin/pip install --no-cache-dir --no-deps --no-index --no-build-isolation /opt/gpugrade/src && \
    rm -rf /opt/gpugrade/src
ENV PATH=/opt/gpugrade/venv/bin:$PATH
WORKDIR /workspace
USER 65534:65534
ENTRYPOINT ["python", "-I", "-m", "grader.runner"]
CMD ["--help"]

# The production image (default target): the judge and the course. Inside it each runner is in the
# process sandbox (bubblewrap: its own namespaces, uid and view; the course is not in it), which
# needs the container started with `--security-opt seccomp=unconfined --security-opt
# systempaths=unconfined` (docker's defaults forbid the user namespace and the /proc mount it makes).
FROM python AS production
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
COPY --from=deps-gpu /opt/gpugrade/venv /opt/gpugrade/venv
COPY pyproject.toml README.md /opt/gpugrade/src/
COPY grader /opt/gpugrade/src/grader
RUN /opt/gpugrade/venv/bin/pip install --no-cache-dir --no-deps --no-index --no-build-isolation /opt/gpugrade/src && \
    rm -rf /opt/gpugrade/src
COPY pyproject.toml course.toml README.md /opt/gpugrade/course/
COPY exercises /opt/gpugrade/course/exercises
COPY solutions /opt/gpugrade/course/solutions
# the grading tests and the known-wrong submissions (gpugrade validate), not the developer suite:
# the judge's pytest would load its conftest
COPY tests/exercises /opt/gpugrade/course/tests/exercises
COPY tests/submissions /opt/gpugrade/course/tests/submissions
ENV PATH=/opt/gpugrade/venv/bin:$PATH
WORKDIR /opt/gpugrade/course
USER grader
ENTRYPOINT ["gpugrade"]
CMD ["doctor"]
