"""evalkit from Python: the functions the ``evalkit`` command itself calls, returning typed results.

- :func:`run` evaluates tasks against a server and writes the run dir (``evalkit run``); it returns
  :class:`RunResult`, whose ``manifest`` and ``summary`` are the :mod:`evalkit.contracts` models.
- :func:`open_run` reads a run dir (:class:`evalkit.store.reader.Run`: ``typed_summary()``, ``records()``).
- :func:`report` renders ``report.html`` or a comparison from run dirs alone (``evalkit report``).
- :func:`gate` is the release gate (``evalkit gate``): a :class:`~evalkit.gating.gate_runs.GateOutcome` holding the
  :class:`~evalkit.gating.result.GateResult` and the files written.

All four are also ``evalkit.run``, ``evalkit.open_run``, ``evalkit.report`` and ``evalkit.gate``. Bad input
raises :class:`~evalkit.errors.EvalkitError` with the same one-line message the command prints. Examples:
``examples/api_quickstart.py`` and ``docs/api.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: the command starts without pydantic models, scipy, lm-eval or jinja2
    from evalkit.contracts import Manifest, RunSummary
    from evalkit.gating.gate_runs import GateOutcome
    from evalkit.store.reader import Run

__all__ = ["RunResult", "gate", "offline_environment", "open_run", "report", "run", "run_repeats"]


@dataclass(frozen=True)
class RunResult:
    """What :func:`run` wrote: the run dir and its manifest and summary as typed records."""

    run_dir: Path
    manifest: Manifest
    summary: RunSummary

    def open(self) -> Run:
        """The run dir read back (samples included): :func:`open_run` of ``run_dir``."""
        return open_run(self.run_dir)


def open_run(run_dir: str | Path, *, with_samples: bool = True) -> Run:
    """Read a run dir: :func:`evalkit.store.reader.open_run` (FileNotFoundError when it is not a directory).

    Example::

        run = open_run("reports/run1")
        run.typed_summary().tasks["gsm8k"].metrics["exact_match,strict-match"].value
    """
    from evalkit.store.reader import open_run as read

    return read(run_dir, with_samples=with_samples)


def report(
    run_dirs: str | Path | Sequence[str | Path], output: str | Path | None = None, rest_run: str | Path | None = None
) -> Path:
    """Render one run's ``report.html`` or the comparison of several, as ``evalkit report``:
    :func:`evalkit.reporting.write.write_report` (``rest_run``: a run at rest of a probed load run's probes).

    Example::

        report(["reports/base", "reports/cand"], "compare.html")
    """
    from evalkit.reporting.write import write_report

    return write_report(run_dirs, output, rest_run)


def gate(
    *runs: str | Path,
    baselines: Sequence[str | Path] | None = None,
    candidates: Sequence[str | Path] | None = None,
    policy: str | Path | None = None,
    output: str | Path | None = None,
    force: bool = False,
    env: Mapping[str, str] | None = None,
    expected_from: str | None = None,
) -> GateOutcome:
    """The release gate on BASELINE CANDIDATE (or CANDIDATE alone; ``baselines`` / ``candidates``: several runs
    per side), as ``evalkit gate``: the sides by :func:`evalkit.gating.gate_runs.gate_sides`, decided and written
    by :func:`evalkit.gating.gate_runs.run_gate`, whose compare.html is
    :func:`evalkit.reporting.write_gate_compare`. A baseline may be a ``history:`` value (``history:latest-pass?
    config=NAME``): the run dirs the run history names for it (docs/history.md). ``expected_from``: a model of
    the reference scores evalkit ships, whose scores for the candidate's tasks become ``expected:`` rules.

    Example::

        outcome = gate("reports/base", "reports/cand", policy="gate.yaml")
        outcome.result.verdict, outcome.exit_code      # "pass" 0, "fail" 1, "cannot_decide" 2
    """
    from evalkit.gating.gate_runs import gate_sides, run_gate
    from evalkit.history.query import is_history_ref
    from evalkit.reporting import write_gate_compare

    if len(runs) == 2 and is_history_ref(runs[0]):  # BASELINE CANDIDATE with the baseline from the history
        baselines, runs = [runs[0], *(baselines or [])], runs[1:]
    if any(is_history_ref(b) for b in baselines or ()):
        baselines = _history_baselines(baselines or [])
    expected: list[dict[str, Any]] = []
    if expected_from is not None:
        from evalkit.history.reference import expected_from as reference_rules

        expected = reference_rules(expected_from, [Path(c) for c in [*runs[-1:], *(candidates or [])]])
    bases, cands = gate_sides(runs, baselines or (), candidates or ())
    return run_gate(
        bases or None,
        cands,
        Path(policy) if policy is not None else None,
        Path(output) if output is not None else None,
        force=force,
        env=env,
        write_compare=write_gate_compare,
        expected=expected,
    )


def _history_baselines(values: Sequence[str | Path]) -> list[str | Path]:
    """The gate's baselines with each ``history:`` value replaced by the run dirs it names in the run history
    (:func:`evalkit.history.query.resolve_baseline`); the other values as given."""
    from evalkit.history import session
    from evalkit.history.query import is_history_ref, resolve_baseline

    out: list[str | Path] = []
    with session() as s:
        for value in values:
            out += resolve_baseline(s, str(value)) if is_history_ref(value) else [value]
    return out


def offline_environment(tasks: Sequence[str] = ()) -> None:
    """Defaults evalkit runs with (each kept when already set): no tqdm bars, and Hugging Face offline (the
    task data ships inside the package, so nothing needs the Hub), unless one of ``tasks`` is an ``lm-eval:NAME``
    task, whose data lm-eval loads as it always does (offline is then the user's choice)."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    if not any(str(t).startswith("lm-eval:") for t in tasks):
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run(
    tasks: str | Sequence[str] | None = None,
    *,
    config: str | Path | None = None,
    progress: Any = None,
    argv: list[str] | None = None,
    after_run_imports: Sequence[str] = (),
    **settings: Any,
) -> RunResult:
    """Evaluate ``tasks`` and write the run dir, as ``evalkit run`` does.

    ``settings`` are the run settings by their config-file names (``endpoint``, ``limit``, ``concurrency``,
    ``output_dir``, ``server={"model": ...}``, …; ``evalkit config show`` lists them); a value of None counts as
    not given. Precedence as on the command line: these > ``config`` file > ``EVALKIT_*`` environment >
    defaults. ``progress``: an :data:`evalkit.runner.Progress` callable (``evalkit run`` passes its progress bar,
    :class:`evalkit.cli.console.LiveProgress`); ``argv``: the command recorded in the manifest (default: this
    call); ``after_run_imports``: modules the caller uses once the run is over, imported while the warm-up waits
    on the server (``evalkit run`` passes the run history's writer, :func:`evalkit.history.writer_modules`).
    Raises :class:`~evalkit.errors.EvalkitError` on bad input, and :class:`~evalkit.errors.RunError` (after
    everything is written) when more requests failed than ``max_error_rate`` allows.

    Example::

        result = run("gsm8k", endpoint="http://127.0.0.1:8000/v1", limit=50, output_dir="reports/run1")
        result.summary.tasks["gsm8k"].metrics["exact_match,strict-match"].value
    """
    from evalkit.config import load_config
    from evalkit.runner import Runner

    names = [tasks] if isinstance(tasks, str) else list(tasks or [])
    offline_environment(names)
    cfg = load_config({"tasks": names, **settings}, Path(config) if config is not None else None)
    if argv is None:
        argv = _call_argv(names, config, settings)
    out = Runner(cfg, progress=progress, argv=argv, after_run_imports=after_run_imports).run()
    return RunResult(run_dir=out.run_dir, manifest=out.manifest, summary=out.summary)


def merge(
    shard_dirs: Sequence[str | Path],
    output_dir: str | Path,
    *,
    tasks_dir: Sequence[str | Path] = (),
    include_path: Sequence[str | Path] = (),
    report: bool = True,
    argv: list[str] | None = None,
    wait_s: float = 0.0,
) -> RunResult:
    """Merge the run dirs of every shard of one ``--shard I/N`` run into ``output_dir``, as ``evalkit merge``
    does: one run dir as if one process had run it (docs/scale-out.md); ``wait_s``: how long to wait for shards
    not there or not finished yet. Raises
    :class:`~evalkit.errors.ConfigError` (nothing written) when the shards are not exactly the N finished parts
    of one run.

    Example::

        result = merge(["runs/s0", "runs/s1", "runs/s2"], "runs/merged")
    """
    from evalkit.runner.merge import merge_runs

    out = merge_runs(
        shard_dirs,
        output_dir,
        argv=argv or ["evalkit", "merge", *map(str, shard_dirs), "-o", str(output_dir)],
        tasks_dir=[Path(d) for d in tasks_dir],
        include_path=[Path(d) for d in include_path],
        report=report,
        wait_s=wait_s,
    )
    return RunResult(run_dir=out.run_dir, manifest=out.manifest, summary=out.summary)


def run_repeats(
    tasks: str | Sequence[str] | None = None,
    repeats: int = 3,
    *,
    config: str | Path | None = None,
    progress: Any = None,
    argv: list[str] | None = None,
    after_run_imports: Sequence[str] = (),
    **settings: Any,
) -> list[RunResult]:
    """The same run ``repeats`` times, one after another against the same server, into ``OUTPUT_DIR/repeat-K``
    (``evalkit run --repeats N``): the runs of one config that ``evalkit gate --baseline A --baseline B ...``
    judges speed on. With ``server`` (``--serve``) vLLM starts once and serves every repeat. Each repeat is a
    complete run dir (resumed like any other); a repeat that raises stops the rest, what finished is kept.
    ``after_run_imports``: as :func:`run`'s (the first repeat's warm-up imports them; the later ones find them loaded).

    Example::

        results = run_repeats("gsm8k", 3, endpoint="http://127.0.0.1:8000/v1", output_dir="reports/base")
        [r.run_dir.name for r in results]   # ['repeat-1', 'repeat-2', 'repeat-3']
    """
    from evalkit.config import load_config
    from evalkit.errors import ConfigError
    from evalkit.runner import Runner

    if not 1 <= repeats <= 100:
        raise ConfigError(f"--repeats {repeats} is out of range; pass 1 to 100")
    names = [tasks] if isinstance(tasks, str) else list(tasks or [])
    offline_environment(names)
    base_cfg = load_config({"tasks": names, **settings}, Path(config) if config is not None else None)
    if base_cfg.output_dir is None:
        raise ConfigError("--repeats needs --output-dir DIR (the repeats are written to DIR/repeat-1 …)")
    if argv is None:
        argv = _call_argv(names, config, {**settings, "repeats": repeats})
    results: list[RunResult] = []
    server: Any = None
    try:
        for k in range(1, repeats + 1):
            cfg = base_cfg.model_copy(update={"output_dir": base_cfg.output_dir / f"repeat-{k}"})
            runner = Runner(
                cfg, progress=progress, argv=argv, server=server, keep_server=True, after_run_imports=after_run_imports
            )
            try:
                out = runner.run()
            finally:
                server = runner.server
            results.append(RunResult(run_dir=out.run_dir, manifest=out.manifest, summary=out.summary))
    finally:
        if server is not None:
            server.stop()
    return results


def _call_argv(names: list[str], config: str | Path | None, settings: dict[str, Any]) -> list[str]:
    """This call as the manifest's command: ``evalkit.run gsm8k endpoint=URL limit=50`` (the runner redacts
    secrets in it; a mapping or list setting, which may hold secrets in its values, shows as ``server=…``)."""
    given = {"config": config, **settings}
    shown = [f"{k}={v if isinstance(v, str | int | float | Path) else '…'}" for k, v in given.items() if v is not None]
    return ["evalkit.run", *names, *shown]
