"""What ``evalkit gate`` does, as one library call: :func:`run_gate` reads the run dirs and the policy, decides,
writes gate.json / gate.md / junit.xml / compare.html and appends gate.md to ``$GITHUB_STEP_SUMMARY``.

    outcome = run_gate(Path("reports/base"), Path("reports/cand"))
    raise SystemExit(outcome.exit_code)     # 0 pass, 1 fail; bad input raises an EvalkitError (exit 2)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalkit.gating.capacity_gate import capacity_sides, gate_capacity
from evalkit.gating.engine import combine_runs, evaluate, evaluate_expected
from evalkit.gating.errors import CannotCompare, CannotDecide, GateInputError
from evalkit.gating.inputs import RunInputs
from evalkit.gating.load import from_run_dir
from evalkit.gating.numerics_rules import figure_text
from evalkit.gating.output import GATE_JSON, GATE_MD, JUNIT_XML, append_step_summary, to_markdown, write_outputs
from evalkit.gating.policy import GATED_SPEED, Policy, default_policy, load_policy, policy_from_dict
from evalkit.gating.result import EXIT_CODES, GateResult
from evalkit.gating.rule_catalogue import CAPACITY_RULES
from evalkit.gating.servers import server_note
from evalkit.scoring.numerics import FIGURE_LABELS, FIGURES
from evalkit.store.reader import writer_pid

BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
COMPARE_HTML = "compare.html"
# writes compare.html for the runs gated (baseline runs, candidate runs) with the gate's result
CompareWriter = Callable[[list[Path], list[Path], Path, GateResult, RunInputs, RunInputs], Path]


@dataclass
class GateOutcome:
    """The gate's answer, where it was written, and which policy decided it (``policy_source``: the file, or
    None for the default policy)."""

    result: GateResult
    policy: Policy
    policy_source: Path | None
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    step_summary: bool = False
    baselines: list[Path] = field(default_factory=list)  # the run dirs gated, each side
    candidates: list[Path] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 2 cannot decide (``result.reasons`` say why)."""
        return EXIT_CODES[self.result.verdict]


def default_out_dir(candidate: Path) -> Path:
    """Where the gate writes when ``-o`` is not given: ``CANDIDATE/gate``."""
    return candidate / "gate"


def batch_invariant_state(run_dir: Path) -> str:
    """ "on" or "off" when evalkit started the run's server (its manifest records the server's environment),
    "unknown" for a run against an external endpoint."""
    try:
        manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return "unknown"
    server = manifest.get("server") if isinstance(manifest, dict) else None
    if not isinstance(server, dict) or not server.get("argv"):  # an endpoint's server records no environment
        return "unknown"
    env = server.get("env_overrides")
    value = env.get(BATCH_INVARIANT_ENV) if isinstance(env, dict) else None
    return "on" if value not in (None, "", "0") else "off"


def _batch_invariant_notes(runs: Mapping[str, Path], numerics: bool) -> list[str]:
    """Each run's batch-invariant mode where the gate judged numerics (it decides whether a run's own logprobs
    repeat) or where the runs are known to differ in it, with a warning then."""
    states = {role: batch_invariant_state(path) for role, path in runs.items()}
    note = ", ".join(f"{role} {state}" for role, state in states.items())
    differ = len(states) == 2 and len(set(states.values())) == 2 and "unknown" not in states.values()
    out = [f"{BATCH_INVARIANT_ENV} (batch-invariant vLLM): {note}"] if numerics or differ else []
    if differ:
        out.append("the runs differ in batch-invariant mode: speed and per-request flips are not like for like")
    return out


def _server(run_dir: Path) -> dict[str, Any] | None:
    """The manifest's ``server`` block of ``run_dir`` (None where absent or unreadable)."""
    try:
        manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    server = manifest.get("server") if isinstance(manifest, dict) else None
    return server if isinstance(server, dict) else None


def _server_notes(bases: list[Path], cands: list[Path]) -> list[str]:
    """A note when the first baseline's and each candidate's servers differ (:mod:`evalkit.gating.servers`)."""
    if not bases:
        return []
    base = _server(bases[0])
    notes = (server_note(base, _server(c)) for c in cands)
    return [n if len(cands) == 1 else f"{c.name}: {n}" for c, n in zip(cands, notes, strict=True) if n]


