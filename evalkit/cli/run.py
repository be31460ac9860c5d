"""The ``evalkit`` command: thin Typer commands over library functions."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from evalkit.errors import EvalkitError

app = typer.Typer(no_args_is_help=True, help="Accuracy and speed of an LLM serving config.")
tasks_app = typer.Typer(no_args_is_help=True, help="List and inspect tasks.")
app.add_typer(tasks_app, name="tasks")
watch_app = typer.Typer(
    invoke_without_command=True,
    help="Canary evals on a live endpoint every interval: drift verdicts, Prometheus /metrics, alerts.",
)
app.add_typer(watch_app, name="watch")
config_app = typer.Typer(no_args_is_help=True, help="The effective configuration of a run.")
app.add_typer(config_app, name="config")


def _version(value: bool) -> None:
    if value:
        from evalkit import __version__

        typer.echo(f"evalkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Accuracy and speed of an LLM serving config. Shell completion: evalkit --install-completion."""


def _fail(err: EvalkitError) -> NoReturn:
    typer.echo(f"evalkit: error: {err}", err=True)
    raise typer.Exit(err.exit_code)


SERVE_HELP = "Start vLLM with this model (path or id) and evaluate it; stopped at the end."
_OPT = "server (with --serve)"


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def run(
    tasks: Annotated[list[str] | None, typer.Argument(help="Task names, e.g. gsm8k aime25.")] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            help="Server URL: http://host:port, …/v1 or …/v1/completions. Repeat it to shard the eval over several servers of the same model (--concurrency is the total)."
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Served model id (default: the only one served).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML, TOML or JSON config file.")] = None,
    api_key_file: Annotated[
        Path | None, typer.Option(help="File holding the API key (else EVALKIT_API_KEY / OPENAI_API_KEY).")
    ] = None,
    endpoint_kind: Annotated[str | None, typer.Option(help="completions or chat (default: the task's).")] = None,
    concurrency: Annotated[str | None, typer.Option(help="Requests in flight: a number, or auto (default).")] = None,
    max_concurrency: Annotated[int | None, typer.Option(help="Upper bound for --concurrency auto.")] = None,
    auto_start: Annotated[int | None, typer.Option(help="Where --concurrency auto starts (default 128).")] = None,
    warmup: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Warm-up requests per sampling config before the timed phase (default: the run's concurrency level).",
        ),
    ] = None,
    no_warmup: Annotated[bool, typer.Option("--no-warmup", help="Send no warm-up requests.")] = False,
    limit: Annotated[int | None, typer.Option(help="Only the first N documents.")] = None,
    num_fewshot: Annotated[int | None, typer.Option(help="Few-shot examples (lm-eval tasks).")] = None,
    num_samples: Annotated[int | None, typer.Option(help="Samples per problem (repeats).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    top_p: Annotated[float | None, typer.Option(help="Nucleus sampling top_p.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Generation cap per request (lm-eval's max_gen_toks).")] = None,
    max_length: Annotated[
        int | None,
        typer.Option(help="Context length: prompts are cut to max_length - max_tokens tokens (lm-eval's max_length)."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed sent with each request.")] = None,
    chat_template_kwargs: Annotated[str | None, typer.Option(help="JSON, e.g. '{\"enable_thinking\": true}'.")] = None,
    drop_reasoning: Annotated[
        bool | None,
        typer.Option(
            "--drop-reasoning/--keep-reasoning",
            help="Multi-turn tool tasks: leave earlier turns' reasoning out of the history sent back (default: drop).",
        ),
    ] = None,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", "-o", help="Run directory (default reports/<tasks>-<model>-<time>).")
    ] = None,
    tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra folder of task YAML files (repeatable).")] = None,
    fresh: Annotated[bool, typer.Option(help="Discard what the output dir holds instead of resuming.")] = False,
    max_error_rate: Annotated[
        float | None, typer.Option(help="Fail (exit 1) when more requests than this fraction failed.")
    ] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not write report.html.")] = False,
    idle_timeout: Annotated[
        float | None, typer.Option(help="Seconds without data before a request is abandoned and retried.")
    ] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Attempts per request (retries + 1).")] = None,
    allow_model_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-model-mismatch",
            help="Accept answers whose `model` is neither the run's model nor an id /v1/models lists (else each such request fails).",
        ),
    ] = False,
    serve: Annotated[str | None, typer.Option(help=SERVE_HELP, rich_help_panel=_OPT)] = None,
    served_model_name: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    tensor_parallel_size: Annotated[
        int | None, typer.Option("--tensor-parallel-size", "--tp", rich_help_panel=_OPT)
    ] = None,
    data_parallel_size: Annotated[
        int | None, typer.Option("--data-parallel-size", "--dp", rich_help_panel=_OPT)
    ] = None,
    pipeline_parallel_size: Annotated[
        int | None, typer.Option("--pipeline-parallel-size", "--pp", rich_help_panel=_OPT)
    ] = None,
    enable_expert_parallel: Annotated[
        bool | None, typer.Option("--enable-expert-parallel", rich_help_panel=_OPT)
    ] = None,
    data_parallel_size_local: Annotated[
        int | None,
        typer.Option(
            help="Data-parallel ranks on this node (the others on headless nodes, docs/scale-out.md).",
            rich_help_panel=_OPT,
        ),
    ] = None,
    data_parallel_address: Annotated[
        str | None,
        typer.Option(help="This node's address that the other nodes' data-parallel ranks reach.", rich_help_panel=_OPT),
    ] = None,
    data_parallel_rpc_port: Annotated[
        int | None, typer.Option(help="Data-parallel RPC port, the same on every node.", rich_help_panel=_OPT)
    ] = None,
    data_parallel_backend: Annotated[
        str | None,
        typer.Option(
            help="mp or ray (one launch starts the ranks of every node of a Ray cluster).", rich_help_panel=_OPT
        ),
    ] = None,
    distributed_executor_backend: Annotated[
        str | None, typer.Option(help="mp or ray (tensor/pipeline workers over a Ray cluster).", rich_help_panel=_OPT)
    ] = None,
    api_server_count: Annotated[
        int | None, typer.Option(help="API server processes on this node.", rich_help_panel=_OPT)
    ] = None,
    nnodes: Annotated[
        int | None,
        typer.Option(
            help="Nodes of a multiprocessing multi-node deployment (evalkit starts node rank 0).", rich_help_panel=_OPT
        ),
    ] = None,
    master_addr: Annotated[
        str | None,
        typer.Option(help="With --nnodes: this node's address that the other nodes reach.", rich_help_panel=_OPT),
    ] = None,
    master_port: Annotated[
        int | None,
        typer.Option(help="With --nnodes: the torch.distributed port (vLLM default 29501).", rich_help_panel=_OPT),
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option(rich_help_panel=_OPT)] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(rich_help_panel=_OPT)] = None,
    max_model_len: Annotated[int | None, typer.Option(rich_help_panel=_OPT)] = None,
    dtype: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    tokenizer_mode: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    reasoning_parser: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    tool_call_parser: Annotated[str | None, typer.Option(rich_help_panel=_OPT)] = None,
    enable_auto_tool_choice: Annotated[
        bool | None,
        typer.Option(
            "--enable-auto-tool-choice",
            help="Let the model call tools (tool-calls tasks need it; with --tool-call-parser).",
            rich_help_panel=_OPT,
        ),
    ] = None,
    enforce_eager: Annotated[bool | None, typer.Option("--enforce-eager", rich_help_panel=_OPT)] = None,
    batch_invariant: Annotated[
        bool | None,
        typer.Option(
            "--batch-invariant",
            help="VLLM_BATCH_INVARIANT=1: answers independent of batching (for gate runs).",
            rich_help_panel=_OPT,
        ),
    ] = None,
    gpus: Annotated[
        str | None, typer.Option(help="CUDA_VISIBLE_DEVICES for the server, e.g. 0,1.", rich_help_panel=_OPT)
    ] = None,
    port: Annotated[int | None, typer.Option(help="Server port (default: a free one).", rich_help_panel=_OPT)] = None,
    launcher: Annotated[
        str | None,
        typer.Option(
            help="auto, serve (vllm serve) or module (python -m vllm.entrypoints.openai.api_server).",
            rich_help_panel=_OPT,
        ),
    ] = None,
    startup_timeout: Annotated[
        float | None, typer.Option(help="Seconds to wait for the server to become ready.", rich_help_panel=_OPT)
    ] = None,
    server_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--server-arg",
            help="Extra vLLM flag, e.g. --server-arg=--tokenizer-mode=deepseek_v32 (repeatable).",
            rich_help_panel=_OPT,
        ),
    ] = None,
    server_env: Annotated[
        list[str] | None,
        typer.Option("--server-env", help="KEY=VALUE for the server's environment (repeatable).", rich_help_panel=_OPT),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    repeats: Annotated[
        int,
        typer.Option(
            min=1,
            max=100,
            help="Run it N times, one after another on the same server, into OUTPUT_DIR/repeat-1 … (for the gate's speed rules).",
        ),
    ] = 1,
) -> None:
    """Evaluate TASKS against a server and write the result store (manifest, samples, summary, report)."""
    params = dict(locals())  # the options, before anything else is bound here
    from evalkit import api
    from evalkit.console import LiveProgress, console, print_summary
    from evalkit.contracts import summary_json

    try:
        settings, config_file = _run_settings(params)
        with LiveProgress(enabled=not quiet and sys.stderr.isatty()) as progress:
            if repeats > 1:
                results = api.run_repeats(
                    repeats=repeats, config=config_file, progress=progress, argv=sys.argv, **settings
                )
            else:
                results = [api.run(config=config_file, progress=progress, argv=sys.argv, **settings)]
        for result in results:
            print_summary(summary_json(result.summary), str(result.run_dir))
    except EvalkitError as e:
        _fail(e)
    except KeyboardInterrupt:
        console.print("evalkit: interrupted; completed samples are kept in the run dir (re-run to resume)")
        raise typer.Exit(130) from None


