"""One eval as N shards on Kubernetes and on Slurm (``evalkit run … --k8s DIR --shards N``): manifests and
scripts only, written into DIR, nothing applied or submitted.

- ``job-<name>-shards.yaml``: an Indexed Job (``completionMode: Indexed``, ``completions`` = ``parallelism`` = N);
  pod I runs ``evalkit run … --shard $(JOB_COMPLETION_INDEX)/N -o /claim/<name>/shard-$(JOB_COMPLETION_INDEX)``
  on the claim. Exit code 2 (bad input) fails its index at once; other failures are retried, and a retried
  shard resumes in its run dir.
- ``job-<name>-merge.yaml``: the merge Job, applied with it: ``evalkit merge --wait`` reads the claim until every
  shard dir holds a finished run (no Kubernetes API access, no RBAC), then writes ``/claim/<name>/merged``; a
  shard that does not finish within its wait fails it with the reason.
- ``slurm/shards.sbatch`` (``#SBATCH --array=0-(N-1)``; ``--shard auto/N`` reads ``SLURM_ARRAY_TASK_ID``),
  ``slurm/merge.sbatch`` and ``slurm/submit.sh``, which submits the merge with ``--dependency=afterok`` on the
  array.

The API key comes from a Secret (``--api-key-secret NAME``: its keys as environment variables, e.g.
``EVALKIT_API_KEY``) or, under Slurm, the submitting user's environment; no credential is written.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError
from evalkit.redact import redact_url
from evalkit.sweep.k8s import BACKOFF_PER_INDEX, _fail_on_bad_input, dump, k8s_name

CLAIM_MOUNT = "/claim"
MERGE_WAIT_S = 7 * 24 * 3600  # the merge Job waits for the shards up to a week (their pods may queue for GPUs)
# options of `evalkit run` that --k8s takes for itself (with their values), and those a pod cannot use
_OWN = {"--k8s", "--shards", "--image", "--pvc", "--api-key-secret", "--namespace", "--shard", "-o", "--output-dir"}
_REFUSED = {
    "--api-key-file": "a key file on this machine; give the key from a Secret with --api-key-secret NAME",
    "--config": "a file on this machine; give its settings as options of the command",
    "-c": "a file on this machine; give its settings as options of the command",
    "--serve": "each pod would start its own server; shard an eval over an --endpoint the pods can reach",
}
_FLAGS = {"-q", "--quiet", "--fresh", "--no-report", "--no-warmup", "--allow-model-mismatch", "--apply-chat-template"}


def pod_args(run_args: Sequence[str]) -> list[str]:
    """The arguments after ``evalkit run`` of the command given, less the options --k8s takes for itself;
    ConfigError for what a pod cannot use (a local file, --serve, a credential in an endpoint URL)."""
    out: list[str] = []
    args = list(run_args)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, _ = arg.partition("=")
        if name in _REFUSED:
            raise ConfigError(f"--k8s cannot pass {name}: {_REFUSED[name]}")
        if name in _OWN:
            i += 1 if eq else 2
            continue
        if name == "--endpoint":
            url = arg[len("--endpoint=") :] if eq else (args[i + 1] if i + 1 < len(args) else "")
            if redact_url(url) != url:
                raise ConfigError(
                    f"--endpoint {redact_url(url)} carries a credential, which --k8s would write into the manifests; "
                    "give the key from a Secret with --api-key-secret NAME"
                )
        out.append(arg)
        i += 1
    return out


def _run_name(run_args: Sequence[str], output_dir: Path | None) -> str:
    if output_dir is not None:
        return output_dir.name
    return "+".join(a for a in run_args if not a.startswith("-"))[:40] or "eval"


def write(
    out_dir: Path,
    run_args: Sequence[str],
    *,
    shards: int,
    image: str,
    pvc: str,
    output_dir: Path | None = None,
    namespace: str | None = None,
    api_key_secret: str | None = None,
) -> list[Path]:
    """The Indexed Job, the merge Job and the Slurm scripts of ``evalkit run RUN_ARGS`` as ``shards`` shards, in
    ``out_dir``; returns the files written."""
    if shards < 1:
        raise ConfigError(f"--shards must be at least 1, got {shards}")
    args = pod_args(run_args)
    name = k8s_name("evalkit", _run_name(args, output_dir), limit=50)
    root = f"{CLAIM_MOUNT}/{name}"
    docs = [
        shards_job(name, args, shards, image, pvc, root, namespace, api_key_secret),
        merge_job(name, shards, image, pvc, root, namespace),
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for doc in docs:
        path = out_dir / f"job-{doc['metadata']['name']}.yaml"
        path.write_text(dump(doc))
        written.append(path)
    slurm_root = str(output_dir) if output_dir is not None else name
    written += slurm_scripts(out_dir / "slurm", name, args, shards, slurm_root)
    return written


def _meta(name: str, role: str, namespace: str | None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "evalkit", "evalkit.shards/run": name, "evalkit.shards/role": role}
    meta: dict[str, Any] = {"name": f"{name}-{role}", "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _pod(container: dict[str, Any], pvc: str) -> dict[str, Any]:
    container["volumeMounts"] = [{"name": "claim", "mountPath": CLAIM_MOUNT}]
    return {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": pvc}}],
    }


def shards_job(
    name: str,
    args: list[str],
    shards: int,
    image: str,
    pvc: str,
    root: str,
    namespace: str | None,
    api_key_secret: str | None,
) -> dict[str, Any]:
    """The Indexed Job: pod I runs shard I/N into ``root/shard-I``."""
    index_field = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    run = [*args, "--shard", f"$(JOB_COMPLETION_INDEX)/{shards}", "-o", f"{root}/shard-$(JOB_COMPLETION_INDEX)"]
    container: dict[str, Any] = {
        "name": "evalkit",
        "image": image,
        "command": ["evalkit", "run", *run, *([] if "-q" in args or "--quiet" in args else ["--quiet"])],
        "env": [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": index_field}}}],
    }
    if api_key_secret:
        container["envFrom"] = [{"secretRef": {"name": api_key_secret}}]
    meta = _meta(name, "shards", namespace)
    pod = _pod(container, pvc)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": shards,
            "parallelism": shards,
            "backoffLimitPerIndex": BACKOFF_PER_INDEX,
            "podFailurePolicy": _fail_on_bad_input("FailIndex"),
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
        },
    }


def merge_job(name: str, shards: int, image: str, pvc: str, root: str, namespace: str | None) -> dict[str, Any]:
    """The merge Job: waits on the claim for every shard to have finished, then merges them."""
    dirs = [f"{root}/shard-{i}" for i in range(shards)]
    cmd = ["evalkit", "merge", *dirs, "-o", f"{root}/merged", "--wait", str(MERGE_WAIT_S)]
    meta = _meta(name, "merge", namespace)
    pod = _pod({"name": "evalkit", "image": image, "command": cmd}, pvc)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": meta["labels"]}, "spec": pod}},
    }


def slurm_scripts(folder: Path, name: str, args: list[str], shards: int, root: str) -> list[Path]:
    """``shards.sbatch`` (the array), ``merge.sbatch`` and ``submit.sh`` (the array, then the merge after it)."""
    folder.mkdir(parents=True, exist_ok=True)
    run = shlex.join(["evalkit", "run", *args, "--shard", f"auto/{shards}"])
    dirs = " ".join(shlex.quote(f"{root}/shard-{i}") for i in range(shards))
    head = "#!/bin/bash\n# written by evalkit run --k8s: one eval as shards (docs/scale-out.md)\n"
    files = {
        "shards.sbatch": (
            f"{head}#SBATCH --job-name={name}-shards\n#SBATCH --array=0-{shards - 1}\n"
            f"#SBATCH --output={name}-shard-%a.log\nset -euo pipefail\n"
            f'{run} -o {shlex.quote(root)}/shard-"$SLURM_ARRAY_TASK_ID" --quiet\n'
        ),
        "merge.sbatch": (
            f"{head}#SBATCH --job-name={name}-merge\n#SBATCH --output={name}-merge.log\nset -euo pipefail\n"
            f"evalkit merge {dirs} -o {shlex.quote(root + '/merged')}\n"
        ),
        "submit.sh": (
            f"{head}# run it where the shards' run dirs are to be (the jobs start there)\nset -euo pipefail\n"
            'here="$(dirname "$0")"\narray=$(sbatch --parsable "$here/shards.sbatch")\n'
            'sbatch --dependency=afterok:"${array%%;*}" "$here/merge.sbatch"\n'
        ),
    }
    written = []
    for file, text in files.items():
        path = folder / file
        path.write_text(text)
        path.chmod(0o755)
        written.append(path)
    return written
