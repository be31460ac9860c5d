"""``evalkit config show``: each run setting's effective value and its source; takes ``evalkit run``'s options."""

from __future__ import annotations

import inspect
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
_PARAMS = [p for p in _RUN_SIGNATURE.parameters.values() if p.name != "quiet"]
config_show.__signature__ = _RUN_SIGNATURE.replace(parameters=_PARAMS)  # type: ignore[attr-defined]
# the evaluated annotations: run's own are strings naming what run.py imports, and typer resolves a function's
# annotations in its module (this one)
config_show.__annotations__ = {p.name: p.annotation for p in _PARAMS}
config_app.command("show", context_settings={"help_option_names": ["-h", "--help"]})(config_show)
