"""A sweep with ``search: capacity``: per server config x sampling point, the capacity search of ``evalkit
capacity`` (:func:`evalkit.capacity.run.run_capacity`) under the sweep file's SLOs (``goodput:``) and
``capacity:`` settings, each into its capacity dir ``DIR/capacity/<config>__<sampling>/``; then the layout table
(per config: its capacity within the SLOs, tok/s and TTFT/TPOT there, $ per million output tokens, capacity per
dollar, the ``capacity.probe`` tasks' accuracy at the answer and, for a numerics probe, its divergence from the
first config) in sweep.csv, sweep.md and compare.html, led by the recommendation: the config with the most
requests within the SLOs per dollar at its capacity among those whose accuracy at the answer is not worse than
``recommend.reference``'s (:func:`evalkit.sweep.recommend.recommend`, the gate's paired accuracy rules on the two
answer points' run dirs), or why none qualifies.

A re-run keeps a finished search whose recorded settings (SLOs, share, kind, tolerance, start, point length,
task, probes) are the sweep file's; one with other settings, that did not finish or that could not decide (no
point measured), is moved aside to ``<dir>.stale-<time>`` and searched again. A search without an answer within
its bracket (below its start, ``--max-duration`` ran out) is tabulated with its ``error`` cell and counts as
failed in the command's exit (1). A config whose search fails (its server does not start, the endpoint
is down) is recorded in the row's ``error`` cell; the others still run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.capacity.run import CapacityOptions, run_capacity
from evalkit.config.workload import parse_probe
from evalkit.contracts import CapacityRecord
from evalkit.errors import EvalkitError, StoreError
from evalkit.store.capacity_dir import CAPACITY, CapacityRead, open_capacity
from evalkit.store.files import write_text_atomic
from evalkit.store.reader import TaskRead, open_run
from evalkit.sweep.combination_runs import ERROR_COLUMN, SweepResult, move_aside, to_csv, to_markdown
from evalkit.sweep.combinations import Combination, plan
from evalkit.sweep.numerics_columns import add_numerics_columns
from evalkit.sweep.recommend import GOOD_PER_USD, Candidate, Recommendation, recommend
from evalkit.sweep.sweep_file import CapacitySearch, SweepSpec

CAPACITY_DIR = "capacity"
# the layout table's figure columns (row key, heading, how it reads), before the probes' accuracy
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("capacity", "capacity", "num"),
    ("bracket_low", "bracket low", "num"),
    ("bracket_high", "bracket high", "num"),
    ("goodput_share", "within SLOs", "pct"),
    ("output_tok_s", "output tok/s", "num"),
    ("ttft_p50_ms", "TTFT p50 ms", "num"),
    ("ttft_p99_ms", "TTFT p99 ms", "num"),
    ("tpot_p50_ms", "TPOT p50 ms", "num"),
    ("tpot_p99_ms", "TPOT p99 ms", "num"),
    ("cost_per_m_out_tok", "$ per M output tokens", "num"),
    (GOOD_PER_USD, "good requests per $", "num"),
)
NON_SETTINGS = ("concurrency", "goodput", "tasks", "warmup")  # the search sets these itself (or takes them apart)
Echo = Callable[[str], None]


class SearchCombination(Combination):
    """A config x sampling point searched: named ``<config>__<sampling>`` (the search sets the load)."""

    @property
    def name(self) -> str:
        return f"{self.config}__{self.sampling}"


def searches(spec: SweepSpec) -> list[SearchCombination]:
    """The searches of ``spec``, in the plan's order."""
    return [SearchCombination(c.config, c.sampling, None, c.server, c.settings) for c in plan(spec)]


def capacity_dir_of(out_dir: Path, combo: Combination) -> Path:
    return out_dir / CAPACITY_DIR / combo.name


def _options(spec: SweepSpec, out: Path) -> CapacityOptions:
    c = spec.capacity or CapacitySearch()
    goodput = [f"{k}:{v:g}" for k, v in (spec.goodput or {}).items()]
    extra: dict[str, Any] = {"warmup": spec.warmup} if spec.warmup is not None else {}
    return CapacityOptions(
        out=out, goodput=goodput, slo_share=c.slo_share, search=c.load, start=c.start, tolerance=c.tolerance,
        point_duration_s=c.point_duration, point_requests=c.point_requests, max_duration_s=c.max_duration,
        fresh=True, **extra,
    )  # fmt: skip


def _settings(spec: SweepSpec, combo: Combination) -> dict[str, Any]:
    """The run settings of the search's points: the combination's, less what the search sets, with the server
    to start (a server config) and the probes."""
    settings = {k: v for k, v in combo.settings.items() if k not in NON_SETTINGS}
    if combo.server is not None:
        settings["server"] = combo.server.model_dump(mode="json", exclude_unset=True)
        settings.pop("model", None)
    c = spec.capacity or CapacitySearch()
    workload = c.workload.model_dump(mode="json", exclude_unset=True) if c.workload is not None else {}
    if c.probe:
        workload["probe"] = list(c.probe)
    if workload:
        settings["workload"] = workload
    return settings