def run_gate(
    baseline: Path | list[Path] | None,
    candidate: Path | list[Path],
    policy_file: Path | None = None,
    out_dir: Path | None = None,
    *,
    force: bool = False,
    env: Mapping[str, str] | None = None,
    write_compare: CompareWriter | None = None,
    expected: Sequence[Mapping[str, Any]] = (),
) -> GateOutcome:
    """Gate ``candidate`` against ``baseline`` (or, with ``baseline`` None or empty, against the policy's expected
    scores) and write the outputs into ``out_dir`` (default :func:`default_out_dir` of the first candidate).
    Either side may be several run dirs of one config (:func:`~evalkit.gating.engine.combine_runs`): speed is then
    judged on run-to-run variation. ``write_compare`` writes compare.html beside them when there is a baseline
    (the API passes :func:`evalkit.reporting.write_gate_compare`; the gate knows no report). Raises CannotCompare,
    CannotDecide, GateInputError or PolicyError (one line each, exit 2) before anything is written. ``expected``:
    expected scores added to the policy's (``--expected-from``: the reference scores evalkit ships). Two capacity
    dirs (``evalkit capacity -o DIR``) are judged by the policy's capacity rules instead
    (:func:`evalkit.gating.capacity_gate.gate_capacity`)."""
    bases = _dirs(baseline)
    cands = _dirs(candidate)
    if not cands:
        raise GateInputError("no candidate run dir given; pass CANDIDATE or --candidate DIR")
    policy = load_policy(policy_file) if policy_file is not None else default_policy()
    if expected:
        policy = policy_from_dict({**policy.model_dump(), "expected": [*policy.model_dump()["expected"], *expected]})
    for path in (*bases, *cands):
        if not path.is_dir():
            raise GateInputError(f"{path} is not a run directory; pass the --output-dir of an evalkit run")
    if (searches := capacity_sides(bases, cands)) is not None:  # two capacity dirs: the capacity rules
        out = out_dir if out_dir is not None else default_out_dir(cands[0])
        result = gate_capacity(*searches, policy, out)
        files = {name: out / name for name in (GATE_JSON, GATE_MD, JUNIT_XML)}
        summary = append_step_summary(to_markdown(result), env)
        return GateOutcome(result, policy, policy_file, out, files, summary, bases, cands)
    check_decidable(bases, cands)
    base_runs, cand_runs = [from_run_dir(b) for b in bases], [from_run_dir(c) for c in cands]
    check_answered_by(base_runs, cand_runs)
    try:
        cand = combine_runs(side_label(cands, bases), cand_runs, "candidate")
        base = combine_runs(side_label(bases, cands), base_runs, "baseline") if bases else None
        if base is None:
            result = evaluate_expected(cand, policy)
        else:
            result = evaluate(base, cand, policy, force=force)
    except CannotCompare as e:
        why = str(e).split("; compare runs of the same task setup")[0]
        raise CannotCompare(f"cannot compare: {why}; pass --force to compare anyway") from None
    roles = {f"baseline {b.name}" if len(bases) > 1 else "baseline": b for b in bases}
    roles.update({f"candidate {c.name}" if len(cands) > 1 else "candidate": c for c in cands})
    numerics = any(r.kind == "numerics" for r in result.rules)
    result.notes += (base.notes if base is not None else []) + cand.notes + _batch_invariant_notes(roles, numerics)
    result.notes += _server_notes(bases, cands)
    result.notes += [
        f"speed.{r.key} judges two capacity dirs (evalkit capacity -o DIR), not run dirs: not judged here"
        for r in CAPACITY_RULES
        if r.key in policy.speed.model_fields_set
    ]
    out = out_dir if out_dir is not None else default_out_dir(cands[0])
    try:
        files = write_outputs(result, out)
        if base is not None and write_compare is not None:
            files[COMPARE_HTML] = write_compare(bases, cands, out / COMPARE_HTML, result, base, cand)
        summary = append_step_summary(to_markdown(result), env)
    except OSError as e:
        raise GateInputError(
            f"cannot write the gate's outputs ({e.strerror}: {e.filename}); pass -o a writable folder"
        ) from None
    return GateOutcome(result, policy, policy_file, out, files, summary, bases, cands)


def _dirs(x: Path | list[Path] | None) -> list[Path]:
    return [] if x is None else ([x] if isinstance(x, Path) else list(x))


def side_label(dirs: Sequence[Path], other: Sequence[Path] = ()) -> str:
    """A side's name: its run dir's name, or for several runs their common parent folder's name (``base`` for
    base/repeat-1..3) where that parent holds no run of the ``other`` side; else the names joined with " + "."""
    resolved = [d.resolve() for d in dirs]
    if len(resolved) == 1:
        return resolved[0].name
    parents = {d.parent for d in resolved}
    if len(parents) == 1 and not parents & {d.resolve().parent for d in other}:
        return next(iter(parents)).name
    return " + ".join(d.name for d in resolved)


