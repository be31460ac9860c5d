"""``evalkit run``: evaluate tasks against a server, and the mapping of its options to run settings
(``evalkit config show`` takes the same options)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from evalkit.cli import server_options
from evalkit.cli.common import (
    ApplyChatTemplateOption,
    DataDirOption,
    FewshotAsMultiturnOption,
    IncludePathOption,
    SystemInstructionOption,
    TokenizerOption,
    app,
    fail,
)
from evalkit.cli.server_options import PANEL as _OPT
from evalkit.cli.server_options import add_server_options
from evalkit.cli.workload_options import add_workload_options, workload_settings
from evalkit.errors import EvalkitError, RunError

K8S = "Sharded on Kubernetes / Slurm"
CLUSTER_KEYS = ("k8s", "shards", "image", "pvc", "api_key_secret", "namespace")
# the options of the server evalkit starts: each pod of --k8s would start its own, so they are refused there
SERVER_KEYS = frozenset({opt.name for opt in server_options.SERVER_OPTIONS} | {"serve", "server_arg", "server_env"})
SERVE_HELP = "Start vLLM with this model (path or id) and evaluate it; stopped at the end."


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
@add_server_options(after="serve")
@add_workload_options(after="gpus_billed")
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
    request_rate: Annotated[
        float | None,
        typer.Option(
            help="Requests per second, on a seeded schedule (Poisson unless --arrival constant; docs/load.md). With it, --concurrency caps requests in flight and defaults to no cap, as vllm bench serve."
        ),
    ] = None,
    arrival: Annotated[
        str | None, typer.Option(help="poisson (default; gamma with --burstiness) or constant (request i due at i/R).")
    ] = None,
    burstiness: Annotated[
        float | None,
        typer.Option(
            help="Gamma shape k of the inter-arrival times (1: Poisson; <1 burstier, >1 more even), as vllm bench serve."
        ),
    ] = None,
    ramp_up_start_rps: Annotated[
        float | None, typer.Option(help="A linear ramp instead of --request-rate: the first request's rate.")
    ] = None,
    ramp_up_end_rps: Annotated[float | None, typer.Option(help="The linear ramp's rate at the last request.")] = None,
    duration: Annotated[
        str | None,
        typer.Option(
            help="Send no request after this long (e.g. 90s, 10m, 1h); requests in flight finish and are kept."
        ),
    ] = None,
    client_processes: Annotated[
        int | None,
        typer.Option(
            help="Processes sending the requests, each with its own connections and a share of --concurrency or of the --request-rate schedule (default: as many as the load needs, at most the cores; docs/load.md)."
        ),
    ] = None,
    start_at: Annotated[
        float | None,
        typer.Option(
            help="Unix time (seconds) the timed phase starts at, e.g. $(date -d '+2 min' +%s): a load's shards share one schedule (docs/scale-out.md)."
        ),
    ] = None,
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
    shard: Annotated[
        str | None,
        typer.Option(
            help="Run only part I of N of each task's documents (I from 0; after --limit): I/N, or auto/N (or N) to read I from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID. evalkit merge joins the N run dirs.",
        ),
    ] = None,
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
    include_path: IncludePathOption = None,
    tokenizer: TokenizerOption = None,
    data_dir: DataDirOption = None,
    apply_chat_template: ApplyChatTemplateOption = False,
    fewshot_as_multiturn: FewshotAsMultiturnOption = None,
    system_instruction: SystemInstructionOption = None,
    fresh: Annotated[bool, typer.Option(help="Discard what the output dir holds instead of resuming.")] = False,
    max_error_rate: Annotated[
        float | None, typer.Option(help="Fail (exit 1) when more requests than this fraction failed.")
    ] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not write report.html.")] = False,
    rest_run: Annotated[
        Path | None,
        typer.Option(
            help="With --probe: a run of the probe tasks at rest, whose accuracy the report shows beside theirs under this load (docs/load.md)."
        ),
    ] = None,
    idle_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds without a data event, once a request's tokens flow, before it is abandoned and re-sent (default 120)."
        ),
    ] = None,
    ttft_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds a request may wait for its first data event (its turn in the server's queue and its prefill; a non-streamed request: beyond its work's own bound) before it fails, not re-sent (default 1800)."
        ),
    ] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Attempts per request (retries + 1).")] = None,
    allow_model_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-model-mismatch",
            help="Accept answers whose `model` is neither the run's model nor an id /v1/models lists (else each such request fails).",
        ),
    ] = False,
    goodput: Annotated[
        list[str] | None,
        typer.Option(
            help="Latency SLO KEY:VALUE in ms (ttft, tpot, e2el; repeatable): goodput counts the requests that meet every SLO given, as vllm bench serve --goodput.",
        ),
    ] = None,
    cost_per_gpu_hour: Annotated[
        float | None,
        typer.Option(help="Dollars per GPU-hour: the summary's cost per million tokens and per 1,000 requests."),
    ] = None,
    gpus_billed: Annotated[
        int | None,
        typer.Option(min=1, help="GPUs the cost is for (default: the started server's TP x PP x DP)."),
    ] = None,
    serve: Annotated[str | None, typer.Option(help=SERVE_HELP, rich_help_panel=_OPT)] = None,
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
    k8s: Annotated[
        Path | None,
        typer.Option(
            "--k8s",
            help="Write, into this folder, an Indexed Job running the eval as --shards pods, its merge Job and a Slurm array script, instead of running it (docs/scale-out.md).",
            rich_help_panel=K8S,
        ),
    ] = None,
    shards: Annotated[
        int | None, typer.Option(min=1, help="--k8s: the number of shards (pods).", rich_help_panel=K8S)
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="--k8s: the evalkit image the pods run.", rich_help_panel=K8S)
    ] = None,
    pvc: Annotated[
        str | None,
        typer.Option(
            help="--k8s: the PersistentVolumeClaim (ReadWriteMany) the shards and the merge write.", rich_help_panel=K8S
        ),
    ] = None,
    api_key_secret: Annotated[
        str | None,
        typer.Option(
            help="--k8s: a Secret whose keys (e.g. EVALKIT_API_KEY) the pods get as environment variables.",
            rich_help_panel=K8S,
        ),
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="--k8s: the Jobs' namespace.", rich_help_panel=K8S)] = None,
    **server_options: Any,  # one per row of cli.server_options.SERVER_OPTIONS and of cli.workload_options.WORKLOAD_OPTIONS
) -> None:
    """Evaluate TASKS against a server and write the result store (manifest, samples, summary, report)."""
    params = dict(locals())  # the options, before anything else is bound here
    params.update(params.pop("server_options"))
    from evalkit import api
    from evalkit.cli.console import LiveProgress, console, print_summary
    from evalkit.cli.recorder import RunRecorder
    from evalkit.contracts import summary_json

    cluster = {k: params.pop(k) for k in CLUSTER_KEYS}
    if cluster["k8s"] is not None or cluster["shards"] is not None:
        try:
            _write_cluster_jobs(cluster, params)
        except EvalkitError as e:
            fail(e)
        return
    recorder: RunRecorder | None = None
    try:
        settings, config_file = run_settings(params)
        recorder = RunRecorder()  # the run history's writes, in a process that imports the writer meanwhile
        with LiveProgress(enabled=not quiet and sys.stderr.isatty()) as progress:
            if repeats > 1:
                results = api.run_repeats(
                    repeats=repeats, config=config_file, progress=progress, argv=sys.argv, **settings
                )
            else:
                results = [api.run(config=config_file, progress=progress, argv=sys.argv, **settings)]
        for result in results:
            recorder.record(result.run_dir)  # written there while the summary is printed here
            print_summary(summary_json(result.summary), str(result.run_dir))
    except RunError as e:  # finished and written, with more failed requests than allowed: recorded all the same
        if e.run_dir is not None and recorder is not None:
            recorder.record(e.run_dir)
        fail(e)
    except EvalkitError as e:
        fail(e)
    except KeyboardInterrupt:
        console.print("evalkit: interrupted; completed samples are kept in the run dir (re-run to resume)")
        raise typer.Exit(130) from None
    finally:
        if recorder is not None:
            recorder.close()  # the runs are in the history when the command returns


def command_args(params: dict[str, Any]) -> list[str]:
    """The run command's options as given (None, False and defaults left out), as arguments after ``evalkit
    run``: what each pod of ``--k8s`` runs. The server options (``--serve`` and its table) are refused there."""
    p = dict(params)
    out = list(p.pop("tasks") or [])
    for name in SERVER_KEYS:
        p.pop(name, None)
    for name in ("quiet", "repeats"):
        p.pop(name, None)
    if params.get("repeats", 1) != 1:
        out += ["--repeats", str(params["repeats"])]
    flags = {"drop_reasoning": ("--drop-reasoning", "--keep-reasoning")}
    for name, value in p.items():
        if value is None or value is False or value == []:
            continue
        option = "-o" if name == "output_dir" else "--" + name.replace("_", "-")
        if name in flags:
            out.append(flags[name][0] if value else flags[name][1])
        elif value is True:
            out.append(option)
        elif isinstance(value, list):
            out += [a for v in value for a in (option, str(v))]
        else:
            out += [option, str(value)]
    return out


def _write_cluster_jobs(cluster: dict[str, Any], params: dict[str, Any]) -> None:
    """``--k8s DIR --shards N --image IMG --pvc CLAIM``: the manifests and scripts, nothing run."""
    from evalkit.errors import ConfigError
    from evalkit.sweep.k8s_shards import write

    missing = [f"--{k}" for k in ("k8s", "shards", "image", "pvc") if cluster[k] is None]
    if missing:
        raise ConfigError(
            f"--k8s writes the sharded Jobs with --k8s DIR --shards N --image IMG --pvc CLAIM; give {', '.join(missing)}"
        )
    given = [k for k, v in params.items() if k in SERVER_KEYS and v is not None and v is not False and v != []]
    if given:
        raise ConfigError(
            f"--k8s cannot pass --{given[0].replace('_', '-')}: each pod would start its own server; shard an eval "
            "over an --endpoint the pods can reach"
        )
    output_dir = params.get("output_dir")
    for path in write(
        cluster["k8s"],
        command_args(params),
        shards=cluster["shards"],
        image=cluster["image"],
        pvc=cluster["pvc"],
        output_dir=output_dir,
        namespace=cluster["namespace"],
        api_key_secret=cluster["api_key_secret"],
    ):
        typer.echo(str(path))


def run_settings(params: dict[str, Any]) -> tuple[dict[str, Any], Path | None]:
    """The run command's options as run settings (None: not given) and the --config file. Every option must be
    taken here (an option that is not would be ignored silently: AssertionError)."""
    p = dict(params)
    take = p.pop
    server_fields = dict(
        **server_options.server_fields(take),
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
        request_rate=take("request_rate"),
        arrival=take("arrival"),
        burstiness=take("burstiness"),
        ramp_up_start_rps=take("ramp_up_start_rps"),
        ramp_up_end_rps=take("ramp_up_end_rps"),
        duration_s=take("duration"),
        client_processes=take("client_processes"),
        start_at=take("start_at"),
        auto_start=take("auto_start"),
        warmup=_warmup_setting(take("warmup"), take("no_warmup")),
        limit=take("limit"),
        shard=take("shard"),
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
        include_path=take("include_path") or None,
        tokenizer=take("tokenizer"),
        data_dir=take("data_dir"),
        apply_chat_template=take("apply_chat_template") or None,
        fewshot_as_multiturn=take("fewshot_as_multiturn"),
        system_instruction=take("system_instruction"),
        fresh=take("fresh") or None,
        max_error_rate=take("max_error_rate"),
        report=False if take("no_report") else None,
        rest_run=take("rest_run"),
        idle_timeout_s=take("idle_timeout"),
        ttft_timeout_s=take("ttft_timeout"),
        max_attempts=take("max_attempts"),
        allow_model_mismatch=take("allow_model_mismatch") or None,
        goodput=take("goodput") or None,
        cost_per_gpu_hour=take("cost_per_gpu_hour"),
        gpus_billed=take("gpus_billed"),
        server=server,
        workload=workload_settings(take) or None,
    )
    config_file = take("config")
    p.pop("quiet", None)  # how the command shows progress, not a setting
    p.pop("repeats", None)  # how many runs the command makes of these settings, not a setting of one
    for key in CLUSTER_KEYS:  # --k8s: manifests of the run written instead of running it, not settings
        p.pop(key, None)
    assert not p, f"evalkit run options not mapped to settings in cli.run.run_settings: {sorted(p)}"
    return settings, config_file


def _warmup_setting(warmup: int | None, no_warmup: bool) -> int | None:
    from evalkit.errors import ConfigError

    if no_warmup and warmup:
        raise ConfigError(f"give either --warmup {warmup} or --no-warmup, not both")
    return 0 if no_warmup else warmup


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
