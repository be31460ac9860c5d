"""The run history (evalkit/history): its schema against its migrations, `evalkit history add|list|show|export`
on the example runs, the gate recording its verdicts and taking a baseline from the history (both on SQLite and
on PostgreSQL), and the history never failing a command (a write that fails is one warning with the URL's
password redacted)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.history import db, location
from evalkit.history.models import Base
from evalkit.redact import redact_argv, redact_env
from tests.history_fixtures import db_url, forget, sqlite_url  # noqa: F401  (db_url: the fixture)
from tests.report_fixtures import build_gsm8k_run

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200-smollm2-135m-2026-12-02"
LENIENT = "rates:\n  max_error_rate: 0.01\nbootstrap:\n  resamples: 500\n"  # the fixtures hold 5 api errors


def cli(url: str, *args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [*map(str, args)], env={location.ENV: url})
    print(res.output)
    return res.exit_code, res.output


def test_the_migrations_make_exactly_the_models_tables(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    url = sqlite_url(tmp_path)
    engine = db.open_engine(url)
    with engine.connect() as c:
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0003"
    assert ScriptDirectory.from_config(db.alembic_config()).get_current_head() == db.HEAD == "0003"
    forget(url)


def test_an_off_history_records_nothing_and_imports_no_sqlalchemy() -> None:
    # with EVALKIT_HISTORY_URL=off every writer returns None before importing SQLAlchemy (0.15-0.4 s at the end
    # of each command otherwise); a fresh interpreter, since this one has SQLAlchemy loaded
    code = (
        "import sys; from pathlib import Path; from evalkit import history as h; "
        "r = (h.record_run(Path('x')), h.record_gate(None, [], []), h.record_tick(Path('w'), 't', {}, None)); "
        "print(r, sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic')))"
    )
    env = {**os.environ, location.ENV: "off"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(None, None, None) []", out.stderr


def test_history_url_default_off_and_shown_redacted(tmp_path: Path) -> None:
    assert location.history_url({location.ENV: "off"}) is None
    assert location.history_url({location.ENV: "sqlite:////x/h.sqlite"}) == "sqlite:////x/h.sqlite"
    default = location.history_url({})
    assert default is not None and default.startswith("sqlite:///") and default.endswith("evalkit/history.sqlite")
    assert db.shown_url("postgresql://evalkit:s3cret@db:5432/h") == "postgresql://***@db:5432/h"
    # a history URL handed to a server started by evalkit is recorded in its manifest without the password too
    assert redact_env({location.ENV: "postgresql://evalkit:s3cret@db/h"}) == {location.ENV: "postgresql://***@db/h"}
    assert "s3cret" not in " ".join(redact_argv(["--server-env", f"{location.ENV}=postgresql://evalkit:s3cret@db/h"]))
    message = db.safe_message(
        RuntimeError('password "s3cret" refused for postgresql://evalkit:s3cret@db/h'),
        "postgresql://evalkit:s3cret@db/h",
    )
    assert "s3cret" not in message and "***@db/h" in message
    code, out = cli("postgres ql://x", "history", "list")
    assert code == 2 and "is not a database URL" in out and len(out.strip().splitlines()) == 1
    code, out = cli("postgresql://evalkit:s3cret@db/h", "config", "show", "gsm8k", "--endpoint", "http://x:1/v1")
    assert code == 0 and out.splitlines()[-1].split() == ["history", "postgresql://***@db/h", "env", location.ENV]
    assert "s3cret" not in out


def test_add_list_show_export_of_the_example_runs(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    url = db_url
    runs = [DATA / "cpu-vllm-gsm8k", *sorted(H200.iterdir())]
    code, out = cli(url, "history", "add", *runs)
    assert code == 0 and len(out.strip().splitlines()) == 4
    code, out = cli(url, "history", "list")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].split()[:3] == ["id", "created", "(UTC)"] and len(lines) == 5
    assert "2026-12-03 08:14" in lines[1] and "0.32.0" in lines[1]  # newest first, its vLLM version
    # each row names its run dir and kind, under a header whose columns line up with the rows'
    assert lines[0].split()[3:6] == ["run", "dir", "kind"]
    assert lines[1].split()[3:5] == ["cpu-vllm-gsm8k", "run"]
    assert lines[1].index("cpu-vllm-gsm8k") == lines[0].index("run dir")
    code, out = cli(url, "history", "list", "--task", "aime25")
    assert code == 0 and len(out.strip().splitlines()) == 2 and "aime25" in out
    code, out = cli(url, "history", "list", "--since", "2026-12-03")
    assert code == 0 and len(out.strip().splitlines()) == 2 and "0.32.0" in out
    code, out = cli(url, "history", "list", "--since", "last week")
    assert code == 2 and "--since 'last week'" in out and len(out.strip().splitlines()) == 1

    seqs64 = H200 / "gsm8k-max-num-seqs-64"
    code, out = cli(url, "history", "show", seqs64)
    assert code == 0, out
    assert "exact_match,strict-match: 0.0129 [0.0068, 0.0190] (n 1319)" in out  # the metric with its CI
    assert "--max-num-seqs 64" in out and "vLLM 0.26.0" in out and "ttft_p99_ms 1819" in out
    (speed,) = [line for line in out.splitlines() if line.strip().startswith("speed:")]
    assert "e+" not in speed and re.search(r" e2e_p99_ms \d{4,}(,|$)", speed), speed  # 10714, not 1.071e+04
    first_id = out.split(":")[0].split()[-1]
    code, out = cli(url, "history", "add", "--config", "seqs64", seqs64)  # recorded again: same row, named
    assert code == 0 and out.startswith(f"run {first_id}:") and "config seqs64" in out
    code, out = cli(url, "history", "list", "--config", "seqs64")
    assert code == 0 and len(out.strip().splitlines()) == 2

    code, out = cli(url, "history", "export", "-o", tmp_path / "h.csv")
    assert code == 0, out
    rows = list(csv.DictReader((tmp_path / "h.csv").open()))
    strict = [r for r in rows if r["config"] == "seqs64" and r["name"] == "exact_match,strict-match"]
    assert (
        len(strict) == 1
        and strict[0]["kind"] == "metric"
        and float(strict[0]["ci_low"]) == pytest.approx(0.0068, abs=1e-4)
    )
    assert {r["kind"] for r in rows} == {"metric", "speed"} and {r["task"] for r in rows} == {"gsm8k", "aime25"}
    pq = pytest.importorskip("pyarrow.parquet")
    code, out = cli(url, "history", "export", "-o", tmp_path / "h.parquet", "--task", "aime25")
    assert code == 0, out
    table = pq.read_table(tmp_path / "h.parquet")
    assert set(table.column("task").to_pylist()) == {"aime25"} and out.strip().endswith(f"({table.num_rows} rows)")
    with pytest.MonkeyPatch.context() as mp:  # without pyarrow: CSV only, and evalkit says so
        mp.setitem(sys.modules, "pyarrow", None)
        code, out = cli(url, "history", "export", "-o", tmp_path / "h2.parquet")
    assert code == 2 and "needs pyarrow, which is not installed" in out and not (tmp_path / "h2.parquet").exists()
    code, out = cli(url, "history", "export", "-o", tmp_path / "h.txt")
    assert code == 2 and "--format csv or --format parquet" in out
    code, out = cli(url, "history", "show", "999")
    assert code == 2 and "no run '999'" in out
    code, out = cli(url, "history", "add", tmp_path)
    assert code == 2 and "is not a run dir" in out
    forget(url)


def test_gate_verdicts_are_recorded_and_a_baseline_comes_from_the_history(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    url = db_url
    policy = tmp_path / "gate.yaml"
    policy.write_text(LENIENT)
    base = build_gsm8k_run(tmp_path / "base", seed=0, accuracy=0.78)
    nightly1 = build_gsm8k_run(tmp_path / "nightly1", seed=1, accuracy=0.78)
    nightly2 = build_gsm8k_run(tmp_path / "nightly2", seed=2, accuracy=0.70)  # a real drop
    code, _ = cli(url, "history", "add", "--config", "nightly", nightly1, nightly2)
    assert code == 0
    code, out = cli(url, "gate", base, nightly1, "--policy", policy, "-o", tmp_path / "g1")
    assert code == 0, out
    code, out = cli(url, "history", "list", "--verdict", "pass")
    assert code == 0 and len(out.strip().splitlines()) == 2 and "nightly" in out and out.rstrip().endswith("pass")
    code, out = cli(url, "history", "show", nightly1)
    assert code == 0 and "as candidate: pass" in out

    # the newest passing nightly is the baseline: the drop of nightly2 against it fails
    ref = "history:latest-pass?config=nightly"
    code, out = cli(url, "gate", "--baseline", ref, nightly2, "--policy", policy, "-o", tmp_path / "g2")
    assert code == 1, out
    gate = json.loads((tmp_path / "g2" / "gate.json").read_text())
    assert gate["baseline"] == "nightly1" and gate["candidate"] == "nightly2" and gate["verdict"] == "fail"
    code, out = cli(url, "history", "show", nightly2)
    assert "as candidate: fail; failed: gsm8k: exact_match" in out
    code, out = cli(url, ref.replace("latest-pass", "latest"))  # not a command: a bad first argument
    assert code == 2

    # bad or unmatched history baselines: one line each, naming the fix
    for bad, why in [
        ("history:newest?config=nightly", "write history:latest-pass?config=NAME"),
        ("history:latest-pass?config=nope", "no gate passed a candidate run of config=nope"),
        ("history:latest-pass?cfg=nightly", "(filters: config, model, task)"),
    ]:
        code, out = cli(url, "gate", "--baseline", bad, nightly2, "-o", tmp_path / "g3")
        assert code == 2 and why in out and len(out.strip().splitlines()) == 1, out
    shutil.rmtree(nightly1)
    code, out = cli(url, "gate", "--baseline", ref, nightly2, "-o", tmp_path / "g3")
    assert code == 2 and "is gone" in out
    forget(url)


def test_a_history_that_cannot_be_written_is_one_warning_and_the_gate_stands(tmp_path: Path) -> None:
    base = build_gsm8k_run(tmp_path / "base", n=200, seed=0)
    cand = build_gsm8k_run(tmp_path / "cand", n=200, seed=1)
    policy = tmp_path / "gate.yaml"
    policy.write_text(LENIENT)
    args = ("gate", base, cand, "--policy", policy, "-o", tmp_path / "g")
    verdict, out = cli("off", *args)
    assert verdict in (0, 1) and "warning" not in out
    code, out = cli("postgresql://evalkit:s3cretpw@127.0.0.1:1/history", *args)
    assert code == verdict, out
    warnings = [line for line in out.splitlines() if line.startswith("evalkit: warning:")]
    assert len(warnings) == 1 and "the gate's verdict was not recorded in the run history" in warnings[0]
    assert "s3cretpw" not in out and "***@127.0.0.1:1" in warnings[0]


def test_expected_from_the_shipped_reference_scores(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    policy = tmp_path / "gate.yaml"
    policy.write_text(LENIENT)
    model = "deepseek-ai/DeepSeek-V3.2"
    code, out = cli(url, "history", "references")
    assert code == 0 and f"{model}  gsm8k  exact_match,flexible-extract >= 0.95 - 0.08" in out
    assert "tests/evals/gsm8k/configs/DeepSeek-V3.2-TP.yaml" in out  # each number with its source
    # public sources only: the AIME number cites the model card and paper, not an internal document
    assert "https://huggingface.co/deepseek-ai/DeepSeek-V3.2" in out and "arXiv:2512.02556" in out
    assert "brief" not in out and "issue 31" not in out

    low = build_gsm8k_run(tmp_path / "low", seed=0, accuracy=0.78, model=model)
    code, out = cli(url, "gate", low, "--expected-from", model, "--policy", policy, "-o", tmp_path / "g1")
    assert code == 1, out
    rules = json.loads((tmp_path / "g1" / "gate.json").read_text())["rules"]
    (expected,) = [r for r in rules if r["kind"] == "expected"]
    assert expected["verdict"] == "fail" and expected["budget"] == pytest.approx(0.08)
    assert expected["name"].startswith("gsm8k: exact_match,flexible-extract")
    high = build_gsm8k_run(tmp_path / "high", seed=1, accuracy=0.99, model=model)
    code, out = cli(url, "gate", high, "--expected-from", model, "--policy", policy, "-o", tmp_path / "g2")
    assert code == 0, out

    for args, why in [
        (("--expected-from", "nobody/none"), "no reference score of that model; the table has: deepseek-ai/"),
        (("--expected-from", model), "the candidate ran gsm8k with temperature 0.6 (published at 0.0)"),
    ]:
        hot = build_gsm8k_run(tmp_path / "hot", seed=2, model=model, temperature=0.6)
        code, out = cli(url, "gate", hot, *args, "-o", tmp_path / "g3")
        assert code == 2 and why in out and len(out.strip().splitlines()) == 1, out
    forget(url)


def test_the_config_identity_covers_what_changes_speed_or_scores() -> None:
    """Runs that differ in max_tokens, sampling, concurrency, request rate, endpoints or the server's own identity
    get different config hashes; repeats (another seed) share theirs."""
    from evalkit.history.record import config_hash
    from evalkit.store.reader import ManifestRead

    base = json.loads((DATA / "cpu-vllm-gsm8k" / "manifest.json").read_text())
    base["server"].pop("argv", None)  # as a run against an external endpoint records it
    (task,) = base["tasks"]

    def changed(edit: Any) -> str:
        m = json.loads(json.dumps(base))
        edit(m)
        return config_hash(ManifestRead.of(m))

    same = config_hash(ManifestRead.of(base))
    assert changed(lambda m: m["tasks"][task]["settings"].update(seed=7)) == same  # a repeat
    for edit in (
        lambda m: m["tasks"][task]["settings"].update(max_tokens=64),
        lambda m: m["tasks"][task]["settings"].update(temperature=0.7),
        lambda m: m.update(concurrency=4),
        lambda m: m.update(request_rate=2.0),
        lambda m: m.update(endpoints=["http://a:8000/v1", "http://b:8000/v1"]),
        lambda m: m["endpoint"].update(base_url="http://other:8000/v1"),
        lambda m: m["server"].update(kv_cache_tokens=1024),
        lambda m: m["server"].update(max_model_len=1024),
        lambda m: m["server"].update(version="0.99.0"),
    ):
        assert changed(edit) != same


def test_the_trend_draws_one_line_per_config_identity_with_round_ticks_and_dated_labels() -> None:
    """tok/s at concurrency 128, 16 and 4 of one config name are three lines; ticks are round numbers; runs on one
    day are labelled with their times."""
    from datetime import datetime

    from evalkit.history.query import Point
    from evalkit.history.trend import chart, nice_ticks, render_trend

    points = [
        Point(i, f"r{i}", datetime(2026, 12, 6, 9 + i), "nightly", "0.32.0", 0.6 + i / 100, (0.55, 0.7), tok, None,
              f"hash{level}", str(level))
        for i, (level, tok) in enumerate([(128, 594.3), (16, 301.0), (4, 95.2), (128, 588.0), (16, 299.0)])
    ]  # fmt: skip
    speed = chart("tok/s", points, [p.speed for p in points], False, False, False)
    assert sorted(s.label for s in speed.series) == [f"nightly · concurrency {c}" for c in (128, 16, 4)]
    assert all(s.line.count("L") == n - 1 for s, n in zip(speed.series, (2, 2, 1), strict=True))
    assert [label for _, label in speed.y_ticks] == ["0", "200", "400", "600"]
    assert nice_ticks([0.0609, 0.2767], True) == [0.0, 0.1, 0.2, 0.3]
    assert nice_ticks([0.1, 0.9], True) == [0.0, 0.25, 0.5, 0.75, 1.0]
    labels = [label for _, label in speed.x_ticks]
    assert labels == ["12-06 09:00", "12-06 10:00", "12-06 11:00", "12-06 12:00", "12-06 13:00"]
    html = render_trend("gsm8k", "exact_match", "output_tokens_per_s", points, "sqlite")
    assert html.count('class="line"') == 6 and "6.09%" not in html