def _run_settings(params: dict[str, Any]) -> tuple[dict[str, Any], Path | None]:
    """The run command's options as run settings (None: not given) and the --config file. Every option must be
    taken here (an option that is not would be ignored silently: AssertionError)."""
    p = dict(params)
    take = p.pop
    server_fields = dict(
        served_model_name=take("served_model_name"),
        tensor_parallel_size=take("tensor_parallel_size"),
        data_parallel_size=take("data_parallel_size"),
        pipeline_parallel_size=take("pipeline_parallel_size"),
        enable_expert_parallel=take("enable_expert_parallel"),
        data_parallel_size_local=take("data_parallel_size_local"),
        data_parallel_address=take("data_parallel_address"),
        data_parallel_rpc_port=take("data_parallel_rpc_port"),
        data_parallel_backend=take("data_parallel_backend"),
        distributed_executor_backend=take("distributed_executor_backend"),
        api_server_count=take("api_server_count"),
        nnodes=take("nnodes"),
        master_addr=take("master_addr"),
        master_port=take("master_port"),
        max_num_seqs=take("max_num_seqs"),
        gpu_memory_utilization=take("gpu_memory_utilization"),
        max_model_len=take("max_model_len"),
        dtype=take("dtype"),
        tokenizer_mode=take("tokenizer_mode"),
        reasoning_parser=take("reasoning_parser"),
        tool_call_parser=take("tool_call_parser"),
        enable_auto_tool_choice=take("enable_auto_tool_choice"),
        enforce_eager=take("enforce_eager"),
        batch_invariant=take("batch_invariant"),
        gpus=take("gpus"),
        port=take("port"),
        launcher=take("launcher"),
        startup_timeout_s=take("startup_timeout"),
        extra_args=take("server_arg") or None,
        env=_parse_env(take("server_env")),
    )
    given = {k: v for k, v in server_fields.items() if v is not None}
    serve = take("serve")
    server: dict[str, Any] | None = None
    if serve is not None:
        server = {"model": serve, **given}
    elif given:
        server = given  # completes a server: section of --config, or is refused there
    settings: dict[str, Any] = dict(
        tasks=take("tasks") or None,
        endpoint=take("endpoint") or None,
        model=take("model"),
        api_key_file=take("api_key_file"),
        endpoint_kind=take("endpoint_kind"),
        concurrency=take("concurrency"),
        max_concurrency=take("max_concurrency"),
        auto_start=take("auto_start"),
        warmup=_warmup_setting(take("warmup"), take("no_warmup")),
        limit=take("limit"),
        num_fewshot=take("num_fewshot"),
        num_samples=take("num_samples"),
        temperature=take("temperature"),
        top_p=take("top_p"),
        max_tokens=take("max_tokens"),
        max_length=take("max_length"),
        seed=take("seed"),
        chat_template_kwargs=take("chat_template_kwargs"),
        drop_reasoning=take("drop_reasoning"),
        output_dir=take("output_dir"),
        tasks_dir=take("tasks_dir") or None,
        fresh=take("fresh") or None,
        max_error_rate=take("max_error_rate"),
        report=False if take("no_report") else None,
        idle_timeout_s=take("idle_timeout"),
        max_attempts=take("max_attempts"),
        allow_model_mismatch=take("allow_model_mismatch") or None,
        server=server,
    )
    config_file = take("config")
    p.pop("quiet", None)  # how the command shows progress, not a setting
    p.pop("repeats", None)  # how many runs the command makes of these settings, not a setting of one
    assert not p, f"evalkit run options not mapped to settings in cli._run_settings: {sorted(p)}"
    return settings, config_file


