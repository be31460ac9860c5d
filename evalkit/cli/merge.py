"""``evalkit merge``: the shard run dirs of one ``evalkit run --shard I/N`` as one run dir."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from evalkit.cli.common import IncludePathOption, app, fail
from evalkit.errors import EvalkitError


@app.command()
def merge(
    shard_dirs: Annotated[list[Path], typer.Argument(help="The run dirs of every shard, 0/N … N-1/N, in any order.")],
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o", help="The merged run dir (new or empty).")],
    tasks_dir: Annotated[
        list[Path] | None, typer.Option(help="The run's extra folder of task YAML files (repeatable).")
    ] = None,
    include_path: IncludePathOption = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not write report.html.")] = False,
    wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds to wait for shards not there, still being written or not finished yet (checked every 10 s).",
        ),
    ] = 0.0,
) -> None:
    """Merge the shards of one run into one run dir, as if one process had run it (docs/scale-out.md)."""
    from evalkit import api
    from evalkit.cli.console import print_summary
    from evalkit.contracts import summary_json
    from evalkit.history import record_run

    try:
        result = api.merge(
            shard_dirs,
            output_dir,
            tasks_dir=tasks_dir or (),
            include_path=include_path or (),
            report=not no_report,
            argv=sys.argv,
            wait_s=wait,
        )
    except EvalkitError as e:
        fail(e)
    print_summary(summary_json(result.summary), str(result.run_dir))
    record_run(result.run_dir)
