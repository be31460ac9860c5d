"""``evalkit config show``: each run setting's effective value and its source; takes ``evalkit run``'s options."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import typer

from evalkit.cli.common import config_app, fail
from evalkit.cli.run import run, run_settings
from evalkit.errors import EvalkitError


def config_show(**params: Any) -> None:
    """Each run setting's effective value and its source (command line, file PATH, env EVALKIT_X or default),
    secrets redacted. Takes the options of evalkit run, e.g. evalkit config show gsm8k -c run.yaml --limit 50."""
    from evalkit.cli.config_show import explain_config

    try:
        settings, config_file = run_settings(params)
        lines = explain_config(settings, config_file)
    except EvalkitError as e:
        fail(e)
    name_w = max(len(s.name) for s in lines)
    value_w = min(48, max(len(s.value) for s in lines))
    for s in lines:
        typer.echo(f"{s.name:<{name_w}}  {s.value:<{value_w}}  {s.source}")


# config show takes exactly evalkit run's options (--quiet aside): the same parameters, one way to read them
_RUN_SIGNATURE = inspect.signature(run, eval_str=True)
config_show.__signature__ = _RUN_SIGNATURE.replace(  # type: ignore[attr-defined]
    parameters=[p for p in _RUN_SIGNATURE.parameters.values() if p.name != "quiet"]
)
# evaluated here: run's annotations are strings that name what run.py imports (typer reads them through
# get_type_hints in this module's namespace)
config_show.__annotations__ = {k: v for k, v in typing.get_type_hints(run, include_extras=True).items() if k != "quiet"}
config_app.command("show", context_settings={"help_option_names": ["-h", "--help"]})(config_show)
