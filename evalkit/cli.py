"""The ``evalkit`` command: thin Typer commands over library functions."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from evalkit.errors import EvalkitError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Accuracy and speed of an LLM serving config.")
tasks_app = typer.Typer(no_args_is_help=True, help="List and inspect tasks.")
app.add_typer(tasks_app, name="tasks")


def _fail(err: EvalkitError) -> NoReturn:
    typer.echo(f"evalkit: error: {err}", err=True)
    raise typer.Exit(err.exit_code)


SERVE_HELP = "Start vLLM with this model (path or id) and evaluate it; stopped at the end."
_OPT = "server (with --serve)"


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def run(
    tasks: Annotated[list[str] | None, typer.Argument(help="Task names, e.g. gsm8k aime25.")] = None,
    endpoint: Annotated[str | None, typer.Option(help="Server URL: http://host:port, …/v1 or …/v1/completions.")] = None,
    model: Annotated[str | None, typer.Option(help="Served model id (default: the only one served).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML config file.")] = None,
    api_key_file: Annotated[Path | None, typer.Option(help="File holding the API key (else EVALKIT_API_KEY / OPENAI_API_KEY).")] = None,
    endpoint_kind: Annotated[str | None, typer.Option(help="completions or chat (default: the task's).")] = None,
    concurrency: Annotated[str | None, typer.Option(help="Requests in flight: a number, or auto (default).")] = None,
    max_concurrency: Annotated[int | None, typer.Option(help="Upper bound for --concurrency auto.")] = None,
    auto_start: Annotated[int | None, typer.Option(help="Where --concurrency auto starts (default 128).")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N documents.")] = None,
    num_fewshot: Annotated[int | None, typer.Option(help="Few-shot examples (lm-eval tasks).")] = None,
    num_samples: Annotated[int | None, typer.Option(help="Samples per problem (repeats).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    top_p: Annotated[float | None, typer.Option(help="Nucleus sampling top_p.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Generation cap per request (lm-eval's max_gen_toks).")] = None,
    max_length: Annotated[int | None, typer.Option(help="Context length: prompts are cut to max_length - max_tokens tokens (lm-eval's max_length).")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed sent with each request.")] = None,
    chat_template_kwargs: Annotated[str | None, typer.Option(help='JSON, e.g. \'{"enable_thinking": true}\'.')] = None,
    output_dir: Annotated[Path | None, typer.Option("--output-dir", "-o", help="Run directory (default reports/<tasks>-<model>-<time>).")] = None,
    tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra folder of task YAML files (repeatable).")] = None,
    fresh: Annotated[bool, typer.Option(help="Discard what the output dir holds instead of resuming.")] = False,
    max_error_rate: Annotated[float | None, typer.Option(help="Fail (exit 1) when more requests than this fraction failed.")] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not write report.html.")] = False,
    idle_timeout: Annotated[float | None, typer.Option(help="Seconds without data before a request is abandoned and retried.")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Attempts per request (retries + 1).")] = None,
    serve: Annotated[str | None, typer.Option(help=SERVE_HELP, rich_help_panel=_OPT)] = None,
    served_model_name: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    tensor_parallel_size: Annotated[int | None, typer.Option("--tensor-parallel-size", "--tp", rich_help_panel=_OPT)] = None,
    data_parallel_size: Annotated[int | None, typer.Option("--data-parallel-size", "--dp", rich_help_panel=_OPT)] = None,
    pipeline_parallel_size: Annotated[int | None, typer.Option("--pipeline-parallel-size", "--pp", rich_help_panel=_OPT)] = None,
    enable_expert_parallel: Annotated[bool | None, typer.Option("--enable-expert-parallel", rich_help_panel=_OPT)] = None,
    max_num_seqs: Annotated[int | None, typer.Option(rich_help_panel=_OPT)] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(rich_help_panel=_OPT)] = None,
    max_model_len: Annotated[int | None, typer.Option(rich_help_panel=_OPT)] = None,
    dtype: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    tokenizer_mode: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    reasoning_parser: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    tool_call_parser: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    enable_auto_tool_choice: Annotated[bool | None, typer.Option("--enable-auto-tool-choice", help="Let the model call tools (tool-calls tasks need it; with --tool-call-parser).", rich_help_panel=_OPT)] = None,
    enforce_eager: Annotated[bool | None, typer.Option("--enforce-eager", rich_help_panel=_OPT)] = None,
    batch_invariant: Annotated[bool | None, typer.Option("--batch-invariant", help="VLLM_BATCH_INVARIANT=1: answers independent of batching (for gate runs).", rich_help_panel=_OPT)] = None,
    gpus: Annotated[str | None, typer.Option(help="CUDA_VISIBLE_DEVICES for the server, e.g. 0,1.", rich_help_panel=_OPT)] = None,
    port: Annotated[int | None, typer.Option(help="Server port (default: a free one).", rich_help_panel=_OPT)] = None,
    launcher: Annotated[str | None, typer.Option(help="auto, serve (vllm serve) or module (python -m vllm.entrypoints.openai.api_server).", rich_help_panel=_OPT)] = None,
    startup_timeout: Annotated[float | None, typer.Option(help="Seconds to wait for the server to become ready.", rich_help_panel=_OPT)] = None,
    server_arg: Annotated[list[str] | None, typer.Option("--server-arg", help="Extra vLLM flag, e.g. --server-arg=--tokenizer-mode=deepseek_v32 (repeatable).", rich_help_panel=_OPT)] = None,
    server_env: Annotated[list[str] | None, typer.Option("--server-env", help="KEY=VALUE for the server's environment (repeatable).", rich_help_panel=_OPT)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Evaluate TASKS against a server and write the result store (manifest, samples, summary, report)."""
    from evalkit.config import load_config
    from evalkit.console import LiveProgress, console, print_summary
    from evalkit.runner import Runner

    try:
        server: dict[str, Any] | None = None
        server_fields = dict(
            served_model_name=served_model_name, tensor_parallel_size=tensor_parallel_size,
            data_parallel_size=data_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
            enable_expert_parallel=enable_expert_parallel, max_num_seqs=max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, dtype=dtype,
            tokenizer_mode=tokenizer_mode, reasoning_parser=reasoning_parser, tool_call_parser=tool_call_parser,
            enable_auto_tool_choice=enable_auto_tool_choice, enforce_eager=enforce_eager, batch_invariant=batch_invariant, gpus=gpus, port=port, launcher=launcher,
            startup_timeout_s=startup_timeout, extra_args=server_arg or None, env=_parse_env(server_env),
        )
        given = {k: v for k, v in server_fields.items() if v is not None}
        if serve is not None:
            server = {"model": serve, **given}
        elif given:
            server = given  # completes a server: section of --config, or is refused there
        cli: dict[str, Any] = dict(
            tasks=tasks or None, endpoint=endpoint, model=model, api_key_file=api_key_file,
            endpoint_kind=endpoint_kind, concurrency=concurrency, max_concurrency=max_concurrency, auto_start=auto_start,
            limit=limit,
            num_fewshot=num_fewshot, num_samples=num_samples, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, max_length=max_length, seed=seed, chat_template_kwargs=chat_template_kwargs,
            output_dir=output_dir, tasks_dir=tasks_dir or None, fresh=fresh or None,
            max_error_rate=max_error_rate, report=False if no_report else None, idle_timeout_s=idle_timeout,
            max_attempts=max_attempts, server=server,
        )
        cfg = load_config(cli, config)
        with LiveProgress(enabled=not quiet and sys.stderr.isatty()) as progress:
            result = Runner(cfg, progress=progress, argv=sys.argv).run()
        print_summary(result["summary"], result["run_dir"])
    except EvalkitError as e:
        _fail(e)
    except KeyboardInterrupt:
        console.print("evalkit: interrupted; completed samples are kept in the run dir (re-run to resume)")
        raise typer.Exit(130) from None


