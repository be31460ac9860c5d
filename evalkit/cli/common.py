"""What every command shares: the Typer app and its command groups, the root callback (``--version``) and the
one way a command fails on bad input (one line on stderr, the error's exit code)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

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
history_app = typer.Typer(
    no_args_is_help=True, help="The run history database: every run, gate verdict and watch tick (docs/history.md)."
)
app.add_typer(history_app, name="history")
config_app = typer.Typer(no_args_is_help=True, help="The effective configuration of a run.")
app.add_typer(config_app, name="config")


# the options of lm-eval:NAME tasks, the same for `evalkit run` and `evalkit watch`
IncludePathOption = Annotated[
    list[Path] | None,
    typer.Option(help="lm-eval:NAME tasks: a folder of lm-eval task YAMLs (lm-eval's --include_path)."),
]
TokenizerOption = Annotated[
    str | None,
    typer.Option(help="lm-eval loglikelihood tasks: a local HF tokenizer folder (default: the server's /tokenize)."),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(help="lm-eval:NAME tasks: local data, DIR/<task>/<split>.jsonl, instead of a download."),
]
ApplyChatTemplateOption = Annotated[
    bool,
    typer.Option(
        "--apply-chat-template",
        help="lm-eval:NAME generate_until tasks: lm-eval's chat messages, sent to the chat endpoint "
        "(lm-eval's --apply_chat_template).",
    ),
]
FewshotAsMultiturnOption = Annotated[
    bool | None,
    typer.Option(
        "--fewshot-as-multiturn/--no-fewshot-as-multiturn",
        help="With --apply-chat-template: few-shot examples as separate turns (default: yes, as lm-eval).",
    ),
]
SystemInstructionOption = Annotated[
    str | None,
    typer.Option(help="lm-eval:NAME tasks: a system instruction before the prompt (lm-eval's --system_instruction)."),
]


def _version(value: bool) -> None:
    if value:
        from evalkit.version import __version__

        typer.echo(f"evalkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Accuracy and speed of an LLM serving config. Shell completion: evalkit --install-completion."""


def fail(err: EvalkitError) -> NoReturn:
    typer.echo(f"evalkit: error: {err}", err=True)
    raise typer.Exit(err.exit_code)


def aligned(head: list[str], rows: list[list[str]]) -> list[str]:
    """A table as text lines: the header, then the rows, each column as wide as its widest cell (the last
    column's trailing spaces cut)."""
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return ["  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip() for row in [head, *rows]]
