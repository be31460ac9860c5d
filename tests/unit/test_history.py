"""The run history (evalkit/history): its schema against its migrations, `evalkit history add|list|show|export`
on the example runs, the gate recording its verdicts and taking a baseline from the history (both on SQLite and
on PostgreSQL), and the history never failing a command (a write that fails is one warning with the URL's
password redacted)."""

from __future__ import annotations

import json
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

DATA = Path(__file__).parents[1] / "data"
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
