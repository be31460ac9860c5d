"""``evalkit sweep``: the sweep file (unknown keys refused), the table, resume, one server per server config.

Here: those of its tests that run in-process; the others are in tests/integration/test_sweep.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import ConfigError
from evalkit.sweep import load_spec, plan
from tests.integration.test_sweep import sweep, write


def test_unknown_keys_and_bad_values_are_refused_in_one_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "a.yaml", "tasks: [gsm8k]\nendpoint: http://x/v1\nconcurency: [1]\n")
    code, out = sweep(bad, "-o", tmp_path / "o")
    assert code == 2 and len(out.strip().splitlines()) == 1
    assert "unknown key 'concurency'" in out and "concurrency" in out.split("allowed:")[1]
    with pytest.raises(ConfigError, match=r"unknown key 'sampling\.t\.temprature'.*allowed: temperature"):
        load_spec(write(tmp_path / "b.yaml", "tasks: [x]\nendpoint: u\nsampling: {t: {temprature: 1}}\n"))
    with pytest.raises(ConfigError, match="either 'endpoint'"):
        load_spec(write(tmp_path / "c.yaml", "tasks: [x]\n"))
    with pytest.raises(ConfigError, match=r"configs\.a: server setting 'max_num_sqs'"):
        load_spec(write(tmp_path / "d.yaml", "tasks: [x]\nserver: {model: m}\nconfigs: {a: {max_num_sqs: 4}}\n"))
    with pytest.raises(ConfigError, match=r"configs\.a: unknown setting 'max_num_seqs'.*endpoint and model"):
        load_spec(write(tmp_path / "e.yaml", "tasks: [x]\nendpoint: u\nconfigs: {a: {max_num_seqs: 4}}\n"))
    assert not (tmp_path / "o").exists()


def test_plan_groups_by_server_config(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path / "s.yaml",
            "tasks: [gsm8k]\nserver: {model: m}\nconfigs: {a: {max_num_seqs: 4}, b: {max_num_seqs: 8}, "
            "c: {max_num_seqs: 4}}\nconcurrency: [2, 4]\n",
        )
    )
    names = [c.name for c in plan(spec)]
    assert names == ["a__default__c2", "a__default__c4", "c__default__c2", "c__default__c4", "b__default__c2",
                     "b__default__c4"]  # fmt: skip
    assert len({c.server_key() for c in plan(spec)}) == 2  # a and c share one server
