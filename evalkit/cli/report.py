"""``evalkit report``: report.html or compare.html from run dirs alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalkit.cli.common import app, fail
from evalkit.errors import EvalkitError


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One run dir (single report) or several (comparison).")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Output HTML file, or a folder to write report.html / compare.html into."),
    ] = None,
    rest_run: Annotated[
        Path | None,
        typer.Option(
            help="A run of the probe tasks at rest: the probe section shows each probe's accuracy at rest beside "
            "its accuracy under this load, with the paired difference (docs/load.md)."
        ),
    ] = None,
) -> None:
    """Render report.html from run dirs alone (no network)."""
    from evalkit import api

    try:
        path = api.report(run_dirs, output, rest_run)
    except EvalkitError as e:
        fail(e)
    typer.echo(str(path))
