"""``evalkit watch`` (canary ticks on a live endpoint) and ``evalkit watch report`` (its history page)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalkit.cli.common import (
    ApplyChatTemplateOption,
    DataDirOption,
    FewshotAsMultiturnOption,
    IncludePathOption,
    SystemInstructionOption,
    TokenizerOption,
    fail,
    watch_app,
)
from evalkit.errors import EvalkitError


def _seconds(text: str) -> float:
    """``10m``, ``30s``, ``0.2s``, ``1h``, ``1d`` or plain seconds."""
    from evalkit.errors import ConfigError

    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"--every {text!r} is not a duration; pass e.g. 10m, 30s, 0.5s or 1h")
    return value


@watch_app.callback()
def watch(
    ctx: typer.Context,
    endpoint: Annotated[str | None, typer.Option(help="The live server: http://host:port or …/v1.")] = None,
    task: Annotated[str | None, typer.Option(help="Task to run a slice of every tick, e.g. gsm8k.")] = None,
    every: Annotated[str, typer.Option(help="Interval between tick starts: 10m, 30s, 0.5s, 1h.")] = "10m",
    per_tick: Annotated[
        int, typer.Option(min=1, help="Documents per tick (a seeded rotation covers the whole set over time).")
    ] = 50,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Watch dir: history.jsonl, ticks/NNNNNN run dirs (resumed on restart)."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="Baseline run dir (same task); without it the first --baseline-ticks ticks are the baseline."
        ),
    ] = None,
    baseline_ticks: Annotated[
        int, typer.Option(min=1, help="Ticks that form the baseline when --baseline is not given.")
    ] = 3,
    window: Annotated[int, typer.Option(min=1, help="Ticks judged together against the baseline.")] = 6,
    policy: Annotated[
        Path | None, typer.Option("--policy", "-p", help="Gate policy YAML (default: the gate's with alpha 0.01).")
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="Canary requests in flight (production traffic comes first).")
    ] = 2,
    request_rate: Annotated[float, typer.Option(min=0.001, help="Canary requests sent per second, at most.")] = 2.0,
    seed: Annotated[int, typer.Option(help="Seed of the documents' rotation.")] = 0,
    ticks: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many ticks in all (default: run until stopped).")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus /metrics on this port (0..65535; 0: a free one).")
    ] = None,
    metrics_addr: Annotated[
        str, typer.Option(help="Address /metrics listens on (0.0.0.0 in a container).")
    ] = "127.0.0.1",
    alert_webhook: Annotated[
        str | None,
        typer.Option(
            help="POST a JSON message here when the verdict changes: an http(s) URL; user:password@ in it is sent "
            "as Basic auth (retried, never blocks ticks)."
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Served model id (default: the only one served).")] = None,
    api_key_file: Annotated[
        Path | None, typer.Option(help="File holding the API key (else EVALKIT_API_KEY / OPENAI_API_KEY).")
    ] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Generation cap per request.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    num_fewshot: Annotated[int | None, typer.Option(help="Few-shot examples (lm-eval tasks).")] = None,
    tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra folder of task YAML files (repeatable).")] = None,
    include_path: IncludePathOption = None,
    tokenizer: TokenizerOption = None,
    data_dir: DataDirOption = None,
    apply_chat_template: ApplyChatTemplateOption = False,
    fewshot_as_multiturn: FewshotAsMultiturnOption = None,
    system_instruction: SystemInstructionOption = None,
) -> None:
    """Run a slice of TASK against ENDPOINT every interval and judge the last ticks against a baseline. Exit
    status of the last tick: 0 pass, 1 fail, 2 cannot decide (the tick failed, no usable baseline, no tick
    judged). `evalkit watch report DIR` draws the history."""
    if ctx.invoked_subcommand is not None:
        return
    import signal

    from evalkit.watch import Watch, WatchSettings
    from evalkit.watch.tick_log import exit_code, outcome_line

    if endpoint is None or task is None or output is None:
        fail(EvalkitError("evalkit watch needs --endpoint URL, --task NAME and -o DIR; see evalkit watch --help"))
    try:
        extra = dict(
            model=model,
            api_key_file=api_key_file,
            max_tokens=max_tokens,
            temperature=temperature,
            num_fewshot=num_fewshot,
            tasks_dir=tasks_dir,
            include_path=include_path or None,
            tokenizer=tokenizer,
            data_dir=data_dir,
            apply_chat_template=apply_chat_template,
            fewshot_as_multiturn=fewshot_as_multiturn,
            system_instruction=system_instruction,
        )
        settings = WatchSettings(
            task=task,
            endpoint=endpoint,
            out=output,
            every_s=_seconds(every),
            per_tick=per_tick,
            window=window,
            baseline=baseline,
            baseline_ticks=baseline_ticks,
            seed=seed,
            concurrency=concurrency,
            request_rate=request_rate,
            ticks=ticks,
            policy=policy,
            alert_webhook=alert_webhook,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            run={k: v for k, v in extra.items() if v is not None},
        )
        w = Watch(settings, echo=lambda line: typer.echo(f"evalkit watch: {line}", err=True))
        signal.signal(signal.SIGTERM, lambda *_: w.stop())
        history = w.run()
    except EvalkitError as e:
        fail(e)
    except KeyboardInterrupt:
        typer.echo("evalkit: watch stopped; the history and ticks are kept (the same command carries on)", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"evalkit watch: {outcome_line(history)}", err=True)
    raise typer.Exit(exit_code(history))


@watch_app.command("report")
def watch_report(
    watch_dir: Annotated[Path, typer.Argument(help="The watch dir (-o of evalkit watch).")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="HTML file or folder (default WATCH_DIR/watch.html).")
    ] = None,
) -> None:
    """One self-contained HTML page of a watch's history: accuracy with its interval, speed, verdict changes."""
    from evalkit.watch.watch_page import render_watch

    try:
        path = render_watch(watch_dir, output)
    except EvalkitError as e:
        fail(e)
    except OSError as e:
        fail(EvalkitError(f"cannot write the watch report ({e.strerror}: {e.filename}); pass -o a writable file"))
    typer.echo(str(path))
