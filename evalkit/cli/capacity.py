"""``evalkit capacity``: the highest request rate (or number in flight) a server carries while a share of the
requests meet every SLO (docs/capacity.md). Exit 0: an answer; 1: the capacity lies below the start load; 2: bad
input, or the search cannot decide (every point failed to run, or --max-duration ran out: the bracket so far is
written and printed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from evalkit.cli.common import app, fail
from evalkit.cli.server_options import PANEL as _OPT
from evalkit.cli.server_options import add_server_options
from evalkit.cli.workload_options import add_workload_options, workload_settings
from evalkit.errors import ConfigError, EvalkitError

_SEARCH = "Search"
NOT_IN_A_SEARCH = ("num_prompts", "trace_speed")  # a point's size is --point-duration / --point-requests
EXIT_BELOW_START = 1
EXIT_CANNOT_DECIDE = 2


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
@add_server_options(after="serve")
@add_workload_options(after="tasks_dir", leave_out=NOT_IN_A_SEARCH)
def capacity(
    tasks: Annotated[list[str], typer.Argument(help="The task or workload the load is made of, e.g. random.")],
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Capacity dir: capacity.json, capacity.html, points/.")
    ],
    goodput: Annotated[
        list[str] | None,
        typer.Option(
            help="Latency SLO KEY:MS (ttft, tpot, e2el; repeatable), as evalkit run --goodput.", rich_help_panel=_SEARCH
        ),
    ] = None,
    slo_share: Annotated[
        float, typer.Option(help="Share of requests that must meet every SLO.", rich_help_panel=_SEARCH)
    ] = 0.99,
    search: Annotated[
        str,
        typer.Option(
            help="rate (requests/s, Poisson arrivals) or concurrency (requests in flight).", rich_help_panel=_SEARCH
        ),
    ] = "rate",
    start_rate: Annotated[
        float | None, typer.Option(help="The first rate measured, req/s (default 1).", rich_help_panel=_SEARCH)
    ] = None,
    start_concurrency: Annotated[
        int | None, typer.Option(help="--search concurrency: the first level (default 1).", rich_help_panel=_SEARCH)
    ] = None,
    tolerance: Annotated[
        float, typer.Option(help="Bisect until high - low <= tolerance x low.", rich_help_panel=_SEARCH)
    ] = 0.05,
    point_duration: Annotated[
        str | None, typer.Option(help="Each point's timed phase (default 60s).", rich_help_panel=_SEARCH)
    ] = None,
    point_requests: Annotated[
        int | None, typer.Option(help="Each point's requests, instead of a duration.", rich_help_panel=_SEARCH)
    ] = None,
    max_duration: Annotated[
        str | None,
        typer.Option(
            help="Stop before a point that would end past this (e.g. 30m): the bracket so far.", rich_help_panel=_SEARCH
        ),
    ] = None,
    warmup: Annotated[
        int, typer.Option(min=0, help="Warm-up requests before each point's timed phase.", rich_help_panel=_SEARCH)
    ] = 16,
    cost_per_gpu_hour: Annotated[
        float | None, typer.Option(help="Dollars per GPU-hour: the cost per million output tokens at the answer.")
    ] = None,
    gpus_billed: Annotated[
        int | None, typer.Option(min=1, help="GPUs the cost is for (default: the started server's TP x PP x DP).")
    ] = None,
    endpoint: Annotated[str | None, typer.Option(help="Server URL: http://host:port or …/v1.")] = None,
    model: Annotated[str | None, typer.Option(help="Served model id (default: the only one served).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML, TOML or JSON config file.")] = None,
    api_key_file: Annotated[Path | None, typer.Option(help="File holding the API key.")] = None,
    endpoint_kind: Annotated[str | None, typer.Option(help="completions or chat (default: the task's).")] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="--search rate: a cap on requests in flight (default none).")
    ] = None,
    arrival: Annotated[str | None, typer.Option(help="poisson (default) or constant.")] = None,
    burstiness: Annotated[float | None, typer.Option(help="Gamma shape k of the inter-arrival times.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the arrivals, prompts and sampling.")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N documents (a dataset task).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Generation cap per request.")] = None,
    tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra folder of task YAML files.")] = None,
    serve: Annotated[
        str | None, typer.Option(help="Start vLLM with this model and search it.", rich_help_panel=_OPT)
    ] = None,
    server_arg: Annotated[
        list[str] | None, typer.Option("--server-arg", help="Extra vLLM flag.", rich_help_panel=_OPT)
    ] = None,
    server_env: Annotated[
        list[str] | None, typer.Option("--server-env", help="KEY=VALUE.", rich_help_panel=_OPT)
    ] = None,
    fresh: Annotated[bool, typer.Option(help="Replace a search already in the output dir.")] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="No capacity.html nor points' report.html.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No line per point.")] = False,
    **server_options: Any,
) -> None:
    """Find the highest load at which --slo-share of requests meet every --goodput SLO: bracket, then bisect."""
    from evalkit.capacity.run import CapacityOptions, run_capacity
    from evalkit.cli.run import _parse_env
    from evalkit.cli.server_options import server_fields
    from evalkit.config.settings import parse_duration_s
    from evalkit.reporting.capacity_view import capacity_sentence

    try:
        if search not in ("rate", "concurrency"):
            raise ConfigError(f"--search {search!r}: give rate or concurrency")
        if (start_concurrency if search == "rate" else start_rate) is not None:
            raise ConfigError("--start-rate goes with --search rate, --start-concurrency with --search concurrency")
        durations = {}
        for flag, text in (("--point-duration", point_duration), ("--max-duration", max_duration)):
            try:
                durations[flag] = parse_duration_s(text) if text is not None else None
            except ValueError as e:
                raise ConfigError(f"{flag} {text!r}: {e}") from None
        options = CapacityOptions(
            out=output_dir, goodput=goodput or [], slo_share=slo_share, search=search,  # type: ignore[arg-type]
            start=start_rate if search == "rate" else start_concurrency, tolerance=tolerance,
            point_duration_s=durations["--point-duration"], point_requests=point_requests,
            max_duration_s=durations["--max-duration"], warmup=warmup, fresh=fresh,
        )  # fmt: skip
        server_given = {k: v for k, v in server_fields(server_options.get).items() if v is not None}
        if server_arg:
            server_given["extra_args"] = server_arg
        if server_env:
            server_given["env"] = _parse_env(server_env)
        server = {"model": serve, **server_given} if serve is not None else (server_given or None)
        workload = workload_settings(server_options.get, leave_out=NOT_IN_A_SEARCH)
        settings: dict[str, Any] = dict(
            endpoint=endpoint, model=model, api_key_file=api_key_file, endpoint_kind=endpoint_kind,
            concurrency=concurrency, arrival=arrival, burstiness=burstiness, seed=seed, limit=limit,
            temperature=temperature, max_tokens=max_tokens, tasks_dir=tasks_dir or None, server=server,
            cost_per_gpu_hour=cost_per_gpu_hour, gpus_billed=gpus_billed, report=False if no_report else None,
            workload=workload or None,
        )  # fmt: skip

        def on_point(p: Any) -> None:
            if not quiet:
                share = f"{p.goodput_share:.2%}" if p.goodput_share is not None else "—"
                held = "holds" if p.holds else "fails"
                note = f" ({p.error})" if p.error else ""
                typer.echo(
                    f"  {p.step:<7} {p.offered:g}: {share} within SLOs over {p.requests} requests, {held}{note}",
                    err=True,
                )

        record = run_capacity(tasks, options, config=config, argv=sys.argv, on_point=on_point, **settings)
    except EvalkitError as e:
        fail(e)
    typer.echo(capacity_sentence(record))
    typer.echo(str(output_dir / "capacity.json"))
    if record.status == "below_start":
        raise typer.Exit(EXIT_BELOW_START)
    if record.status in ("cannot_decide", "max_duration"):
        raise typer.Exit(EXIT_CANNOT_DECIDE)
