"""CPU thread binding of multi-rank vLLM CPU servers: ``server.cpu_threads_bind`` becomes
VLLM_CPU_OMP_THREADS_BIND (given lists verbatim, "spread" derived from the CPUs evalkit may use), its one-line
refusals, its record in the manifest's server provenance and its arrival in the server process's environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evalkit.config.server_config import ServerConfig
from evalkit.server.launch import cpu_threads_bind, launch_env
from evalkit.server.vllm_process import VLLMServer
from evalkit.sweep import load_spec, plan

REPO = Path(__file__).resolve().parents[2]


def cfg(**kw: Any) -> ServerConfig:
    return ServerConfig.model_validate({"model": "m", **kw})


@pytest.mark.parametrize(
    ("layout", "cpus", "expected"),
    [
        ({"tensor_parallel_size": 3}, [0, 1], "0|1|0"),  # ranks outnumber CPUs: one CPU each in turn
        ({"data_parallel_size": 2}, [0, 1], "0|1"),
        ({"data_parallel_size": 2}, [0, 1, 2, 3, 6, 7], "0-2|3,6-7"),  # contiguous shares, gaps kept
        ({"tensor_parallel_size": 2, "data_parallel_size": 2}, list(range(8)), "0-1|2-3|4-5|6-7"),
        ({}, [4, 5, 6], "4-6"),
        ({"pipeline_parallel_size": 2, "data_parallel_size": 3, "data_parallel_size_local": 1,
          "data_parallel_address": "10.0.0.1"}, [0, 1, 2, 3], "0-1|2-3"),  # local ranks only
    ],
)  # fmt: skip
def test_spread_shares_the_cpus_over_the_local_ranks(layout: dict[str, int], cpus: list[int], expected: str) -> None:
    assert cpu_threads_bind(cfg(cpu_threads_bind="spread", **layout), cpus) == expected


@pytest.mark.parametrize("value", ["0|1|0", "nobind", "auto", "0-3,8|4-7,9|2"])
def test_given_values_pass_verbatim(value: str) -> None:
    c = cfg(tensor_parallel_size=3, cpu_threads_bind=value)
    assert cpu_threads_bind(c, [0, 1]) == value


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"tensor_parallel_size": 3, "cpu_threads_bind": "0|1"}, "names CPUs for 2 rank(s) but the layout has 3"),
        ({"data_parallel_size": 2, "cpu_threads_bind": "0|x"}, "'x' is not a CPU list"),
        ({"cpu_threads_bind": "0||1"}, "'' is not a CPU list"),
        ({"cpu_threads_bind": "spread", "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}}, "give it once"),
    ],
)
def test_bad_bindings_are_refused_in_one_line(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        cfg(**kw)
    text = str(err.value)
    assert message in text
    assert "\n" not in text.split("Value error, ", 1)[1].split(" [type=")[0]


def test_no_binding_sets_nothing() -> None:
    assert "VLLM_CPU_OMP_THREADS_BIND" not in VLLMServer(cfg(tensor_parallel_size=3), "/nonexistent").env_overrides()


def test_binding_is_recorded_in_the_provenance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    srv = VLLMServer(cfg(tensor_parallel_size=3, cpu_threads_bind="spread"), "/nonexistent")
    assert srv.provenance()["env_overrides"]["VLLM_CPU_OMP_THREADS_BIND"] == "0|1|0"


def test_cpu_sweep_example_plans_three_layouts_bound_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    combos = plan(load_spec(REPO / "examples" / "sweeps" / "cpu-layouts.yaml"))
    assert [c.name for c in combos] == ["tp1__default__c4", "tp3__default__c4", "dp2__default__c4"]
    assert len({c.server_key() for c in combos}) == 3  # one server per layout
    binds = {c.config: launch_env(c.server, {})["VLLM_CPU_OMP_THREADS_BIND"] for c in combos if c.server}
    assert binds == {"tp1": "0-1", "tp3": "0|1|0", "dp2": "0|1"}
    assert all(c.settings["tasks"] == ["gsm8k", "numerics"] for c in combos)
