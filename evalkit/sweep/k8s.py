"""A sweep as Kubernetes Jobs: manifests that run each combination of :func:`~evalkit.sweep.combinations.plan` as its
own pod, writing ``runs/<name>/`` on a shared volume, so that ``evalkit sweep FILE -o DIR --collect`` (the
``collect/`` Job) tabulates them afterwards exactly as a local sweep does.

- A ConfigMap holds each combination's run config (``<name>.yaml``, read by ``evalkit run --config``) and the
  sweep file itself (``sweep.yaml``, for the collect Job).
- With ``server:`` each combination is one Job whose pod runs vLLM as a native sidecar (an init container with
  ``restartPolicy: Always``, Kubernetes >= 1.29) on its own GPUs, and evalkit against it on 127.0.0.1 once the
  sidecar's startup probe on ``/health`` passes; the sidecar stops when evalkit ends. No two combinations share
  a server, so the Jobs may run in parallel without one run's load showing in another's timings.
- With ``endpoint:`` the combinations of a config share that endpoint, so they are one Indexed Job with
  ``parallelism: 1``: one pod per combination, one after the other, each retried on its own.
- Exit code 2 of ``evalkit run`` (bad input) fails the pod's index at once; other failures are retried, and a
  retried run resumes in its run dir.
"""

from __future__ import annotations

import hashlib
import re
from itertools import groupby
from pathlib import Path
from typing import Any

import yaml

from evalkit.config import ServerConfig
from evalkit.errors import ConfigError
from evalkit.redact import redact_env, redact_url
from evalkit.server.launch import build_argv
from evalkit.server.vllm_process import VLLMServer
from evalkit.sweep.combinations import Combination, plan
from evalkit.sweep.sweep_file import SweepSpec

SWEEP_MOUNT = "/sweep"  # the shared volume: runs/<name>/ as a local sweep's output folder
CONFIG_MOUNT = "/etc/evalkit"
VLLM_PORT = 8000
BACKOFF_PER_INDEX = 2


class _Dumper(yaml.SafeDumper):
    """YAML as people write manifests: no anchors for repeated mappings, multi-line strings as ``|`` blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _str)


def dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False)


def k8s_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label from ``parts``; a short hash of the original keeps names apart that only differed in
    case or in characters Kubernetes does not allow, or that had to be cut to ``limit``."""
    raw = "-".join(parts)
    name = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", raw.lower())).strip("-")
    if name != raw or len(name) > limit:
        digest = hashlib.sha1(raw.encode()).hexdigest()[:6]
        name = f"{name[: limit - 7].rstrip('-')}-{digest}"
    return name


def emit(
    spec: SweepSpec,
    out_dir: Path,
    *,
    image: str,
    pvc: str,
    sweep_name: str,
    namespace: str | None = None,
    model_cache_pvc: str | None = None,
    api_key_secret: str | None = None,
) -> list[Path]:
    """Write the sweep's manifests into ``out_dir`` (``kubectl apply -f out_dir``) and the collect Job into
    ``out_dir/collect/`` (applied once the Jobs have finished); returns the files written."""
    docs = manifests(
        spec,
        image=image,
        pvc=pvc,
        sweep_name=sweep_name,
        namespace=namespace,
        model_cache_pvc=model_cache_pvc,
        api_key_secret=api_key_secret,
    )
    (out_dir / "collect").mkdir(parents=True, exist_ok=True)
    written = []
    for doc in docs:
        sub = "collect" if doc["metadata"]["labels"].get("evalkit.sweep/role") == "collect" else "."
        path = out_dir / sub / f"{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
        path.write_text(dump(doc))
        written.append(path)
    return written


def manifests(
    spec: SweepSpec,
    *,
    image: str,
    pvc: str,
    sweep_name: str,
    namespace: str | None = None,
    model_cache_pvc: str | None = None,
    api_key_secret: str | None = None,
) -> list[dict[str, Any]]:
    """The ConfigMap, the Jobs of the combinations and the collect Job, as Kubernetes objects."""
    if spec.server is not None and spec.server.get("api_key") is not None:
        raise ConfigError(
            "server.api_key would be written into the manifests; leave it out and protect the server "
            "by the cluster's network policy"
        )
    _refuse_credentials(spec)
    base = k8s_name("evalkit", sweep_name)
    ctx = _Ctx(base, image, pvc, namespace, model_cache_pvc, api_key_secret, sweep_name)
    combos = plan(spec)
    docs: list[dict[str, Any]] = [ctx.configmap(spec, combos)]
    if spec.server is not None:
        docs += [ctx.server_job(c) for c in combos]
    else:
        docs += [ctx.endpoint_job(config, list(group)) for config, group in groupby(combos, key=lambda c: c.config)]
    docs.append(ctx.collect_job())
    return docs