def _differences(spec: SweepSpec, record: CapacityRecord) -> str | None:
    """What a finished search recorded otherwise than the sweep file asks (None: it is this config's search)."""
    c = spec.capacity or CapacitySearch()
    want = {
        "slos": dict(spec.goodput or {}), "slo_share": c.slo_share, "search": c.load, "tolerance": c.tolerance,
        "tasks": list(spec.tasks),
    }  # fmt: skip
    if c.start is not None:
        want["start"] = c.start
    if c.point_duration is not None:
        want["point_duration_s"] = c.point_duration
    if c.point_requests is not None:
        want["point_requests"] = c.point_requests
    got = {k: getattr(record, k) for k in want}
    differs = [f"{k}: search {got[k]!r}, sweep file {v!r}" for k, v in want.items() if got[k] != v]
    probes = record.workload.get("probe") or []
    if probes != (c.probe or []):
        differs.append(f"probe: search {probes!r}, sweep file {c.probe or []!r}")
    return "; ".join(differs) or None


def _kept(spec: SweepSpec, cap_dir: Path, result: SweepResult, say: Echo) -> bool:
    """True for a finished search of the sweep file's settings; one with other settings (or a broken one) is
    moved aside and False returned."""
    if not (cap_dir / CAPACITY).is_file():
        if cap_dir.is_dir() and any(cap_dir.iterdir()):  # an interrupted search: kept aside, searched again
            say(f"sweep: {cap_dir} holds an unfinished search; moved it to {_aside(cap_dir)}")
        return False
    try:
        record = open_capacity(cap_dir).record
    except StoreError as e:
        why: str | None = str(e)
    else:
        why = (
            "the search did not finish"
            if not record.finished_at
            else f"the search could not decide ({record.reason})"
            if record.status == "cannot_decide"
            else _differences(spec, record)
        )
    if why is None:
        return True
    say(f"sweep: {cap_dir} held a search with other settings ({why}); moved it to {_aside(cap_dir)}")
    return False


def _aside(cap_dir: Path) -> Path:
    try:
        return move_aside(cap_dir)
    except EvalkitError as e:
        raise StoreError(f"{cap_dir}: {e}") from None


def run_capacity_sweep(
    spec: SweepSpec, out_dir: Path, *, echo: Echo | None = None, collect: bool = False
) -> SweepResult:
    """Search every config x sampling point of ``spec`` without a finished search of its settings (none with
    ``collect``: tabulate only), then write the layout table and the recommendation."""
    say = echo or (lambda _: None)
    result = SweepResult(rows=[], files={})
    for combo in searches(spec):
        cap_dir = capacity_dir_of(out_dir, combo)
        if collect:
            continue
        if _kept(spec, cap_dir, result, say):
            result.skipped.append(combo.name)
            continue
        say(f"sweep: searching the capacity of {combo.name}")
        try:
            run_capacity(list(spec.tasks), _options(spec, cap_dir), argv=["evalkit", "sweep", f"({combo.name})"],
                         **_settings(spec, combo))  # fmt: skip
            result.ran.append(combo.name)
        except EvalkitError as e:
            result.failed[combo.name] = " ".join(str(e).split())
            say(f"sweep: {combo.name} failed: {result.failed[combo.name]}")
    return tabulate(spec, out_dir, result)


def answer_run(read: CapacityRead) -> Path | None:
    """The run dir of the search's answer (its first measurement at the capacity); None without an answer or
    when that run dir is gone."""
    r = read.record
    low = r.capacity_rps if r.search == "rate" else r.capacity_concurrency
    point = next((p for p in r.points if low is not None and p.offered == low and p.error is None), None)
    run_dir = read.path / point.run_dir if point is not None else None
    return run_dir if run_dir is not None and run_dir.is_dir() else None


