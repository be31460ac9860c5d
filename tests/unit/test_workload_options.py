"""The workload options of ``evalkit run`` and ``evalkit capacity`` come from one table
(evalkit/cli/workload_options.py), checked here against WorkloadSettings: every field is a row, each row's type
is its field's, both commands list the rows (capacity all but the two a search sizes itself), and an option given
on the command line lands in the run's workload settings."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from evalkit.cli.capacity import NOT_IN_A_SEARCH, capacity
from evalkit.cli.run import run, run_settings
from evalkit.cli.workload_options import WORKLOAD_OPTIONS, workload_settings
from evalkit.config.workload import WorkloadSettings


def _value_type(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (annotation,) = args
    return annotation


def test_every_workload_field_is_a_row_of_its_type() -> None:
    rows = [opt.name for opt in WORKLOAD_OPTIONS]
    assert len(rows) == len(set(rows)) and set(rows) == set(WorkloadSettings.model_fields)
    for opt in WORKLOAD_OPTIONS:
        assert opt.type == _value_type(WorkloadSettings.model_fields[opt.name].annotation), opt.name


def test_both_commands_take_the_rows() -> None:
    names = [opt.name for opt in WORKLOAD_OPTIONS]
    run_params = list(inspect.signature(run).parameters)
    assert [n for n in run_params if n in names] == names
    cap_params = list(inspect.signature(capacity).parameters)
    assert [n for n in cap_params if n in names] == [n for n in names if n not in NOT_IN_A_SEARCH]
    assert set(NOT_IN_A_SEARCH) <= set(names)


def test_given_options_land_in_the_workload_settings_and_defaults_are_left_out() -> None:
    params = {name: p.default for name, p in inspect.signature(run).parameters.items()}
    params.pop("server_options", None)
    params.update(tasks=["random"], random_input_len=64, ignore_eos=True, probe=["gsm8k:0.1"])
    settings, _ = run_settings(params)
    assert settings["workload"] == {"random_input_len": 64, "ignore_eos": True, "probe": ["gsm8k:0.1"]}
    assert workload_settings({"turns": 2}.get, leave_out=NOT_IN_A_SEARCH) == {"turns": 2}
    assert workload_settings(dict.fromkeys((o.name for o in WORKLOAD_OPTIONS), None).get) == {}