def check_decidable(baselines: list[Path], candidates: list[Path]) -> None:
    """Refuse (CannotDecide, one line) a run dir still being written by an evalkit run, the same run on both
    sides, and the same run twice on one side (one directory twice, or a copy: :func:`same_run`)."""
    for role, path in [*(("baseline", b) for b in baselines), *(("candidate", c) for c in candidates)]:
        pid = writer_pid(path)
        if pid is not None:
            raise CannotDecide(
                f"cannot decide: the {role} {path} is still being written (evalkit run pid {pid}); "
                "gate it once that run has finished"
            )
    for role, side in (("baseline", baselines), ("candidate", candidates)):
        for i, first in enumerate(side):
            for again in side[i + 1 :]:
                if same_run(first, again):
                    raise CannotDecide(
                        f"cannot decide: the same {role} run is given twice ({first}, {again}), which would count "
                        f"it as two runs; pass each {role} run once"
                    )
    for baseline in baselines:
        for candidate in candidates:
            if same_run(baseline, candidate):
                raise CannotDecide(
                    f"cannot decide: the baseline and the candidate are the same run ({baseline}, {candidate}); "
                    "pass the run dirs of two runs"
                )


def check_answered_by(baselines: list[RunInputs], candidates: list[RunInputs]) -> None:
    """Refuse (CannotDecide, one line) a candidate holding answers a baseline's endpoint gave while its manifest
    names other endpoints (a run resumed in a copy of the baseline's run dir keeps the baseline's answers)."""
    theirs = {u for b in baselines for u in (*b.endpoints, *b.answered_by)}
    for cand in candidates:
        for url, n in sorted(cand.answered_elsewhere().items()):
            if url in theirs:
                raise CannotDecide(
                    f"cannot decide: {n} of the candidate {cand.label}'s answers were given by {url}, the "
                    f"baseline's endpoint, not by its own ({', '.join(cand.endpoints) or 'none recorded'}): a run "
                    "resumed in a copy of the baseline's run dir; re-run the candidate with --fresh"
                )