def _parse_env(items: list[str] | None) -> dict[str, str] | None:
    if not items:
        return None
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            from evalkit.errors import ConfigError

            raise ConfigError(f"--server-env wants KEY=VALUE, got {item!r}")
        out[key] = value
    return out


@tasks_app.command("list")
def tasks_list(tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra task folder.")] = None) -> None:
    """Every known task with its kind, version and description."""
    from evalkit.tasks.registry import Registry

    try:
        reg = Registry(tasks_dir or [])
    except EvalkitError as err:
        _fail(err)
    for name in reg.names():
        entry = reg.entry(name)
        typer.echo(f"{name:<16} {entry.kind:<8} v{entry.version:<6} {entry.description}")


@tasks_app.command("show")
def tasks_show(
    name: str,
    tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra task folder.")] = None,
) -> None:
    """A task's defaults, metrics, data checksums and a preview of its first prompt."""
    import json

    from evalkit.tasks.base import TaskSettings
    from evalkit.tasks.registry import Registry

    try:
        reg = Registry(tasks_dir or [])
        entry = reg.entry(name)
        task = reg.get(name)
        defaults = task.defaults()
        typer.echo(f"name:        {task.name}\nkind:        {entry.kind}\nversion:     {task.version}")
        typer.echo(f"file:        {entry.path}\nendpoint:    {task.endpoint_kind}")
        typer.echo(f"description: {task.description}")
        typer.echo(f"defaults:    {json.dumps(defaults)}")
        typer.echo(f"metrics:     {', '.join(task.metric_names()) or '-'}")
        for split, sha in task.data_sha256.items():
            typer.echo(f"data {split:<6} {sha}  {task.data_files[split]}")
        settings = TaskSettings(**{k: v for k, v in defaults.items() if k in TaskSettings.__dataclass_fields__})
        typer.echo("\n--- first prompt ---\n" + task.preview(settings))
    except EvalkitError as e:
        _fail(e)


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One run dir (single report) or several (comparison).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Output HTML file, or a folder to write report.html / compare.html into.")] = None,
) -> None:
    """Render report.html from run dirs alone (no network)."""
    from evalkit.report import render_compare, render_run

    for d in run_dirs:
        if not (d / "summary.json").exists() and not (d / "samples.jsonl").exists():
            _fail(EvalkitError(f"{d} is not a run dir (no summary.json or samples.jsonl); pass the folder of a run"))
    single = len(run_dirs) == 1
    name = "report.html" if single else "compare.html"
    target = output / name if output is not None and output.is_dir() else output
    try:
        path = render_run(run_dirs[0], target) if single else render_compare(run_dirs, target or Path(name))
    except OSError as e:
        where = target or run_dirs[0] / name
        blocked = e.filename is not None and Path(e.filename) in Path(where).parents  # a folder on the way
        why = f"{e.strerror}: {e.filename}" if blocked else e.strerror or e
        _fail(EvalkitError(f"cannot write the report to {where} ({why}); pass -o a writable file path"))
    typer.echo(str(path))


