"""``evalkit sweep --k8s``: the manifests validate against the Kubernetes schema, each Job runs one combination
into ``runs/<name>`` on the shared volume, and ``evalkit sweep --collect`` tabulates what the Jobs wrote.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_sweep_k8s.py."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from evalkit.sweep import load_spec, plan
from evalkit.sweep.k8s import SWEEP_MOUNT
from tests.unit.test_sweep_k8s import K8S_VERSIONS, by_kind, cli, validate  # noqa: F401 (helpers and fixtures shared with that file)


def test_jobs_write_runs_that_collect_tabulates(tmp_path: Path) -> None:
    """Each Job's command with its run config from the ConfigMap (the volume at a local path), then the collect
    Job's command: the same sweep table as a local sweep; a combination without a finished run is named."""
    from evalkit.testing.server import Behaviour, TestServer

    with TestServer(Behaviour(correct_ratio=0.6)) as server:
        path = tmp_path / "ep.yaml"
        path.write_text(
            f"tasks: [gsm8k]\nlimit: 2\nendpoint: {server.url}\nconfigs: {{a: {{}}, b: {{}}}}\n"
            "sampling: {greedy: {max_tokens: 16, temperature: 0}}\nconcurrency: [1, 2]\n"
        )
        code, out = cli("sweep", path, "--k8s", tmp_path / "k8s", "--image", "i", "--pvc", "p")
        assert code == 0 and "kubectl apply -f" in out
        files = sorted((tmp_path / "k8s").glob("*.yaml"))
        docs = [yaml.safe_load(f.read_text()) for f in files]
        docs += [yaml.safe_load(f.read_text()) for f in (tmp_path / "k8s" / "collect").glob("*.yaml")]
        validate(docs)
        (cm,) = by_kind(docs, "ConfigMap")
        volume = tmp_path / "volume"
        names = [c.name for c in plan(load_spec(path))]
        for name in names[:-1]:  # the last Job has not run yet
            run_cfg = tmp_path / f"{name}.yaml"
            run_cfg.write_text(cm["data"][f"{name}.yaml"].replace(SWEEP_MOUNT, str(volume)))
            code, _ = cli("run", "--config", run_cfg, "--quiet")
            assert code == 0
        sweep_file = tmp_path / "sweep.yaml"
        sweep_file.write_text(cm["data"]["sweep.yaml"])
        code, out = cli("sweep", sweep_file, "-o", volume, "--collect")
        assert (
            code == 1
            and f"1 of 4 combination(s) failed or have no finished run of the sweep file's settings: {names[-1]}" in out
        )
        rows = list(csv.DictReader((volume / "sweep.csv").open()))
        assert [(r["config"], r["sampling"], r["concurrency"]) for r in rows] == [
            ("a", "greedy", "1"),
            ("a", "greedy", "2"),
            ("b", "greedy", "1"),
            ("b", "greedy", "2"),
        ]
        assert all(float(r["output_tok_s"]) > 0 and r["gsm8k exact_match,strict-match ci95"] for r in rows[:-1])
        assert not any(r["error"] for r in rows[:-1]) and "no finished run" in rows[-1]["error"]
        assert not rows[-1]["output_tok_s"] and not rows[-1]["gsm8k exact_match,strict-match"]
        assert (volume / "compare.html").is_file()
        sent = len(server.state.requests)
        code, out = cli("sweep", sweep_file, "-o", volume, "--collect")
        assert len(server.state.requests) == sent  # --collect runs nothing
