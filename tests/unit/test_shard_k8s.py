"""``evalkit run … --k8s DIR --shards N``: the Indexed Job of the shards and the merge Job validate against the
Kubernetes schema (offline, as the sweep's), pod I runs shard I/N into the claim with the key from a Secret; the
Slurm scripts parse (``bash -n``) and hold the array and the dependency; ``evalkit merge --wait`` waits for a
shard that is not there yet."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import kubernetes_validate as kv
import pytest
import yaml
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.runner.shards import ShardsNotReady, wait_for_shards
from evalkit.testing.server import Behaviour, TestServer

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


def test_the_slurm_scripts_parse_and_hold_the_array_and_the_dependency(tmp_path: Path) -> None:
    code, out = write(tmp_path)
    assert code == 0, out
    slurm = tmp_path / "k8s" / "slurm"
    for script in ("shards.sbatch", "merge.sbatch", "submit.sh"):
        check = subprocess.run(["bash", "-n", slurm / script], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    shards = (slurm / "shards.sbatch").read_text().splitlines()
    assert "#SBATCH --array=0-3" in shards
    (run,) = [line for line in shards if line.startswith("evalkit run")]
    assert "--shard auto/4" in run and '-o runs/gsm8k-q/shard-"$SLURM_ARRAY_TASK_ID"' in run
    merge = (slurm / "merge.sbatch").read_text()
    assert "evalkit merge runs/gsm8k-q/shard-0 runs/gsm8k-q/shard-1 runs/gsm8k-q/shard-2 runs/gsm8k-q/shard-3" in merge
    submit = (slurm / "submit.sh").read_text()
    assert 'sbatch --dependency=afterok:"${array%%;*}"' in submit and "sbatch --parsable" in submit


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


def test_merge_waits_for_a_shard_that_is_not_there_yet(tmp_path: Path) -> None:
    with pytest.raises(ShardsNotReady, match="not a run dir"):
        wait_for_shards([tmp_path / "s0"], wait_s=0.2, poll_s=0.1)
    with TestServer(Behaviour(fast=True)) as srv:
        base = ["run", "gsm8k", "--endpoint", srv.url, "--limit", "4", "--no-warmup", "--no-report", "-q"]
        assert invoke(*base, "--shard", "0/2", "-o", tmp_path / "s0")[0] == 0
        late = threading.Timer(1.0, lambda: invoke(*base, "--shard", "1/2", "-o", tmp_path / "s1"))
        late.start()
        t0 = time.monotonic()
        code, out = invoke("merge", tmp_path / "s0", tmp_path / "s1", "-o", tmp_path / "m", "--wait", "60",
                           "--no-report")  # fmt: skip
        late.join()
    assert code == 0, out
    assert time.monotonic() - t0 >= 1.0
    assert (tmp_path / "m" / "summary.json").exists()
