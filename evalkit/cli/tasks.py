"""``evalkit tasks list`` and ``evalkit tasks show``: the known tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalkit.cli.common import aligned, fail, tasks_app
from evalkit.errors import EvalkitError


@tasks_app.command("list")
def tasks_list(
    tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra task folder.")] = None,
    lm_eval: Annotated[
        bool, typer.Option("--lm-eval", help="List lm-eval's tasks instead (run as lm-eval:NAME), by group.")
    ] = False,
    include_path: Annotated[
        list[Path] | None, typer.Option(help="With --lm-eval: a folder of lm-eval task YAMLs too.")
    ] = None,
) -> None:
    """Every known task with its kind, version and description (--lm-eval: lm-eval's groups and tasks)."""
    from evalkit.tasks.registry import Registry

    try:
        if lm_eval:
            from evalkit.tasks.lmeval_source import groups_listing

            for line in groups_listing(tuple(str(p.resolve()) for p in include_path or [])):
                typer.echo(line)
            return
        reg = Registry(tasks_dir or [])
    except EvalkitError as err:
        fail(err)
    rows = [[name, (e := reg.entry(name)).kind, f"v{e.version}", e.description] for name in reg.names()]
    typer.echo("\n".join(aligned(["name", "kind", "version", "description"], rows)))


@tasks_app.command("show")
def tasks_show(
    name: str,
    tasks_dir: Annotated[list[Path] | None, typer.Option(help="Extra task folder.")] = None,
    include_path: Annotated[
        list[Path] | None, typer.Option(help="lm-eval:NAME tasks: a folder of lm-eval task YAMLs.")
    ] = None,
) -> None:
    """A task's defaults, metrics, data checksums and a preview of its first prompt."""
    import json

    from evalkit.tasks.lmeval_source import expand_lm_eval_tasks
    from evalkit.tasks.registry import Registry
    from evalkit.tasks.spec import TaskSettings

    try:
        generated = expand_lm_eval_tasks([name], include_path or [])[1] if include_path else None
        reg = Registry([*(tasks_dir or []), *([generated] if generated else [])])
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
        fail(e)
