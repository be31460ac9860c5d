"""The ``--serve`` options of ``evalkit run`` come from one table (evalkit/cli/server_options.py), checked here
against ServerConfig: every field is an option or says where else it is set, each option's type is its field's,
and an option given on the command line lands in that field."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal

from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.cli.run import run, run_settings
from evalkit.cli.server_options import NOT_OPTIONS, SERVER_OPTIONS
from evalkit.config.server_config import ServerConfig


def _value_type(annotation: Any) -> Any:
    """A field's type without None (a Literal of strings is str, as the command line gives it)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (annotation,) = args
    if typing.get_origin(annotation) is Literal:
        return str
    return annotation


def test_every_server_field_is_an_option_or_says_where_it_is_set() -> None:
    rows = [opt.field for opt in SERVER_OPTIONS]
    assert len(rows) == len(set(rows))
    assert set(rows) | set(NOT_OPTIONS) == set(ServerConfig.model_fields), "a ServerConfig field has no option"
    assert not set(rows) & set(NOT_OPTIONS)


def test_each_options_type_is_its_fields() -> None:
    for opt in SERVER_OPTIONS:
        assert opt.type is _value_type(ServerConfig.model_fields[opt.field].annotation), opt.field


def test_the_run_command_lists_every_option_after_serve() -> None:
    names = list(inspect.signature(run).parameters)
    at = names.index("serve") + 1
    assert names[at : at + len(SERVER_OPTIONS)] == [opt.name for opt in SERVER_OPTIONS]
    assert names[at + len(SERVER_OPTIONS)] == "server_arg"


def test_a_generated_option_reaches_its_server_field() -> None:
    params = {name: p.default for name, p in inspect.signature(run).parameters.items()}
    params.update(serve="m", tensor_parallel_size=2, startup_timeout=5.0, enforce_eager=True)
    settings, _ = run_settings(params)
    assert settings["server"] == {
        "model": "m",
        "tensor_parallel_size": 2,
        "startup_timeout_s": 5.0,
        "enforce_eager": True,
    }


def test_config_show_takes_the_generated_flags() -> None:
    res = CliRunner().invoke(app, ["config", "show", "--serve", "m", "--tp", "2", "--max-num-seqs", "4"])
    assert res.exit_code == 0, res.output
    lines = {line.split()[0]: line.split()[1:] for line in res.output.splitlines() if line.strip()}
    assert lines["server.tensor_parallel_size"][:3] == ["2", "command", "line"]
    assert lines["server.max_num_seqs"][:3] == ["4", "command", "line"]
