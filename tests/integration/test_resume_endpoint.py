"""A run resumed in a run dir that holds another server's answers (``cp -r base cand; evalkit run … -o cand``
against the candidate's endpoint): it says how many answers it kept from which endpoint, each kept sample names
the endpoint that gave it, and the gate refuses a candidate whose answers came from the baseline's endpoint
(issue 44, item 2). Two test servers over HTTP: the baseline's answers right, the candidate's 90% wrong."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config.endpoint import display_url
from evalkit.testing.server import Behaviour, TestServer

LIMIT = 20


def invoke(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [*map(str, args)])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    print(res.output)
    return res.exit_code, res.output


def run(url: str, out: Path, *extra: str) -> tuple[int, str]:
    return invoke("run", "gsm8k", "--endpoint", url, "--limit", LIMIT, "--max-tokens", 64, "-o", out,
                  "--no-report", "-q", *extra)  # fmt: skip


def records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "samples.jsonl").read_bytes().splitlines()]


def generated(srv: TestServer) -> int:
    return sum(1 for r in srv.requests if r.path.endswith("/completions"))


@pytest.fixture
def servers() -> Any:
    with TestServer(Behaviour()) as base, TestServer(Behaviour(correct_ratio=0.1)) as cand:
        yield base, cand


def test_a_run_resumed_in_a_copy_of_the_baselines_dir_is_said_recorded_and_refused_by_the_gate(
    tmp_path: Path, servers: Any
) -> None:
    base_srv, cand_srv = servers
    base, cand = tmp_path / "base", tmp_path / "cand"
    assert run(base_srv.url, base)[0] == 0
    shutil.copytree(base, cand)
    code, out = run(cand_srv.url, cand)
    assert code == 0, out
    assert generated(cand_srv) == 0  # every answer was already there: nothing sent (the resume key has no endpoint)
    base_url, cand_url = display_url(base_srv.url), display_url(cand_srv.url)
    assert f"{LIMIT} answer(s) there were given by {base_url}, not by this run's endpoint {cand_url}" in out
    assert "pass --fresh" in out
    assert {r.get("endpoint") for r in records(cand)} == {base_url}  # each kept answer names who gave it
    assert orjson.loads((cand / "manifest.json").read_bytes())["endpoint"]["base_url"] == cand_url
    code, out = invoke("gate", base, cand, "-o", tmp_path / "gate")
    assert code == 2, out
    assert f"{LIMIT} of the candidate cand's answers were given by {base_url}, the baseline's endpoint" in out
    assert "--fresh" in out and not (tmp_path / "gate").exists()
    code, out = run(cand_srv.url, cand, "--fresh")  # the candidate's own answers: 90% wrong, and the gate says so
    assert code == 0 and generated(cand_srv) == LIMIT, out
    assert all("endpoint" not in r for r in records(cand))
    code, out = invoke("gate", base, cand, "-o", tmp_path / "gate")
    assert code == 1, out


def test_a_resume_against_the_same_endpoint_says_nothing_and_stamps_nothing(tmp_path: Path, servers: Any) -> None:
    base_srv, _ = servers
    out = tmp_path / "run"
    assert run(base_srv.url, out)[0] == 0
    kept = (out / "samples.jsonl").read_bytes().splitlines()[:12]  # as if interrupted after 12 answers
    (out / "samples.jsonl").write_bytes(b"\n".join(kept) + b"\n")
    code, text = run(base_srv.url, out)
    assert code == 0 and "answer(s) there were given by" not in text
    assert generated(base_srv) == LIMIT + 8 and all("endpoint" not in r for r in records(out))


def test_answers_kept_from_another_endpoint_stay_its_own_and_the_rest_are_this_runs(
    tmp_path: Path, servers: Any
) -> None:
    first, second = servers
    out = tmp_path / "run"
    assert run(first.url, out)[0] == 0
    kept = (out / "samples.jsonl").read_bytes().splitlines()[:12]
    (out / "samples.jsonl").write_bytes(b"\n".join(kept) + b"\n")
    code, text = run(second.url, out)
    assert code == 0 and f"12 answer(s) there were given by {display_url(first.url)}" in text
    assert generated(second) == 8
    by = [r.get("endpoint") for r in records(out)]
    assert by == [display_url(first.url)] * 12 + [None] * 8  # None: the manifest's endpoint, the second


def test_the_gate_refuses_a_candidate_whose_samples_name_the_baselines_endpoint(tmp_path: Path, servers: Any) -> None:
    base_srv, cand_srv = servers
    base, cand = tmp_path / "base", tmp_path / "cand"
    assert run(base_srv.url, base)[0] == 0
    shutil.copytree(base, cand)  # a candidate dir as a resumed run leaves it: its manifest names its endpoint ...
    manifest = orjson.loads((cand / "manifest.json").read_bytes())
    manifest["endpoint"]["base_url"] = display_url(cand_srv.url)
    (cand / "manifest.json").write_bytes(orjson.dumps(manifest))
    stamped = [{**r, "endpoint": display_url(base_srv.url)} for r in records(cand)]  # ... its samples the baseline's
    (cand / "samples.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in stamped))
    code, out = invoke("gate", base, cand, "-o", tmp_path / "gate")
    assert code == 2 and "the baseline's endpoint" in out, out
