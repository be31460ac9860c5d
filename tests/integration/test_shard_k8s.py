"""``evalkit run … --k8s DIR --shards N``: the Indexed Job of the shards and the merge Job validate against the
Kubernetes schema (offline, as the sweep's), pod I runs shard I/N into the claim with the key from a Secret; the
Slurm scripts parse (``bash -n``) and hold the array and the dependency; ``evalkit merge --wait`` waits for a
shard that is not there yet.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_shard_k8s.py."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from evalkit.runner.shards import ShardsNotReady, wait_for_shards
from evalkit.testing.server import Behaviour, TestServer
from tests.unit.test_shard_k8s import invoke, write


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