def _warmup_setting(warmup: int | None, no_warmup: bool) -> int | None:
    from evalkit.errors import ConfigError

    if no_warmup and warmup:
        raise ConfigError(f"give either --warmup {warmup} or --no-warmup, not both")
    return 0 if no_warmup else warmup


def config_show(**params: Any) -> None:
    """Each run setting's effective value and its source (command line, file PATH, env EVALKIT_X or default),
    secrets redacted. Takes the options of evalkit run, e.g. evalkit config show gsm8k -c run.yaml --limit 50."""
    from evalkit.config_show import explain_config

    try:
        settings, config_file = _run_settings(params)
        lines = explain_config(settings, config_file)
    except EvalkitError as e:
        _fail(e)
    name_w = max(len(s.name) for s in lines)
    value_w = min(48, max(len(s.value) for s in lines))
    for s in lines:
        typer.echo(f"{s.name:<{name_w}}  {s.value:<{value_w}}  {s.source}")


# config show takes exactly evalkit run's options (--quiet aside): the same parameters, one way to read them
_RUN_SIGNATURE = inspect.signature(run, eval_str=True)
config_show.__signature__ = _RUN_SIGNATURE.replace(  # type: ignore[attr-defined]
    parameters=[p for p in _RUN_SIGNATURE.parameters.values() if p.name != "quiet"]
)
config_show.__annotations__ = {k: v for k, v in run.__annotations__.items() if k != "quiet"}
config_app.command("show", context_settings={"help_option_names": ["-h", "--help"]})(config_show)


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
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Output HTML file, or a folder to write report.html / compare.html into."),
    ] = None,
) -> None:
    """Render report.html from run dirs alone (no network)."""
    from evalkit import api

    try:
        path = api.report(run_dirs, output)
    except EvalkitError as e:
        _fail(e)
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
    runs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="BASELINE CANDIDATE (two run dirs), or CANDIDATE alone to check it against the policy's expected scores."
        ),
    ] = None,
    baseline: Annotated[
        list[Path] | None,
        typer.Option("--baseline", "-b", help="A baseline run dir (repeatable: several runs of the baseline config)."),
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
    force: Annotated[
        bool, typer.Option(help="Compare runs even when task version, data, limit, few-shot or prompts differ.")
    ] = False,
) -> None:
    """Release gate: exit 0 when the candidate keeps the baseline's accuracy and speed, 1 when a rule fails,
    2 when it cannot decide (nothing comparable, coverage too low, no rule evaluated) or the input is bad.
    With several runs per side (--baseline/--candidate repeated) speed is judged on run-to-run variation."""
    from rich.console import Console

    from evalkit import api
    from evalkit.gate.command import print_outcome

    try:
        outcome = api.gate(
            *(runs or []), baselines=baseline, candidates=candidate, policy=policy, output=output, force=force
        )
    except EvalkitError as e:
        _fail(e)
    print_outcome(outcome, Console(highlight=False, width=max(120, Console().width)))
    if outcome.result.verdict == "cannot_decide":
        typer.echo(f"evalkit: cannot decide: {'; '.join(outcome.result.reasons)}", err=True)
    raise typer.Exit(outcome.exit_code)