def _refuse_credentials(spec: SweepSpec) -> None:
    """ConfigError when a credential would be written into the manifests in plain text: an endpoint URL's
    ``user:password@`` or secret query parameter (``?api_key=``), or a server ``env`` variable named like a secret
    (the ConfigMap holds the run configs and the sweep file; the Jobs the sidecar's environment)."""
    fix = (
        "which --k8s would write into the ConfigMap in plain text; take it out and give the key from a Secret "
        "with --api-key-secret NAME (kubectl create secret generic NAME --from-literal=EVALKIT_API_KEY=...), "
        "sent as Authorization: Bearer"
    )
    if spec.server is None:
        for name in spec.configs:
            url = spec.endpoint_config(name).endpoint or ""
            if redact_url(url) != url:
                shown = redact_url(url)
                raise ConfigError(f"configs.{name}: the endpoint {shown} carries a credential in its URL, {fix}")
    else:
        for name in spec.configs:
            env = spec.server_config(name).env
            secret = sorted(k for k, v in redact_env(env).items() if v != env[k])
            if secret:
                raise ConfigError(
                    f"configs.{name}: server env {', '.join(secret)} would be written into the manifests in plain "
                    "text; leave it out of the sweep file and give it to the vllm container from a Secret (a patch "
                    "of the Jobs adding env valueFrom.secretKeyRef)"
                )


def run_config(combo: Combination, endpoint: str | None) -> dict[str, Any]:
    """The ``evalkit run --config`` file of one combination, writing ``SWEEP_MOUNT/runs/<name>``."""
    cfg = {k: v for k, v in combo.settings.items() if v is not None}
    cfg["output_dir"] = f"{SWEEP_MOUNT}/runs/{combo.name}"
    if endpoint is not None:
        cfg["endpoint"] = endpoint
    return cfg