def same_run(a: Path, b: Path) -> bool:
    """Whether two run dirs hold the same run: one directory (by its resolved path), or a copy (byte-identical
    manifest, samples and summary)."""
    return a.resolve() == b.resolve() or all(
        _same_file(a / name, b / name) for name in ("manifest.json", "samples.jsonl", "summary.json")
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def gate_sides(
    runs: Sequence[str | Path], baselines: Sequence[str | Path] = (), candidates: Sequence[str | Path] = ()
) -> tuple[list[Path], list[Path]]:
    """The baseline and candidate run dirs of ``evalkit gate``'s arguments: ``runs`` is BASELINE CANDIDATE, or
    CANDIDATE alone (checked against the policy's expected scores or against ``baselines``); otherwise
    ``baselines`` / ``candidates`` name every run dir of either side (several runs of one config per side), and
    mixing them with ``runs`` (two of them, or any beside ``candidates``) is refused as ambiguous (one line)."""
    if len(runs) > 2:
        raise GateInputError(f"evalkit gate takes BASELINE CANDIDATE or CANDIDATE alone, got {len(runs)} run dirs")
    mixed = [flag for flag, given in (("--baseline", baselines), ("--candidate", candidates)) if given]
    if runs and mixed and (len(runs) == 2 or "--candidate" in mixed):
        raise GateInputError(
            f"evalkit gate: {len(runs)} run dir(s) given without a side ({', '.join(map(str, runs))}) beside "
            f"{' and '.join(mixed)}, so which side they are on is ambiguous; pass every run with -b BASELINE ... "
            "-c CANDIDATE ..., or BASELINE CANDIDATE alone (CANDIDATE alone beside -b is the candidate)"
        )
    dirs = [Path(r) for r in runs]
    base = dirs[:1] if len(dirs) == 2 else []
    cand = dirs[-1:]
    return base + [Path(b) for b in baselines], cand + [Path(c) for c in candidates]


def policy_lines(policy: Policy, result: GateResult | None = None) -> list[str]:
    """The policy in a few lines: accuracy, speed, numerics, rates and expected scores. With the ``result`` it
    decided: the speed budgets applied (with one run per side, each figure's run-to-run noise budget), and numerics
    only where a task held teacher-forced positions."""
    if result is not None and any(r.method == "brackets" for r in result.rules):  # two capacity dirs
        return [
            f"capacity: lower by more than {getattr(policy.speed, r.key):.0%} (speed.{r.key}) on the searches' "
            "brackets fails"
            for r in CAPACITY_RULES
        ]
    acc = policy.accuracy.default
    budget = (
        " or ".join(
            x
            for x in (
                f"{acc.max_drop * 100:g} pts" if acc.max_drop is not None else "",
                f"{acc.max_drop_rel:.0%} of the baseline" if acc.max_drop_rel is not None else "",
            )
            if x
        )
        or "0 pts"
    )
    lines = [f"accuracy: a drop of more than {budget} ({acc.mode}, alpha {acc.alpha:g}) fails"]
    if policy.accuracy.tasks:
        lines.append(f"  overrides for: {', '.join(sorted(policy.accuracy.tasks))}")
    speed = [
        f"{key} worse by > {rule.max_change:.0%}"
        for key in GATED_SPEED
        if (rule := getattr(policy.speed, key)) is not None
    ]
    single = {
        r.name.split(": ", 1)[-1]: r.budget
        for r in (result.rules if result is not None else [])
        if r.kind == "speed" and r.budget is not None and (r.method or "").startswith("one run per side")
    }
    if single:
        applied = "; ".join(f"{k} worse by > {b:.0%}" for k, b in single.items())
        steps = sorted({f"{rule.max_change:.0%}" for key in GATED_SPEED if (rule := getattr(policy.speed, key))})
        changes = " / ".join(steps)
        lines.append(
            f"speed (one run per side, against each figure's run-to-run noise): {applied} fails; "
            f"evalkit run --repeats 3 on each side enables the tests of changes > {changes}"
        )
    else:
        lines.append("speed: " + ("; ".join(speed) + " beyond noise fails" if speed else "not checked"))
    if result is not None and not any(r.kind == "numerics" for r in result.rules):
        return [*lines, *_rates_and_expected(policy)]
    num = policy.numerics
    budgets = [
        f"{FIGURE_LABELS[f]} {'≥' if f == 'top1' else '≤'} {figure_text(f, b)}"
        for f in FIGURES
        if (b := num.budget(f)) is not None
    ]
    lines.append("numerics: " + (", ".join(budgets) if budgets else "not checked") + f" (alpha {num.alpha:g})")
    return [*lines, *_rates_and_expected(policy)]


def _rates_and_expected(policy: Policy) -> list[str]:
    rates = [f"{k} {v:g}" for k, v in policy.rates.model_dump().items() if v is not None]
    lines = ["rates: " + (", ".join(rates) if rates else "not checked")]
    return lines + [
        f"expected: {e.task} {e.metric} >= {e.value:g} - {e.max_drop:g} ({e.mode})" for e in policy.expected
    ]


def print_outcome(outcome: GateOutcome, console: Any) -> None:
    """The policy (where it came from and what it says), a table of the rules and verdicts, the notes, the
    verdict and the files written, on a rich ``console``."""
    from rich.table import Table

    from evalkit.gating.output import budget_text, evidence_text, observed_text, stored_lines

    result = outcome.result
    source = str(outcome.policy_source) if outcome.policy_source else "default (no --policy file)"
    console.print(f"[bold]policy[/bold]: {source}")
    for line in policy_lines(outcome.policy, result):
        console.print(f"  {line}", highlight=False)
    table = Table(show_lines=False)
    table.add_column("rule", no_wrap=True)
    for col in ("verdict", "observed", "budget", "p / CI"):
        table.add_column(col, overflow="fold")
    style = {"pass": "green", "fail": "bold red", "skip": "dim"}
    for r in result.rules:
        verdict = f"[{style[r.verdict]}]{r.verdict}[/{style[r.verdict]}]"
        table.add_row(r.name, verdict, observed_text(r), budget_text(r), evidence_text(r))
    console.print(table)
    for line in stored_lines(result):
        console.print(line, highlight=False, markup=False)
    for note in result.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    for reason in result.reasons:
        console.print(f"cannot decide: {reason}", highlight=False, markup=False)
    colour = {"pass": "green", "fail": "bold red", "cannot_decide": "bold yellow"}[result.verdict]
    shown = result.verdict.upper().replace("_", " ")
    evaluated = sum(1 for r in result.rules if r.verdict != "skip")
    console.print(
        f"gate: [{colour}]{shown}[/{colour}] ({len(result.failed)} of {evaluated} evaluated rules failed, "
        f"{len(result.rules) - evaluated} skipped); written to {outcome.out_dir}",
        highlight=False,
    )