@app.command()
def sweep(
    file: Annotated[
        Path,
        typer.Argument(help="Sweep file (YAML): tasks, limit, endpoint or server, configs, sampling, concurrency."),
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Sweep folder: runs/<name>/, sweep.csv, sweep.md, compare.html."),
    ] = None,
    collect: Annotated[
        bool,
        typer.Option(
            "--collect",
            help="Run nothing: tabulate the finished runs under -o DIR/runs/ (e.g. written by Kubernetes Jobs).",
        ),
    ] = False,
    k8s: Annotated[
        Path | None,
        typer.Option(
            "--k8s",
            help="Run nothing: write Kubernetes manifests (one Job per combination, a collect Job) into this folder.",
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="With --k8s: the image with evalkit and vLLM (docker/Dockerfile).", rich_help_panel="Kubernetes"
        ),
    ] = None,
    pvc: Annotated[
        str | None,
        typer.Option(
            help="With --k8s: the PersistentVolumeClaim (ReadWriteMany) the runs are written to.",
            rich_help_panel="Kubernetes",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(help="With --k8s: namespace of the objects (default: kubectl's).", rich_help_panel="Kubernetes"),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="With --k8s: the sweep's name in object names and labels (default: the file's stem).",
            rich_help_panel="Kubernetes",
        ),
    ] = None,
    model_cache_pvc: Annotated[
        str | None,
        typer.Option(
            help="With --k8s: a PersistentVolumeClaim mounted as vLLM's Hugging Face cache.",
            rich_help_panel="Kubernetes",
        ),
    ] = None,
    api_key_secret: Annotated[
        str | None,
        typer.Option(
            help="With --k8s: a Secret whose keys (e.g. EVALKIT_API_KEY) become evalkit's environment.",
            rich_help_panel="Kubernetes",
        ),
    ] = None,
) -> None:
    """Run every combination of server config x sampling x concurrency (resumable) and tabulate them: exit 0
    when every combination has a finished run of the sweep file's settings, 1 when one failed or has none (the
    others still ran; its row's error cell says why), 2 when the input is bad (sweep file, -o) and nothing ran."""
    from evalkit.sweep import load_spec, run_sweep
    from evalkit.sweep.run import collect as collect_runs

    try:
        spec = load_spec(file)
        if k8s is not None:
            _emit_k8s(spec, file, k8s, image, pvc, namespace, name, model_cache_pvc, api_key_secret)
            return
        if output is None:
            raise EvalkitError("evalkit sweep needs -o DIR (the sweep folder), or --k8s DIR to write manifests")
        if collect:
            if not (output / "runs").is_dir():
                raise EvalkitError(f"{output} holds no runs/ folder; pass -o the sweep folder the runs were written to")
            result = collect_runs(spec, output)
        else:
            result = run_sweep(spec, output, echo=lambda line: typer.echo(line, err=True))
    except EvalkitError as e:
        _fail(e)
    except KeyboardInterrupt:
        typer.echo("evalkit: interrupted; finished combinations are kept (re-run to resume)", err=True)
        raise typer.Exit(130) from None
    typer.echo(result.files["sweep.md"].read_text(), nl=False)
    if result.skipped:
        typer.echo(f"skipped {len(result.skipped)} finished combination(s): {', '.join(result.skipped)}")
    for combo, why in {**result.stale, **result.failed}.items():
        typer.echo(f"evalkit: {combo}: {why}", err=True)
    typer.echo(str(result.files.get("compare.html", result.files["sweep.md"])))
    bad = list(dict.fromkeys([*result.failed, *result.missing]))
    if bad:
        what = "failed or have no finished run of the sweep file's settings" if collect else "failed"
        typer.echo(f"evalkit: {len(bad)} of {len(result.rows)} combination(s) {what}: {', '.join(bad)}", err=True)
    raise typer.Exit(1 if bad else 0)


