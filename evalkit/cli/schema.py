"""``evalkit schema``: the JSON Schemas of a run dir's files."""

from __future__ import annotations

from typing import Annotated

import typer

from evalkit.cli.common import app, fail
from evalkit.errors import EvalkitError


@app.command()
def schema(
    name: Annotated[
        str, typer.Argument(help="summary, manifest, sample (one line of samples.jsonl) or capacity (capacity.json).")
    ],
) -> None:
    """Print the JSON Schema of a run dir's summary.json, manifest.json or samples.jsonl lines, or of a capacity
    dir's capacity.json."""
    import json

    from evalkit.contracts import SCHEMAS, json_schema

    if name not in SCHEMAS:
        fail(EvalkitError(f"no schema named {name!r}; pass summary, manifest or sample, or capacity (capacity.json)"))
    typer.echo(json.dumps(json_schema(name), indent=2))  # type: ignore[arg-type]
