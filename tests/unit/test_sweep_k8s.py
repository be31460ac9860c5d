"""``evalkit sweep --k8s``: the manifests validate against the Kubernetes schema, each Job runs one combination
into ``runs/<name>`` on the shared volume, and ``evalkit sweep --collect`` tabulates what the Jobs wrote."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate as kv
import pytest
import yaml
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.errors import ConfigError
from evalkit.sweep import load_spec, plan
from evalkit.sweep.k8s import SWEEP_MOUNT, k8s_name, manifests

# backoffLimitPerIndex and native sidecars are GA from 1.33: the oldest version the manifests are meant for
K8S_VERSIONS = ["1.33", kv.utils.latest_version()]


def cli(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(map(str, args)))
    print(res.output)
    return res.exit_code, res.output


def validate(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        for version in K8S_VERSIONS:
            kv.validate(doc, version, strict=True)  # strict: unknown fields are errors too


def server_spec(tmp_path: Path) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(
        "tasks: [gsm8k]\nlimit: 20\nserver: {model: Qwen/Qwen3-8B, tensor_parallel_size: 2, batch_invariant: true}\n"
        "configs: {seqs64: {max_num_seqs: 64}, seqs256: {max_num_seqs: 256}}\nconcurrency: [8, 32]\n"
    )
    return path


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_server_sweep_is_one_valid_job_per_combination(tmp_path: Path) -> None:
    spec = load_spec(server_spec(tmp_path))
    docs = manifests(spec, image="reg/evalkit:1", pvc="sweeps", sweep_name="grid", namespace="ml")
    validate(docs)
    (cm,) = by_kind(docs, "ConfigMap")
    jobs = by_kind(docs, "Job")
    points = [j for j in jobs if j["metadata"]["labels"]["evalkit.sweep/role"] == "point"]
    names = [c.name for c in plan(spec)]
    assert [j["metadata"]["annotations"]["evalkit.sweep/point"] for j in points] == names  # 2 configs x 2 levels
    assert len({j["metadata"]["name"] for j in jobs}) == len(jobs) == 5  # + the collect Job
    for job, name in zip(points, names, strict=True):
        pod = job["spec"]["template"]["spec"]
        (vllm,) = pod["initContainers"]
        assert vllm["restartPolicy"] == "Always" and vllm["startupProbe"]["httpGet"]["path"] == "/health"
        assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 2
        assert ["--max-num-seqs", name.split("__")[0].removeprefix("seqs")] in [
            vllm["command"][i : i + 2] for i in range(len(vllm["command"]))
        ]
        assert {"name": "VLLM_BATCH_INVARIANT", "value": "1"} in vllm["env"]
        (items,) = [v["configMap"]["items"] for v in pod["volumes"] if "configMap" in v]
        assert items == [{"key": f"{name}.yaml", "path": "run.yaml"}]
        run_cfg = yaml.safe_load(cm["data"][f"{name}.yaml"])
        assert run_cfg["output_dir"] == f"{SWEEP_MOUNT}/runs/{name}"  # the local sweep's run dir names
        assert run_cfg["endpoint"] == "http://127.0.0.1:8000/v1" and run_cfg["model"] == "Qwen/Qwen3-8B"
        assert run_cfg["concurrency"] == int(name.rsplit("__c", 1)[1])


def test_an_invalid_manifest_is_caught(tmp_path: Path) -> None:
    docs = manifests(load_spec(server_spec(tmp_path)), image="i", pvc="p", sweep_name="grid")
    job = copy.deepcopy(by_kind(docs, "Job")[0])
    job["spec"]["backoffLimit"] = "two"
    with pytest.raises(kv.ValidationError):
        validate([job])
    job = copy.deepcopy(by_kind(docs, "Job")[0])
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # misspelt: strict mode refuses it
    with pytest.raises(kv.ValidationError):
        validate([job])


def test_names_are_dns_labels_and_stay_apart() -> None:
    assert k8s_name("evalkit", "grid") == "evalkit-grid"
    a, b = k8s_name("evalkit-grid", "A__x__c8"), k8s_name("evalkit-grid", "a__x__c8")
    assert a != b and a.startswith("evalkit-grid-a-x-c8-")
    long = k8s_name("evalkit", "x" * 100)
    assert len(long) == 63 and long[-7] == "-"


def test_server_api_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("tasks: [gsm8k]\nserver: {model: m, api_key: secret}\n")
    with pytest.raises(ConfigError, match="api_key would be written into the manifests"):
        manifests(load_spec(path), image="i", pvc="p", sweep_name="s")


@pytest.mark.parametrize(
    ("sweep", "says"),
    [
        (
            "endpoint: http://evalkit:hunter2@vllm:8000/v1\n",
            "configs.default: the endpoint http://***@vllm:8000/v1 carries a credential in its URL",
        ),
        (
            "endpoint: http://vllm:8000/v1\nconfigs: {a: {}, b: {endpoint: 'http://other:8000/v1?api_key=hunter2'}}\n",
            "configs.b: the endpoint http://other:8000/v1?api_key=*** carries a credential in its URL",
        ),
        (
            "server: {model: m}\nconfigs: {a: {}, b: {env: {HF_TOKEN: hunter2, VLLM_USE_DEEP_GEMM: '0'}}}\n",
            "configs.b: server env HF_TOKEN would be written into the manifests in plain text",
        ),
    ],
)
def test_no_credential_is_written_into_a_manifest(tmp_path: Path, sweep: str, says: str) -> None:
    """Endpoint credentials (``user:password@``, ``?api_key=``) and secret server env are refused with the fix
    (the key from a Secret with --api-key-secret) instead of being copied into the ConfigMap and the Jobs."""
    path = tmp_path / "s.yaml"
    path.write_text("tasks: [gsm8k]\n" + sweep)
    with pytest.raises(ConfigError, match=re.escape(says)) as err:
        manifests(load_spec(path), image="i", pvc="p", sweep_name="s")
    assert "hunter2" not in str(err.value)
    if "endpoint" in sweep:
        assert "--api-key-secret" in str(err.value)
    res = CliRunner().invoke(app, ["sweep", str(path), "--k8s", str(tmp_path / "k8s"), "--image", "i", "--pvc", "p"])
    assert res.exit_code == 2 and "hunter2" not in res.output
    assert not list((tmp_path / "k8s").rglob("*.yaml"))  # nothing written


def test_endpoint_sweep_runs_its_points_one_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "ep.yaml"
    path.write_text(
        "tasks: [gsm8k]\nendpoint: http://vllm:8000/v1\nconfigs: {a: {}, b: {endpoint: 'http://other:8000/v1'}}\n"
        "concurrency: [1, 4]\n"
    )
    docs = manifests(load_spec(path), image="i", pvc="p", sweep_name="ep", api_key_secret="evalkit-key")
    validate(docs)
    jobs = [j for j in by_kind(docs, "Job") if j["metadata"]["labels"]["evalkit.sweep/role"] == "point"]
    assert len(jobs) == 2  # one Indexed Job per endpoint
    for job, config in zip(jobs, "ab", strict=True):
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed" and spec["parallelism"] == 1 and spec["completions"] == 2
        pod = spec["template"]["spec"]
        (items,) = [v["configMap"]["items"] for v in pod["volumes"] if "configMap" in v]
        assert items == [{"key": f"{config}__default__c{n}.yaml", "path": f"{i}.yaml"} for i, n in enumerate((1, 4))]
        assert "/etc/evalkit/$(JOB_COMPLETION_INDEX).yaml" in pod["containers"][0]["command"]
        assert pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "evalkit-key"}}]


def test_k8s_needs_image_and_pvc(tmp_path: Path) -> None:
    code, out = cli("sweep", server_spec(tmp_path), "--k8s", tmp_path / "k")
    assert code == 2 and "--k8s needs --image" in out and len(out.strip().splitlines()) == 1
    code, out = cli("sweep", server_spec(tmp_path))
    assert code == 2 and "needs -o DIR" in out
    code, out = cli("sweep", server_spec(tmp_path), "-o", tmp_path / "nothing", "--collect")
    assert code == 2 and "holds no runs/ folder" in out and not (tmp_path / "nothing").exists()
