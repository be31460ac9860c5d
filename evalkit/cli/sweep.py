"""``evalkit sweep``: every combination of a sweep file, run (resumable), collected or written as Kubernetes Jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from evalkit.cli.common import app, fail
from evalkit.errors import EvalkitError


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
    from evalkit.sweep.combination_runs import collect as collect_runs

    try:
        spec = load_spec(file)
        if k8s is not None and spec.search == "capacity":
            raise EvalkitError("--k8s writes one Job per combination; a sweep with search: capacity runs here (-o DIR)")
        if k8s is not None:
            _emit_k8s(spec, file, k8s, image, pvc, namespace, name, model_cache_pvc, api_key_secret)
            return
        if output is None:
            raise EvalkitError("evalkit sweep needs -o DIR (the sweep folder), or --k8s DIR to write manifests")
        if spec.search == "capacity":
            from evalkit.sweep.capacity_sweep import run_capacity_sweep

            say = lambda line: typer.echo(line, err=True)  # noqa: E731
            result = run_capacity_sweep(spec, output, echo=say, collect=collect)
        elif collect:
            if not (output / "runs").is_dir():
                raise EvalkitError(f"{output} holds no runs/ folder; pass -o the sweep folder the runs were written to")
            result = collect_runs(spec, output)
        else:
            result = run_sweep(spec, output, echo=lambda line: typer.echo(line, err=True))
    except EvalkitError as e:
        fail(e)
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
