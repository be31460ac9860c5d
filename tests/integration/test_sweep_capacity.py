"""``search: capacity`` in a sweep file: each config's capacity search (``evalkit capacity``) under the sweep dir,
tabulated as the layout table (capacity within the SLOs, tok/s, TTFT/TPOT, $ per million output tokens, the
probes' accuracy at the answer) that leads sweep.md and compare.html with the recommendation: the config with
the most good requests per dollar among those not less accurate than the reference. Against two test servers
of known different capacity (--max-num-seqs 4 vs 1 at 50 ms a request); a re-run keeps finished searches; bad
sweep files are refused in one line."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.store.capacity_dir import open_capacity
from evalkit.testing.server import SubprocessServer


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """Two test servers, 50 ms a request: ``wide`` serves 4 at a time, ``narrow`` 1 (about 4x less capacity)."""
    with (
        SubprocessServer("--max-num-seqs", "4", "--ttft", "0.05") as wide,
        SubprocessServer("--max-num-seqs", "1", "--ttft", "0.05") as narrow,
    ):
        yield {"wide": wide.url, "narrow": narrow.url}


def sweep(tmp_path: Path, spec: dict, *extra: str) -> tuple[int, str]:
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(spec))
    res = CliRunner().invoke(app, ["sweep", str(path), "-o", str(tmp_path / "out"), *extra])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout + res.stderr


def spec_for(urls: dict[str, str], **over: object) -> dict:
    """Each point a fixed 40 requests, so that every point's probe answers the same gsm8k questions (the accuracy
    at the two configs' answers is then compared question by question)."""
    return {
        "tasks": ["random"], "endpoint": urls["narrow"], "gpus_billed": 1, "cost_per_gpu_hour": 2.0,
        "configs": {"narrow": {"endpoint": urls["narrow"]}, "wide": {"endpoint": urls["wide"]}},
        "goodput": {"ttft": 250}, "warmup": 4, "search": "capacity",
        "capacity": {
            "start": 8.0, "tolerance": 0.25, "point_requests": 40, "probe": ["gsm8k:0.2"],
            "workload": {"random_input_len": 20, "random_output_len": 2},
        },
        "recommend": {"reference": "narrow"}, **over,
    }  # fmt: skip


def test_the_layout_table_orders_the_configs_and_recommends_the_wider(tmp_path: Path, servers: dict[str, str]) -> None:
    code, out = sweep(tmp_path, spec_for(servers))
    assert code == 0, out
    rows = {r["config"]: r for r in csv.DictReader((tmp_path / "out" / "sweep.csv").open())}
    wide, narrow = float(rows["wide"]["capacity"]), float(rows["narrow"]["capacity"])
    assert wide > 2 * narrow, (wide, narrow)  # 4 seats against 1
    for row in rows.values():
        assert row["unit"] == "req/s" and row["status"] == "ok"
        assert float(row["output_tok_s"]) > 0 and float(row["ttft_p99_ms"]) > 0
        assert float(row["cost_per_m_out_tok"]) > 0 and float(row["good_requests_per_usd"]) > 0
        assert 0 <= float(row["gsm8k exact_match,strict-match"]) <= 1  # the probe's accuracy at the answer
    # each config's search is a capacity dir under the sweep dir, its answer the table's
    for name in ("wide", "narrow"):
        cap = open_capacity(tmp_path / "out" / "capacity" / f"{name}__default").record
        assert cap.capacity_rps == float(rows[name]["capacity"]) and cap.workload["probe"] == ["gsm8k:0.2"]
    md = (tmp_path / "out" / "sweep.md").read_text()
    assert md.index("## Recommendation") < md.index("## Layout")
    assert "**wide__default**: the most good requests per dollar" in md
    html = (tmp_path / "out" / "compare.html").read_text()
    assert "wide__default recommended" in html and "good requests per $" in html
    # a re-run keeps the finished searches
    again_code, again = sweep(tmp_path, spec_for(servers))
    assert again_code == 0 and "searching" not in again and "skipped 2 finished" in again, again
    # other SLOs: the search with other settings is moved aside, nothing lost
    code, out = sweep(tmp_path, spec_for(servers, configs={"wide": {"endpoint": servers["wide"]}},
                                         recommend={"reference": "wide"}, goodput={"ttft": 225}))  # fmt: skip
    assert code == 0 and "moved it to" in out, out
    assert list((tmp_path / "out" / "capacity").glob("wide__default.stale-*"))


@pytest.mark.parametrize(
    ("over", "named"),
    [
        ({"capacity": {"slo_shares": 0.9}}, "unknown key 'capacity.slo_shares'"),
        ({"goodput": None}, "search: capacity needs goodput"),
        ({"concurrency": [4]}, "drop 'concurrency'"),
        ({"tasks": ["random", "gsm8k"]}, "measures one load"),
        ({"search": None}, "'capacity' settings go with 'search: capacity'"),
        ({"search": "grid"}, "Input should be 'capacity'"),
        ({"capacity": {"slo_share": 1.5}}, "capacity.slo_share"),
        ({"capacity": {"probe": ["gsm8k"]}}, "capacity.probe"),
        ({"capacity": {"start": 1.0}}, "recommend with search: capacity judges accuracy on capacity.probe"),
    ],
)
def test_bad_sweep_files_are_refused_in_one_line(tmp_path: Path, over: dict, named: str) -> None:
    spec = spec_for({"wide": "http://127.0.0.1:9/v1", "narrow": "http://127.0.0.1:9/v1"}, **over)
    spec = {k: v for k, v in spec.items() if v is not None}
    code, out = sweep(tmp_path, spec)
    assert code == 2 and named in out, out
    assert len(out.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_collect_tabulates_searches_and_a_search_without_an_answer_fails_the_exit(tmp_path: Path) -> None:
    """Two searches written as capacity dirs (no server): --collect tabulates them by the sweep file; the one
    below its start has its error cell and exit 1, with no recommendation but the reason."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_gate_capacity import write_search

    urls = {"wide": "http://127.0.0.1:9/v1", "narrow": "http://127.0.0.1:9/v1"}
    spec = spec_for(urls)
    fields = {"slos": {"ttft": 1000.0}, "tolerance": 0.25, "start": 2.0, "point_requests": 40}
    fields["workload"] = {"probe": ["gsm8k:0.2"]}
    cap = tmp_path / "out" / "capacity"
    write_search(cap / "wide__default", [24.0, 28.0], **fields)
    write_search(cap / "narrow__default", [None, 2.0], status="below_start", reason="2 fails", **fields)
    code, out = sweep(tmp_path, spec, "--collect")
    assert code == 1 and "narrow__default: search below_start: 2 fails" in out, out
    rows = {r["config"]: r for r in csv.DictReader((tmp_path / "out" / "sweep.csv").open())}
    assert rows["wide"]["capacity"] == "24.0" and rows["wide"]["bracket_high"] == "28.0"
    assert rows["narrow"]["capacity"] == "" and rows["narrow"]["status"] == "below_start"
    assert "None qualifies" in (tmp_path / "out" / "sweep.md").read_text()