@app.command()
def schema(
    name: Annotated[str, typer.Argument(help="summary, manifest or sample (one line of samples.jsonl).")],
) -> None:
    """Print the JSON Schema of a run dir's summary.json, manifest.json or samples.jsonl lines."""
    import json

    from evalkit.contracts import json_schema

    if name not in ("summary", "manifest", "sample"):
        _fail(EvalkitError(f"no schema named {name!r}; pass summary, manifest or sample"))
    typer.echo(json.dumps(json_schema(name), indent=2))  # type: ignore[arg-type]


@app.command()
def gate(
    runs: Annotated[list[Path], typer.Argument(help="BASELINE CANDIDATE (two run dirs), or CANDIDATE alone to check it against the policy's expected scores.")],
    policy: Annotated[Path | None, typer.Option("--policy", "-p", help="Policy YAML (default: the built-in policy, printed).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Folder for gate.json, gate.md, junit.xml, compare.html (default CANDIDATE/gate).")] = None,
    force: Annotated[bool, typer.Option(help="Compare runs even when task version, data, limit, few-shot or prompts differ.")] = False,
) -> None:
    """Release gate: exit 0 when the candidate keeps the baseline's accuracy and speed, 1 when a rule fails,
    2 when the runs cannot be compared or the input is bad."""
    from rich.console import Console

    from evalkit.gate.command import print_outcome, run_gate

    if len(runs) > 2:
        _fail(EvalkitError(f"evalkit gate takes BASELINE CANDIDATE or CANDIDATE alone, got {len(runs)} run dirs"))
    baseline, candidate = (runs[0], runs[1]) if len(runs) == 2 else (None, runs[0])
    try:
        outcome = run_gate(baseline, candidate, policy, output, force=force)
    except EvalkitError as e:
        _fail(e)
    except OSError as e:
        _fail(EvalkitError(f"cannot write the gate's outputs ({e.strerror}: {e.filename}); pass -o a writable folder"))
    print_outcome(outcome, Console(highlight=False, width=max(120, Console().width)))
    raise typer.Exit(outcome.exit_code)


@app.command()
def sweep(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML): tasks, limit, endpoint or server, configs, sampling, concurrency.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Sweep folder: runs/<name>/, sweep.csv, sweep.md, compare.html.")],
) -> None:
    """Run every combination of server config x sampling x concurrency (resumable) and tabulate them."""
    from evalkit.sweep import load_spec, run_sweep

    try:
        spec = load_spec(file)
        result = run_sweep(spec, output, echo=lambda line: typer.echo(line, err=True))
    except EvalkitError as e:
        _fail(e)
    except KeyboardInterrupt:
        typer.echo("evalkit: interrupted; finished combinations are kept (re-run to resume)", err=True)
        raise typer.Exit(130) from None
    typer.echo(result.files["sweep.md"].read_text(), nl=False)
    if result.skipped:
        typer.echo(f"skipped {len(result.skipped)} finished combination(s): {', '.join(result.skipped)}")
    for name, why in result.failed.items():
        typer.echo(f"evalkit: {name}: {why}", err=True)
    typer.echo(str(result.files.get("compare.html", result.files["sweep.md"])))
    raise typer.Exit(1 if result.failed else 0)


def main() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        rc = app(standalone_mode=False)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except typer.TyperException as e:  # click's errors (typer vendors click): bad flags, values, commands
        show = getattr(e, "show", None)
        if type(e).__name__ == "NoArgsIsHelpError" and show is not None:
            show()  # no arguments: the help text
        else:  # bad input like any other: one line (not the boxed usage text)
            ctx = getattr(e, "ctx", None)
            hint = f"; see {ctx.command_path} --help" if ctx is not None else ""
            typer.echo(f"evalkit: error: {' '.join(e.format_message().split()).rstrip('.')}{hint}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