class _Ctx:
    """What every object of one sweep shares: names, labels, images and volumes."""

    def __init__(
        self,
        base: str,
        image: str,
        pvc: str,
        namespace: str | None,
        model_cache_pvc: str | None,
        api_key_secret: str | None,
        sweep_name: str,
    ):
        self.base, self.image, self.pvc, self.namespace = base, image, pvc, namespace
        self.model_cache_pvc, self.api_key_secret = model_cache_pvc, api_key_secret
        self.labels = {"app.kubernetes.io/name": "evalkit", "evalkit.sweep/name": k8s_name(sweep_name)}
        self.configmap_name = f"{base[:55]}-points"

    def meta(self, name: str, role: str, **extra_labels: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": {**self.labels, "evalkit.sweep/role": role, **extra_labels}}
        if self.namespace:
            meta["namespace"] = self.namespace
        return meta

    def configmap(self, spec: SweepSpec, combos: list[Combination]) -> dict[str, Any]:
        endpoint = f"http://127.0.0.1:{VLLM_PORT}/v1" if spec.server is not None else None
        data = {f"{c.name}.yaml": dump(run_config(c, endpoint)) for c in combos}
        data["sweep.yaml"] = dump(spec.model_dump(mode="json", exclude_none=True))
        meta = self.meta(self.configmap_name, "config")
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

    # -- pods
    def volumes(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        vols: list[dict[str, Any]] = [
            {"name": "sweep", "persistentVolumeClaim": {"claimName": self.pvc}},
            {"name": "points", "configMap": {"name": self.configmap_name, "items": items}},
        ]
        if self.model_cache_pvc:
            vols.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": self.model_cache_pvc}})
        return vols

    def evalkit_container(self, args: list[str], env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {
            "name": "evalkit",
            "image": self.image,
            "command": ["evalkit", *args],
            "volumeMounts": [
                {"name": "sweep", "mountPath": SWEEP_MOUNT},
                {"name": "points", "mountPath": CONFIG_MOUNT, "readOnly": True},
            ],
        }
        if env:
            c["env"] = env
        if self.api_key_secret:
            c["envFrom"] = [{"secretRef": {"name": self.api_key_secret}}]
        return c

    def job(self, meta: dict[str, Any], pod: dict[str, Any], **spec: Any) -> dict[str, Any]:
        pod = {"restartPolicy": "Never", **pod}
        template = {"metadata": {"labels": meta["labels"]}, "spec": pod}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {**spec, "template": template}}

    def server_job(self, combo: Combination) -> dict[str, Any]:
        """One combination with its own vLLM as a native sidecar."""
        assert combo.server is not None
        meta = self.meta(k8s_name(self.base, combo.name), "point", **{"evalkit.sweep/config": k8s_name(combo.config)})
        meta["annotations"] = {"evalkit.sweep/point": combo.name}
        run = self.evalkit_container(["run", "--config", f"{CONFIG_MOUNT}/run.yaml", "--quiet"])
        pod = {
            "initContainers": [self.vllm_sidecar(combo.server)],
            "containers": [run],
            "volumes": [
                *self.volumes([{"key": f"{combo.name}.yaml", "path": "run.yaml"}]),
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            ],
        }
        return self.job(meta, pod, backoffLimit=BACKOFF_PER_INDEX, podFailurePolicy=_fail_on_bad_input("FailJob"))

    def vllm_sidecar(self, server: ServerConfig) -> dict[str, Any]:
        cfg = server.model_copy(update={"host": "0.0.0.0", "command": ["vllm", "serve"], "launcher": "serve"})
        env = VLLMServer(cfg, ".").env_overrides()
        env.pop("CUDA_VISIBLE_DEVICES", None)  # the device plugin gives the pod its GPUs
        gpus = (cfg.tensor_parallel_size or 1) * (cfg.pipeline_parallel_size or 1) * (cfg.data_parallel_size or 1)
        mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]  # NCCL/tensor-parallel shared memory
        if self.model_cache_pvc:
            mounts.append({"name": "hf-cache", "mountPath": "/root/.cache/huggingface"})
        return {
            "name": "vllm",
            "image": self.image,
            "restartPolicy": "Always",
            "command": build_argv(cfg, VLLM_PORT, launcher="serve"),
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
            "ports": [{"name": "http", "containerPort": VLLM_PORT}],
            "resources": {"limits": {"nvidia.com/gpu": gpus}},
            "startupProbe": {
                "httpGet": {"path": "/health", "port": VLLM_PORT},
                "periodSeconds": 10,
                "failureThreshold": max(1, int(cfg.startup_timeout_s // 10)),
            },
            "volumeMounts": mounts,
        }

    def endpoint_job(self, config: str, combos: list[Combination]) -> dict[str, Any]:
        """The combinations of one endpoint config, one pod each, one at a time."""
        meta = self.meta(k8s_name(self.base, config), "point", **{"evalkit.sweep/config": k8s_name(config)})
        meta["annotations"] = {"evalkit.sweep/points": " ".join(c.name for c in combos)}
        index_field = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        index_env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": index_field}}}
        args = ["run", "--config", f"{CONFIG_MOUNT}/$(JOB_COMPLETION_INDEX).yaml", "--quiet"]
        items = [{"key": f"{c.name}.yaml", "path": f"{i}.yaml"} for i, c in enumerate(combos)]
        pod = {"containers": [self.evalkit_container(args, [index_env])], "volumes": self.volumes(items)}
        return self.job(
            meta,
            pod,
            completionMode="Indexed",
            completions=len(combos),
            parallelism=1,
            backoffLimitPerIndex=BACKOFF_PER_INDEX,
            podFailurePolicy=_fail_on_bad_input("FailIndex"),
        )

    def collect_job(self) -> dict[str, Any]:
        """``evalkit sweep --collect`` over the shared volume: sweep.csv, sweep.md, compare.html."""
        meta = self.meta(f"{self.base[:55]}-collect", "collect")
        args = ["sweep", f"{CONFIG_MOUNT}/sweep.yaml", "-o", SWEEP_MOUNT, "--collect"]
        volumes = self.volumes([{"key": "sweep.yaml", "path": "sweep.yaml"}])
        pod = {"containers": [self.evalkit_container(args)], "volumes": volumes}
        return self.job(meta, pod, backoffLimit=0)


def _fail_on_bad_input(action: str) -> dict[str, Any]:
    """Exit code 2 (bad input, a run dir that cannot be used) is not retried."""
    return {"rules": [{"action": action, "onExitCodes": {"containerName": "evalkit", "operator": "In", "values": [2]}}]}
