# The CUDA image that grades: `docker run --gpus all IMAGE grade /submission`.
# First version: the judge & sandbox work adds the locally built CI base and the docker sandbox.
# BASE is any image with python3 >= 3.10 and venv; the CUDA user-space libraries come from the
# numba-cuda[cu13] and CuPy wheels, and the NVIDIA container toolkit injects the driver.
ARG BASE=nvidia/cuda:13.0.0-base-ubuntu24.04
FROM ${BASE}

RUN if ! command -v python3 >/dev/null || ! python3 -m venv --help >/dev/null 2>&1; then \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv && \
        rm -rf /var/lib/apt/lists/*; \
    fi
# wheels/ may hold pre-downloaded wheels for machines without a package index (pip wheel -w wheels .[gpu]).
COPY . /opt/gpugrade/src
RUN python3 -m venv /opt/gpugrade/venv && \
    if [ -d /opt/gpugrade/src/wheels ]; then \
        /opt/gpugrade/venv/bin/pip install --no-index --find-links /opt/gpugrade/src/wheels "/opt/gpugrade/src[gpu]"; \
    else \
        /opt/gpugrade/venv/bin/pip install "/opt/gpugrade/src[gpu]"; \
    fi && \
    useradd --create-home --uid 10001 grader
ENV PATH=/opt/gpugrade/venv/bin:$PATH
WORKDIR /opt/gpugrade/src
USER grader
ENTRYPOINT ["gpugrade"]
CMD ["doctor"]