def capacity_row(combo: Combination, read: CapacityRead, probes: list[str]) -> dict[str, Any]:
    """One config's row: its capacity, the figures there, cost and capacity per dollar, the probes' accuracy."""
    r = read.record
    row: dict[str, Any] = {"config": combo.config, "sampling": combo.sampling, "concurrency": None}
    row["capacity"] = r.capacity_rps if r.search == "rate" else r.capacity_concurrency
    row["unit"] = "req/s" if r.search == "rate" else "in flight"
    row["status"] = r.status
    low, high = (r.bracket or [None, None])[:2]
    row["bracket_low"], row["bracket_high"] = low, high
    at = r.at_capacity
    if at is not None:
        row.update(
            goodput_share=at.goodput_share, output_tok_s=at.output_tokens_per_s, ttft_p50_ms=at.ttft_p50_ms,
            ttft_p99_ms=at.ttft_p99_ms, tpot_p50_ms=at.tpot_p50_ms, tpot_p99_ms=at.tpot_p99_ms,
        )  # fmt: skip
    row["cost_per_m_out_tok"] = r.cost_per_million_output_tokens
    gpus, price = r.server.gpus, r.cost_per_gpu_hour
    if at is not None and at.achieved_rps is not None and gpus and price and at.goodput_share is not None:
        row[GOOD_PER_USD] = at.achieved_rps * at.goodput_share / (price * gpus / 3600.0)
    run_dir = answer_run(read)
    if run_dir is not None:
        by_task = open_run(run_dir, with_samples=False).summary.get("tasks") or {}
        for task in probes:
            for key, mv in TaskRead.of(task, by_task.get(task)).metrics.items():
                row[f"{task} {key}"] = mv.value
                row[f"{task} {key} ci95"] = f"[{mv.ci95[0]:.4f}, {mv.ci95[1]:.4f}]" if mv.ci95 else None
    if r.status != "ok":
        row[ERROR_COLUMN] = f"search {r.status}: {r.reason}" if r.reason else f"search {r.status}"
    return row


def tabulate(spec: SweepSpec, out_dir: Path, result: SweepResult) -> SweepResult:
    """The layout table (sweep.csv, sweep.md, compare.html) over the capacity dirs, recommendation first."""
    probes = [parse_probe(p)[0] for p in (spec.capacity.probe if spec.capacity else None) or []]
    cands: list[Candidate] = []
    finished: list[tuple[dict[str, Any], Path]] = []
    for combo in searches(spec):
        cap_dir = capacity_dir_of(out_dir, combo)
        try:
            read = open_capacity(cap_dir)
        except StoreError as e:
            row: dict[str, Any] = {"config": combo.config, "sampling": combo.sampling, "concurrency": None}
            row[ERROR_COLUMN] = result.failed.get(combo.name) or str(e)
            result.missing.append(combo.name)
            cands.append(Candidate(combo, row, cap_dir, finished=False))
            result.rows.append(row)
            continue
        row = capacity_row(combo, read, probes)
        if ERROR_COLUMN in row:  # no capacity within the bracket searched: the sweep's exit says so
            result.failed.setdefault(combo.name, str(row[ERROR_COLUMN]))
        run_dir = answer_run(read)
        if run_dir is not None:
            finished.append((row, run_dir))
        cands.append(Candidate(combo, row, run_dir or cap_dir, finished=run_dir is not None))
        result.rows.append(row)
    add_numerics_columns(finished, probes)
    advice = recommend(cands, spec.recommend, spec.goodput or {}, probes) if spec.recommend is not None else None
    result.files = write_outputs(
        spec, out_dir, result.rows, advice, [d for _, d in finished], list(searches(spec)), probes
    )
    return result


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns = ["config", "sampling", "unit", "status", *(k for k, _, _ in COLUMNS)]
    for row in rows:
        columns += [k for k in row if k not in columns and k not in (ERROR_COLUMN, "concurrency")]
    return columns + ([ERROR_COLUMN] if any(ERROR_COLUMN in r for r in rows) else [])


def write_outputs(
    spec: SweepSpec,
    out: Path,
    rows: list[dict[str, Any]],
    advice: Recommendation | None,
    dirs: list[Path],
    combos: list[Combination],
    probes: list[str],
) -> dict[str, Path]:
    """sweep.csv; sweep.md: the recommendation, then the layout table; compare.html led by both (the answer
    points' run dirs compared below them)."""
    from evalkit.config.slos import slos_text
    from evalkit.reporting.sweep_view import SweepLead, render_sweep

    out.mkdir(parents=True, exist_ok=True)
    columns = _columns(rows)
    files = {"sweep.csv": out / "sweep.csv", "sweep.md": out / "sweep.md"}
    write_text_atomic(files["sweep.csv"], to_csv(rows, columns))
    share = (spec.capacity or CapacitySearch()).slo_share
    head = [f"# Capacity within the SLOs: {share:.0%} of requests with {slos_text(spec.goodput or {})}", ""]
    advice_md = [*advice.markdown(), ""] if advice is not None else []
    write_text_atomic(files["sweep.md"], "\n".join([*head, *advice_md, "## Layout", ""]) + to_markdown(rows, columns))
    if dirs:
        accuracy = [(k, k, "acc") for k in columns if any(k.startswith(f"{t} ") for t in probes) and "ci95" not in k]
        decided = dict(advice.lost) if advice is not None else {}
        if advice is not None and advice.pick is not None:
            decided[advice.pick] = "recommended"
        lead = SweepLead(
            pick=advice.pick if advice is not None else None, headline=advice.headline if advice else None,
            names=[c.name for c in combos], rows=rows,
            columns=[c for c in (*COLUMNS, *accuracy) if any(r.get(c[0]) is not None for r in rows)],
            decided=decided,
        )  # fmt: skip
        files["compare.html"] = render_sweep(dirs, out / "compare.html", lead, None, None)
    return files
