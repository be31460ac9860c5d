"""``evalkit run … --k8s DIR --shards N``: the Indexed Job of the shards and the merge Job validate against the
Kubernetes schema (offline, as the sweep's), pod I runs shard I/N into the claim with the key from a Secret; the
Slurm scripts parse (``bash -n``) and hold the array and the dependency; ``evalkit merge --wait`` waits for a
shard that is not there yet."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate as kv
import pytest
import yaml
from typer.testing import CliRunner

from evalkit.cli import app

K8S_VERSIONS = ["1.33", kv.utils.latest_version()]  # backoffLimitPerIndex is GA from 1.33, as for the sweep


def invoke(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


def write(tmp_path: Path, *extra: str) -> tuple[int, str]:
    return invoke("run", "gsm8k", "--endpoint", "http://vllm.ml.svc:8000/v1", "--limit", "200", "--concurrency",
                  "16", "-o", "runs/gsm8k-q", "--k8s", tmp_path / "k8s", "--shards", "4", "--image", "reg/evalkit:1",
                  "--pvc", "evals", *extra)  # fmt: skip


def test_the_indexed_job_and_the_merge_job_validate_and_run_the_shards(tmp_path: Path) -> None:
    code, out = write(tmp_path, "--api-key-secret", "vllm-key", "--namespace", "ml")
    assert code == 0, out
    shards_doc = yaml.safe_load((tmp_path / "k8s" / "job-evalkit-gsm8k-q-shards.yaml").read_text())
    merge_doc = yaml.safe_load((tmp_path / "k8s" / "job-evalkit-gsm8k-q-merge.yaml").read_text())
    for doc in (shards_doc, merge_doc):
        for version in K8S_VERSIONS:
            kv.validate(doc, version, strict=True)
    spec = shards_doc["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    (pod,) = spec["template"]["spec"]["containers"]
    cmd = pod["command"]
    assert cmd[:3] == ["evalkit", "run", "gsm8k"] and "--k8s" not in cmd and "--pvc" not in cmd
    assert cmd[cmd.index("--shard") + 1] == "$(JOB_COMPLETION_INDEX)/4"
    assert cmd[cmd.index("-o") + 1] == "/claim/evalkit-gsm8k-q/shard-$(JOB_COMPLETION_INDEX)"
    assert cmd[cmd.index("--limit") + 1] == "200" and cmd.count("-o") == 1  # the user's -o replaced by the claim's
    assert pod["env"][0]["name"] == "JOB_COMPLETION_INDEX"  # defined, so that $(JOB_COMPLETION_INDEX) expands
    assert pod["envFrom"] == [{"secretRef": {"name": "vllm-key"}}]
    assert spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2]  # bad input is not retried
    (merge,) = merge_doc["spec"]["template"]["spec"]["containers"]
    dirs = [f"/claim/evalkit-gsm8k-q/shard-{i}" for i in range(4)]
    assert merge["command"][:6] == ["evalkit", "merge", *dirs] and "--wait" in merge["command"]
    assert merge["command"][merge["command"].index("-o") + 1] == "/claim/evalkit-gsm8k-q/merged"
    assert shards_doc["metadata"]["namespace"] == merge_doc["metadata"]["namespace"] == "ml"
    text = "".join(p.read_text() for p in (tmp_path / "k8s").rglob("*") if p.is_file())
    assert "vllm-key" in text and "EVALKIT_API_KEY=" not in text


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("--api-key-file", "/k"), "--api-key-file"),
        (("--serve", "Qwen/Qwen3-8B"), "--serve"),
        (("--endpoint", "http://u:secret@h/v1"), "carries a credential"),
    ],
)
def test_what_a_pod_cannot_use_is_refused(tmp_path: Path, extra: tuple[str, str], words: str) -> None:
    code, out = write(tmp_path, *extra)
    assert code == 2 and words in out and "secret@" not in out
    assert not (tmp_path / "k8s").exists()


def test_k8s_without_its_options_is_refused(tmp_path: Path) -> None:
    code, out = invoke("run", "gsm8k", "--endpoint", "http://h/v1", "--k8s", tmp_path / "k8s", "--shards", "2")
    assert code == 2 and "give --image, --pvc" in out
