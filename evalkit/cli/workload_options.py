"""The workload options (docs/load.md) of ``evalkit run`` and ``evalkit capacity``, one row each: read by each
command's signature (:func:`add_workload_options`) and by the mapping of its options to the run's ``workload``
settings (:func:`workload_settings`, :class:`evalkit.config.workload.WorkloadSettings`' fields). Plain data, as
:mod:`evalkit.cli.server_options`, so that a command starts without loading pydantic. Adding a workload setting:
the field in ``WorkloadSettings`` and a row here."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from evalkit.cli.server_options import insert_parameters

PANEL = "Workloads (docs/load.md)"


@dataclass(frozen=True)
class WorkloadOption:
    name: str  # WorkloadSettings' field, and the commands' parameter
    type: Any  # the option's value type (None when not given; a flag is False)
    help: str
    min: int | None = None
    flags: tuple[str, ...] = ()  # the flag spellings (default: --name-with-dashes)


WORKLOAD_OPTIONS: tuple[WorkloadOption, ...] = (
    WorkloadOption("num_prompts", int, "Workloads: requests (default 1000; trace: every line).", min=1),
    WorkloadOption("dataset_path", Path, "sharegpt: the ShareGPT JSON file; trace: the Mooncake JSONL trace."),
    WorkloadOption("random_input_len", int, "random: prompt tokens (default 1024).", min=1),
    WorkloadOption("random_output_len", int, "random: output tokens, forced (default 128).", min=1),
    WorkloadOption(
        "random_range_ratio",
        float,
        "random: lengths uniform in \\[len x (1 - r), len x (1 + r)], 0 <= r < 1 (default 0).",
    ),
    WorkloadOption("random_prefix_len", int, "random: tokens of a prefix all prompts share (default 0).", min=0),
    WorkloadOption("ignore_eos", bool, "sharegpt: force each output to its recorded length.", flags=("--ignore-eos",)),
    WorkloadOption("trace_speed", float, "trace: replay this many times faster than its timestamps (default 1)."),
    WorkloadOption("turns", int, "sessions: user turns per conversation, >= 1 (default 3)."),
    WorkloadOption("think_time", float, "sessions: seconds from an answer to the next user turn, >= 0 (default 0)."),
    WorkloadOption(
        "probe",
        list[str],
        "TASK:SHARE, e.g. gsm8k:0.05: that share of the workload's requests are TASK's own, scored as its run "
        "(repeatable).",
    ),
)
"""In the order ``--help`` lists them."""


def add_workload_options(
    after: str, leave_out: Collection[str] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give the decorated command (which takes ``**kwargs``) one keyword parameter per row of
    :data:`WORKLOAD_OPTIONS` but those named in ``leave_out``, placed after its parameter ``after``, as Typer reads
    a signature (:func:`~evalkit.cli.server_options.insert_parameters`); their values come in the command's
    ``**kwargs``."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        added = []
        for opt in WORKLOAD_OPTIONS:
            if opt.name not in leave_out:
                option = typer.Option(*opt.flags, min=opt.min, help=opt.help, rich_help_panel=PANEL)
                flag = opt.type is bool
                added.append((opt.name, Annotated[bool if flag else opt.type | None, option], False if flag else None))
        return insert_parameters(func, after, added)

    return decorate


def workload_settings(take: Callable[[str], Any], leave_out: Collection[str] = ()) -> dict[str, Any]:
    """The workload options given (each taken once by ``take``; not given: None, False or an empty list), by
    ``WorkloadSettings`` field."""
    values = {opt.name: take(opt.name) for opt in WORKLOAD_OPTIONS if opt.name not in leave_out}
    return {k: v for k, v in values.items() if v is not None and v is not False and v != []}