def _emit_k8s(spec: Any, file: Path, out: Path, image: str | None, pvc: str | None, namespace: str | None,
              name: str | None, model_cache_pvc: str | None, api_key_secret: str | None) -> None:  # fmt: skip
    from evalkit.sweep.k8s import emit

    if image is None or pvc is None:
        raise EvalkitError(
            "--k8s needs --image IMAGE (docker/Dockerfile built and pushed) and --pvc CLAIM (the shared volume)"
        )
    try:
        files = emit(spec, out, image=image, pvc=pvc, sweep_name=name or file.stem, namespace=namespace,
                     model_cache_pvc=model_cache_pvc, api_key_secret=api_key_secret)  # fmt: skip
    except OSError as e:
        raise EvalkitError(
            f"cannot write the manifests to {out} ({e.strerror}: {e.filename}); pass --k8s a writable folder"
        ) from None
    typer.echo(
        f"wrote {len(files)} manifests to {out}: kubectl apply -f {out}; when the Jobs are done, kubectl apply -f {out / 'collect'}"
    )


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
) -> None:
    """Run a slice of TASK against ENDPOINT every interval and judge the last ticks against a baseline. Exit
    status of the last tick: 0 pass, 1 fail, 2 cannot decide (the tick failed, no usable baseline, no tick
    judged). `evalkit watch report DIR` draws the history."""
    if ctx.invoked_subcommand is not None:
        return
    import signal

    from evalkit.watch import Watch, WatchSettings
    from evalkit.watch.history import exit_code, outcome_line

    if endpoint is None or task is None or output is None:
        _fail(EvalkitError("evalkit watch needs --endpoint URL, --task NAME and -o DIR; see evalkit watch --help"))
    try:
        extra = dict(
            model=model,
            api_key_file=api_key_file,
            max_tokens=max_tokens,
            temperature=temperature,
            num_fewshot=num_fewshot,
            tasks_dir=tasks_dir,
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
        _fail(e)
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
    from evalkit.watch.report import render_watch

    try:
        path = render_watch(watch_dir, output)
    except EvalkitError as e:
        _fail(e)
    except OSError as e:
        _fail(EvalkitError(f"cannot write the watch report ({e.strerror}: {e.filename}); pass -o a writable file"))
    typer.echo(str(path))


def main() -> None:
    from evalkit.api import offline_environment

    offline_environment()
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
