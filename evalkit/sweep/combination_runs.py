"""Run a sweep: one run dir per combination under ``DIR/runs/<name>/``, then ``sweep.csv``, ``sweep.md`` and
``compare.html`` over all of them (:func:`collect`, which also tabulates runs that Kubernetes Jobs wrote).

A server starts once per distinct server config (its log in ``DIR/servers/<config>/server.log``) and every
combination of that config runs against it through :class:`~evalkit.runner.Runner`, which records the server's
provenance in the run's manifest. Re-running the same sweep reuses a finished combination only when its recorded
settings (:func:`~evalkit.store.manifest.fingerprint`) are the sweep file's and no more of its requests failed
than allowed; it resumes an interrupted one in its run dir, and moves a run with other settings aside to
``runs/<name>.stale-<time>/`` before running the combination again. A combination that cannot run (endpoint
unreachable or serving another model, server that does not start, run dir in use) is recorded in
``SweepResult.failed`` and in the table's ``error`` column; the other combinations still run.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby
from pathlib import Path
from typing import Any

from evalkit.config import RunConfig, load_config
from evalkit.contracts import speed_metric
from evalkit.errors import EndpointError, EvalkitError, RunError, ServerError, StoreError
from evalkit.history import record_run
from evalkit.store.files import write_text_atomic
from evalkit.store.manifest import fingerprint, fingerprint_differences
from evalkit.sweep.combinations import Combination, plan
from evalkit.sweep.numerics_columns import add_numerics_columns
from evalkit.sweep.page import write_page
from evalkit.sweep.recommend import Candidate, Recommendation, economics_cells, recommend
from evalkit.sweep.sweep_file import SweepSpec

# steady_*: over the window at the run's level of requests in flight (summary speed.steady_state); empty where it
# holds fewer requests than its figures need, steady_requests then says how many it held
# (the speed catalogue's keys; a column is named by the metric's ``column``)
TABLE_SPEED = ("output_tokens_per_s", "requests_per_s", "ttft_p50_ms", "tpot_p50_ms", "ttft_p99_ms")
TABLE_STEADY = ("output_tokens_per_s", "ttft_p50_ms")
SPEED_COLUMNS = (
    *(speed_metric(key).column for key in TABLE_SPEED),
    *(f"steady_{speed_metric(key).column}" for key in TABLE_STEADY),
    "steady_requests",
)
ERROR_COLUMN = "error"  # the table's last column when a combination has no numbers, or numbers that failed
Echo = Callable[[str], None]


@dataclass
class SweepResult:
    """The rows of the sweep table (one per combination, in the plan's order), the files written, the
    combinations that could not run or failed more requests than allowed (``failed``: name -> one-line reason),
    those with no finished run with the sweep file's settings (``missing``), runs whose settings are not the sweep
    file's (``stale``: name -> reason; left in place by :func:`collect`) and where :func:`run_sweep` moved them
    (``moved``)."""

    rows: list[dict[str, Any]]
    files: dict[str, Path]
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)
    moved: dict[str, Path] = field(default_factory=dict)


def run_dir_of(out_dir: Path, combo: Combination) -> Path:
    return out_dir / "runs" / combo.name


def read_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(manifest, summary) of a finished run (``finished_at`` set and a summary written), else None. The one
    place the sweep reads a run dir."""
    from evalkit.store.reader import open_run

    if not (run_dir / "manifest.json").is_file() or not (run_dir / "summary.json").is_file():
        return None
    run = open_run(run_dir, with_samples=False)
    if not run.manifest.get("finished_at") or not run.summary_tasks:
        return None
    return run.manifest, run.summary


def recorded_manifest(run_dir: Path) -> dict[str, Any] | None:
    """The manifest of whatever run ``run_dir`` holds, finished or not; None without one (or with one that cannot
    be read: the Runner says so when it runs there)."""
    from evalkit.store.reader import open_run

    if not (run_dir / "manifest.json").is_file():
        return None
    run = open_run(run_dir, with_samples=False)
    return None if "manifest.json" in run.problems or not run.manifest else run.manifest


class Expected:
    """What each combination's run must have recorded to be reused: the run config the sweep file gives it and
    the fingerprint its run would record. Built before anything runs: a run config the sweep file makes invalid
    or a task the registry does not know is bad input (an EvalkitError, exit 2)."""

    def __init__(self, spec: SweepSpec, out_dir: Path):
        from evalkit.runner.plan import lm_eval_expanded
        from evalkit.tasks.registry import Registry

        self.configs: dict[str, RunConfig] = {}
        self._tasks: dict[str, list[Any]] = {}
        loaded: dict[tuple[str, str], Any] = {}  # (tasks_dir, name) -> Task: its data hashed once
        for combo in plan(spec):
            cfg = lm_eval_expanded(load_config({**combo.settings, "output_dir": run_dir_of(out_dir, combo)}))
            self.configs[combo.name] = cfg
            for name in cfg.tasks:
                key = (repr(cfg.tasks_dir), name)
                if key not in loaded:
                    loaded[key] = Registry(cfg.tasks_dir).get(name)
            self._tasks[combo.name] = [loaded[repr(cfg.tasks_dir), name] for name in cfg.tasks]

    def differences(self, combo: Combination, manifest: dict[str, Any]) -> str | None:
        """What the run of ``manifest`` recorded otherwise than the sweep file says, as ``key: run A, sweep file
        B; ...``; None when it is this combination's run."""
        from evalkit.runner import planned_fingerprint
        from evalkit.runner.plan import pricing

        cfg = self.configs[combo.name]
        model = cfg.model or manifest.get("model")  # without `model:`, the one the endpoint serves
        planned = planned_fingerprint(cfg, self._tasks[combo.name], model)
        differs = fingerprint_differences(fingerprint(manifest), planned, "run", "sweep file")
        priced = [  # the run's goodput and cost figures were counted against these
            f"{key}: run {manifest.get(key)}, sweep file {want}"
            for key, want in (("goodput_slos", cfg.goodput), ("pricing", pricing(cfg)))
            if manifest.get(key) != want
        ]
        return "; ".join(x for x in (differs, *priced) if x) or None

    def too_many_errors(self, combo: Combination, summary: dict[str, Any]) -> str | None:
        """The first task of a finished run with more failed requests than ``max_error_rate`` allows (its re-run
        resumes and sends those again), as one line; None when none has."""
        limit = self.configs[combo.name].max_error_rate
        for name, task in (summary.get("tasks") or {}).items():
            counts = task.get("counts") or {}
            total, failed = counts.get("total") or 0, counts.get("api_error") or 0
            if total and failed / total > limit:
                return f"{name}: {failed} of {total} requests failed (more than max_error_rate {limit})"
        return None


def table_row(combo: Combination, summary: dict[str, Any], tasks: list[str], pricing: Any = None) -> dict[str, Any]:
    """One row of the sweep table: the combination, speed of the first task (goodput and cost where the run has
    them, ``pricing`` its manifest's), each task's metrics with CI."""
    row = key_cells(combo)
    by_task = summary.get("tasks") or {}
    speed = (by_task.get(tasks[0]) or {}).get("speed") or {}

    row.update({(m := speed_metric(key)).column: m.of_json(speed) for key in TABLE_SPEED})
    steady = speed.get("steady_state") or {}
    row.update({f"steady_{(m := speed_metric(key)).column}": m.of_json(steady) for key in TABLE_STEADY})
    row["steady_requests"] = steady.get("requests")
    row.update(economics_cells(speed, pricing))
    if combo.concurrency is None:
        row["concurrency"] = speed.get("concurrency")  # what auto settled on
    from evalkit.store.reader import TaskRead

    for task in tasks:
        for key, mv in TaskRead.of(task, by_task.get(task)).metrics.items():  # with the 95% interval the run stored
            row[f"{task} {key}"] = mv.value
            row[f"{task} {key} ci95"] = f"[{mv.ci95[0]:.4f}, {mv.ci95[1]:.4f}]" if mv.ci95 else None
    row.update(group_cells(summary))
    return row


def group_cells(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's lm-eval group aggregates as task metrics appear: ``<group> <metric>`` (lm-eval's key, e.g.
    ``acc,none``) and ``<group> <metric> ci95``; {} without groups, none for a group without a score."""
    from evalkit.contracts import GroupSummary
    from evalkit.store.lenient import lenient

    cells: dict[str, Any] = {}
    raw = summary.get("groups")
    for name, entry in (raw if isinstance(raw, dict) else {}).items():
        group = lenient(GroupSummary, entry, f"groups.{name}")
        for key, m in (group.metrics if group else {}).items():
            cells[f"{name} {key}"] = m.value
            cells[f"{name} {key} ci95"] = f"[{m.ci95[0]:.4f}, {m.ci95[1]:.4f}]" if m.ci95 else None
    return cells


def failed_row(combo: Combination) -> dict[str, Any]:
    """The row of a combination without numbers (its ``error`` cell says why)."""
    return key_cells(combo)


def key_cells(combo: Combination) -> dict[str, Any]:
    """The cells that name a row: config, sampling, concurrency, and the repeat with ``repeats: N``."""
    cells: dict[str, Any] = {"config": combo.config, "sampling": combo.sampling, "concurrency": combo.concurrency}
    if combo.repeat is not None:
        cells["repeat"] = combo.repeat
    return cells


def run_sweep(spec: SweepSpec, out_dir: Path, *, echo: Echo | None = None, quiet: bool = True) -> SweepResult:
    """Run every combination of ``spec`` without a finished run of its settings into ``out_dir`` and write the
    sweep's tables and comparison report. A combination that cannot run is recorded in ``failed`` and the others
    still run (an endpoint that is unreachable or serves another model fails the rest of its config at once).
    Raises EvalkitError, before anything runs, for a sweep whose run configs or tasks are bad input."""
    say = echo or (lambda _: None)
    combos = plan(spec)
    expected = Expected(spec, out_dir)
    result = SweepResult(rows=[], files={})
    for key, group in groupby(combos, key=lambda c: c.server_key()):
        pending = []
        for combo in group:
            if _reusable(combo, out_dir, expected, result, say):
                result.skipped.append(combo.name)
            elif combo.name not in result.failed:
                pending.append(combo)
        if not pending:
            continue
        try:
            server = _start(pending[0], out_dir, say) if key is not None else None
        except ServerError as e:
            say(f"sweep: {e}")
            result.failed.update((c.name, str(e).splitlines()[0]) for c in pending)
            continue
        endpoint_down: dict[str, str] = {}  # endpoint config -> why it cannot be evaluated
        try:
            for combo in pending:
                if combo.config in endpoint_down:
                    result.failed[combo.name] = endpoint_down[combo.config]
                    continue
                say(f"sweep: running {combo.name}")
                try:
                    _run_one(combo, expected.configs[combo.name], server)
                    result.ran.append(combo.name)
                    record_run(run_dir_of(out_dir, combo), source="sweep", config=combo.config)
                except RunError as e:  # finished and written, with more failed requests than allowed
                    result.failed[combo.name] = str(e)
                    result.ran.append(combo.name)
                    record_run(run_dir_of(out_dir, combo), source="sweep", config=combo.config)
                except EvalkitError as e:
                    reason = " ".join(str(e).split())
                    result.failed[combo.name] = reason
                    say(f"sweep: {combo.name} failed: {reason}")
                    if isinstance(e, EndpointError) and server is None:
                        endpoint_down[combo.config] = reason
                        say(f"sweep: config {combo.config}: its other combinations are not run (the same endpoint)")
        finally:
            if server is not None:
                server.stop()
    return collect(spec, out_dir, result, expected)


def _reusable(combo: Combination, out_dir: Path, expected: Expected, result: SweepResult, say: Echo) -> bool:
    """True for a finished run of this combination's settings; a run with other settings is moved aside (or,
    when that fails, recorded in ``result.failed``) and False returned, as for none or an interrupted one."""
    run_dir = run_dir_of(out_dir, combo)
    manifest = recorded_manifest(run_dir)
    if manifest is None:
        return False
    differs = expected.differences(combo, manifest)
    if differs is None:
        read = read_run(run_dir)
        return read is not None and expected.too_many_errors(combo, read[1]) is None
    try:
        dest = move_aside(run_dir)
    except EvalkitError as e:
        result.failed[combo.name] = f"{run_dir} holds a run with other settings ({differs}) and {e}"
        return False
    result.moved[combo.name] = dest
    say(f"sweep: {run_dir} held a run with other settings than the sweep file ({differs}); moved it to {dest}")
    return False


def move_aside(run_dir: Path) -> Path:
    """Rename ``run_dir`` to ``<name>.stale-<local time>`` beside it (nothing is deleted) and return the new path;
    a run dir in use by another run (its lock) or that cannot be renamed is an EvalkitError."""
    from evalkit.store.writer import RunStore

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    dest, n = run_dir.with_name(f"{run_dir.name}.stale-{stamp}"), 2
    while dest.exists():
        dest, n = run_dir.with_name(f"{run_dir.name}.stale-{stamp}-{n}"), n + 1
    store = RunStore(run_dir).lock()  # a ConfigError naming the pid of a run writing it now
    try:
        run_dir.rename(dest)
    except OSError as e:
        raise StoreError(f"cannot be moved to {dest} ({e.strerror}); move it away yourself and re-run") from None
    finally:
        store.unlock()
    return dest


def collect(
    spec: SweepSpec, out_dir: Path, result: SweepResult | None = None, expected: Expected | None = None
) -> SweepResult:
    """Tabulate the combinations under ``out_dir/runs/`` (whoever ran them: this process, or Jobs writing a
    shared volume) into sweep.csv, sweep.md and compare.html; runs nothing. A run is tabulated only when its
    recorded settings are the sweep file's (else it is in ``stale``); combinations without such a finished run
    are in ``missing``, and their row's ``error`` cell says why. A numerics task's rows also hold their divergence
    from the first finished combination (:mod:`evalkit.sweep.numerics_columns`)."""
    result = result or SweepResult(rows=[], files={})
    expected = expected or Expected(spec, out_dir)
    combos = plan(spec)
    dirs: list[Path] = []
    finished: list[tuple[dict[str, Any], Path]] = []
    cands: list[Candidate] = []
    for combo in combos:
        run_dir = run_dir_of(out_dir, combo)
        read = read_run(run_dir)
        differs = expected.differences(combo, read[0]) if read is not None else None
        if read is not None and differs is None:
            row = table_row(
                combo, read[1], expected.configs[combo.name].tasks, read[0].get("pricing")
            )  # lm-eval groups: their tasks
            dirs.append(run_dir)
            finished.append((row, run_dir))
            cands.append(Candidate(combo, row, run_dir))
            error = result.failed.get(combo.name) or expected.too_many_errors(combo, read[1])
            if error is not None:
                result.failed.setdefault(combo.name, error)
        else:
            row = failed_row(combo)
            result.missing.append(combo.name)
            if differs is not None:
                result.stale[combo.name] = (
                    f"{run_dir} holds a run with other settings than the sweep file ({differs}); running the "
                    f"sweep again moves it to {run_dir.name}.stale-<time> and runs the combination"
                )
            error = result.failed.get(combo.name) or result.stale.get(combo.name) or f"no finished run in {run_dir}"
            cands.append(Candidate(combo, row, run_dir, finished=False))  # the recommendation says why
        if error is not None:
            row[ERROR_COLUMN] = error
        result.rows.append(row)
    add_numerics_columns(finished, spec.tasks)
    out_dir.mkdir(parents=True, exist_ok=True)
    advice = recommend(cands, spec.recommend, spec.goodput or {}) if spec.recommend is not None else None
    tasks = expected.configs[combos[0].name].tasks if combos else []
    result.files = write_outputs(result.rows, dirs, spec, out_dir, advice, combos, tasks)
    return result


def _start(combo: Combination, out_dir: Path, say: Echo) -> Any:
    from evalkit.server.vllm_process import ServerStartError, VLLMServer

    assert combo.server is not None
    log_dir = out_dir / "servers" / combo.config
    say(f"sweep: starting the server of config {combo.config}")
    server = VLLMServer(combo.server, log_dir)
    try:
        server.start()
    except ServerStartError as e:
        tail = "".join(f"\n    {line}" for line in (e.log_tail or "").splitlines()[-15:])
        raise ServerError(f"config {combo.config}: {str(e).removesuffix(' below')}{tail}") from None
    return server


def _run_one(combo: Combination, cfg: RunConfig, server: Any) -> None:
    from evalkit.runner import Runner

    # the config as the sweep file gives it (its lm-eval:NAME groups not expanded yet: the run records their
    # aggregates); the endpoint is known once the config's server is up
    endpoint = {"endpoint": server.base_url + "/v1"} if server is not None else {}
    cfg = load_config({**combo.settings, "output_dir": cfg.output_dir, **endpoint})
    Runner(cfg, argv=["evalkit", "sweep", f"({combo.name})"], server=server).run()


def write_outputs(
    rows: list[dict[str, Any]],
    dirs: list[Path],
    spec: SweepSpec,
    out: Path,
    advice: Recommendation | None,
    combos: list[Combination],
    tasks: list[str],
) -> dict[str, Path]:
    """sweep.csv, sweep.md (the ``error`` column last, when a row has one; then the recommendation) and the
    sweep page compare.html over the run dirs ``dirs`` (:mod:`evalkit.sweep.page`; with speed against
    concurrency when the sweep has that axis). ``rows`` and ``combos``: every combination, in the plan's order;
    ``tasks``: the tasks run (lm-eval groups expanded), whose primary metrics the page's table shows."""
    repeat = ["repeat"] if any("repeat" in row for row in rows) else []
    columns: list[str] = ["config", "sampling", "concurrency", *repeat, *SPEED_COLUMNS]
    for row in rows:
        columns += [k for k in row if k not in columns and k != ERROR_COLUMN]
    if any(ERROR_COLUMN in row for row in rows):
        columns.append(ERROR_COLUMN)
    files = {"sweep.csv": out / "sweep.csv", "sweep.md": out / "sweep.md"}
    write_text_atomic(files["sweep.csv"], to_csv(rows, columns))
    advice_md = "".join(f"\n{x}" for x in advice.markdown()) + "\n" if advice is not None else ""
    write_text_atomic(files["sweep.md"], to_markdown(rows, columns) + advice_md)
    if dirs:
        page = write_page(out / "compare.html", dirs, rows, combos, tasks, advice, bool(spec.concurrency))
        files["compare.html"] = page
    return files


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v).replace("|", "\\|")


def to_markdown(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"
