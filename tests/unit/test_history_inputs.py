"""A run history setting or filter that is malformed: ``EVALKIT_HISTORY_URL`` of any shape never prints its
password (the "is not a database URL" error, `evalkit config show`, the warning of `evalkit run`), a URL that
SQLAlchemy or the file system refuses is one line and exit 2 for every `evalkit history` command, and a
``config=`` filter matches a config by its name (or a hex prefix of its hash), bounded in length."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.history import location
from evalkit.history.db import shown_url
from tests.history_fixtures import forget, sqlite_url
from tests.report_fixtures import build_gsm8k_run

DATA = Path(__file__).parents[1] / "data"
PASSWORD = "s3cretPW-do-not-print"
MALFORMED = [  # a URL as a user may mistype it, the password in each
    f"postgresql:/bob:{PASSWORD}@127.0.0.1:1/evalkit",  # a missing /
    f"postgresql//bob:{PASSWORD}@127.0.0.1:1/evalkit",  # a missing :
    f"postgresql:// bob:{PASSWORD}@127.0.0.1:1/evalkit",  # a space after the scheme
    f"postgresql://bob:{PASSWORD} x@127.0.0.1:1/evalkit",  # a space in the password
    f"postgresql://bob:{PASSWORD}/x@127.0.0.1:1/evalkit",  # a / in the password
    f"Postgresql://bob:{PASSWORD}@127.0.0.1:1/evalkit",  # a capital letter in the scheme
]


def cli(url: str, *args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [*map(str, args)], env={location.ENV: url})
    print(res.output)
    return res.exit_code, res.output


def test_shown_url_hides_the_password_whatever_the_shape() -> None:
    for url in MALFORMED:
        assert PASSWORD not in shown_url(url) and shown_url(url).endswith("***@127.0.0.1:1/evalkit"), url
    assert shown_url("sqlite:////tmp/h.sqlite") == "sqlite:////tmp/h.sqlite"  # nothing to hide: as given
    assert shown_url("postgresql://bob@h/db?password=" + PASSWORD) == "postgresql://***@h/db?password=***"


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_history_url_never_prints_its_password(url: str, tmp_path: Path) -> None:
    code, out = cli(url, "history", "list")
    assert code == 2 and len(out.strip().splitlines()) == 1 and out.startswith("evalkit: error:"), out
    assert PASSWORD not in out and "***@" in out
    code, out = cli(url, "config", "show", "gsm8k", "--endpoint", "http://x:1/v1")
    assert code == 0 and PASSWORD not in out and "***@127.0.0.1:1/evalkit" in out.splitlines()[-1]


UNOPENABLE = [
    ("Postgresql://bob:pw@127.0.0.1:1/evalkit", "cannot open the history database Postgresql://***@127.0.0.1:1"),
    ("nosuchdb://bob:pw@h/evalkit", "no database of kind 'nosuchdb'"),
    ("sqlite:////proc/nope/h.sqlite", "cannot make the folder /proc/nope of the history database"),
]


@pytest.mark.parametrize(("url", "why"), UNOPENABLE)
def test_a_history_that_cannot_be_opened_is_one_line_for_every_command(url: str, why: str, tmp_path: Path) -> None:
    run_dir = DATA / "cpu-vllm-gsm8k"
    for args in [
        ("history", "list"),
        ("history", "add", run_dir),
        ("history", "show", "1"),
        ("history", "export", "-o", tmp_path / "h.csv"),
        ("history", "trend", "--task", "gsm8k", "-o", tmp_path / "t.html"),
        ("gate", "--baseline", "history:latest", run_dir, "-o", tmp_path / "g"),
    ]:
        code, out = cli(url, *args)
        assert code == 2 and len(out.strip().splitlines()) == 1 and why in out, (args, out)
    assert not (tmp_path / "h.csv").exists() and not (tmp_path / "t.html").exists()


def test_a_config_filter_matches_names_not_like_patterns_and_is_bounded(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    nightly = build_gsm8k_run(tmp_path / "nightly", seed=1, accuracy=0.78)
    cand = build_gsm8k_run(tmp_path / "cand", seed=2, accuracy=0.78)
    code, out = cli(url, "history", "add", "--config", "nightly", nightly)
    assert code == 0, out
    code, out = cli(url, "history", "show", nightly)
    config_hash = out.split("(hash ")[1].split(")")[0]
    for pattern in ("%", "_ightly", "night%", "___" + config_hash[3:7]):  # LIKE wildcards match nothing
        code, out = cli(url, "history", "list", "--config", pattern)
        assert code == 0 and "no run in the history matches" in out, (pattern, out)
        code, out = cli(url, "gate", "--baseline", f"history:latest?config={pattern}", cand, "-o", tmp_path / "g")
        assert code == 2 and f"no run of config={pattern} in the history" in out, (pattern, out)
    for name in ("nightly", config_hash[:4]):  # its name, or a prefix of its hash
        code, out = cli(url, "history", "list", "--config", name)
        assert code == 0 and len(out.strip().splitlines()) == 2 and "nightly" in out, (name, out)

    huge = "x" * 100_000
    code, out = cli(url, "gate", "--baseline", f"history:latest?config={huge}", cand, "-o", tmp_path / "g")
    assert code == 2 and len(out.strip().splitlines()) == 1 and len(out) < 400, out
    assert "the config is 100,000 characters, over 256" in out
    for option in ("--config", "--model", "--task"):
        code, out = cli(url, "history", "list", option, huge)
        assert code == 2 and len(out) < 400 and f"{option} is 100,000 characters" in out, out
    code, out = cli(url, "history", "show", "9" * 30)  # an id past 64 bits: no run, not an overflow
    assert code == 2 and "no run '999" in out and len(out.strip().splitlines()) == 1
    forget(url)
