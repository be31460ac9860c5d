"""``evalkit gate``: the release gate over a baseline's and a candidate's run dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalkit.cli.common import app, fail
from evalkit.errors import EvalkitError


@app.command()
def gate(
    runs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="BASELINE CANDIDATE (two run dirs, or two capacity dirs of evalkit capacity), or CANDIDATE alone to check it against the policy's expected scores."
        ),
    ] = None,
    baseline: Annotated[
        list[Path] | None,
        typer.Option(
            "--baseline",
            "-b",
            help="A baseline run dir (repeatable: several runs of the baseline config), or one from the run history: history:latest-pass?config=NAME, history:latest?config=NAME, history:ID.",
        ),
    ] = None,
    candidate: Annotated[
        list[Path] | None,
        typer.Option(
            "--candidate", "-c", help="A candidate run dir (repeatable: several runs of the candidate config)."
        ),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", "-p", help="Policy YAML (default: the built-in policy, printed).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Folder for gate.json, gate.md, junit.xml, compare.html (default CANDIDATE/gate)."
        ),
    ] = None,
    expected_from: Annotated[
        str | None,
        typer.Option(
            help="A model of the reference scores evalkit ships (evalkit history references): its published scores for the candidate's tasks become expected: rules.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Compare runs even when task version, data, limit, few-shot or prompts differ.")
    ] = False,
) -> None:
    """Release gate: exit 0 when the candidate keeps the baseline's accuracy and speed, 1 when a rule fails,
    2 when it cannot decide (nothing comparable, coverage too low, no rule evaluated) or the input is bad.
    With several runs per side (--baseline/--candidate repeated) speed is judged on run-to-run variation."""
    from rich.console import Console

    from evalkit import api
    from evalkit.gating.gate_runs import print_outcome
    from evalkit.history import record_gate

    try:
        outcome = api.gate(
            *(runs or []),
            baselines=baseline,
            candidates=candidate,
            policy=policy,
            output=output,
            force=force,
            expected_from=expected_from,
        )
    except EvalkitError as e:
        fail(e)
    print_outcome(outcome, Console(highlight=False, width=max(120, Console().width)))
    record_gate(outcome.result, outcome.baselines, outcome.candidates, outcome.out_dir)
    if outcome.result.verdict == "cannot_decide":
        typer.echo(f"evalkit: cannot decide: {'; '.join(outcome.result.reasons)}", err=True)
    raise typer.Exit(outcome.exit_code)
