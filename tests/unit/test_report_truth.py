"""The figures of run and comparison reports against what real stores hold: the H200 example runs (vLLM 0.26,
``summary.json`` and ``manifest.json`` as written) and a real CPU-vLLM run with its samples (``tests/data``)."""

from __future__ import annotations

import json
import re
import shutil
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from evalkit.reporting import render_compare_html, render_run_html

try:
    from tests import report_fixtures as rf
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    import report_fixtures as rf  # type: ignore[no-redef]

DATA = Path(__file__).parents[1] / "data"
H200 = DATA / "h200-smollm2-135m-2026-12-02"
CPU = DATA / "cpu-vllm-gsm8k"


def text_of(html: str) -> str:
    """The page's text, tags dropped and entities decoded, whitespace collapsed."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def table_rows(html: str) -> list[list[str]]:
    """Each <tr> of the page as the text of its cells."""
    return [
        [
            re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", c))).strip()
            for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)
        ]
        for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S)
    ]


@pytest.fixture(scope="module")
def h200() -> dict[str, str]:
    return {
        name: render_run_html(H200 / name) for name in ("gsm8k-max-num-seqs-256", "gsm8k-max-num-seqs-64", "aime25")
    }


def test_gpu_memory_from_the_store(h200: dict[str, str]) -> None:
    # summary.json: gpu.gpus[0].peak_mib = 44171, mean 44153.1, 15 samples; manifest: NVIDIA H200, 143,771 MiB
    assert ["0", "NVIDIA H200", "143,771", "44,171", "44,153", "30.7%", "15"] in table_rows(
        h200["gsm8k-max-num-seqs-256"]
    )
    # the AIME run used --endpoint: no GPU names in its manifest, but its GPU memory was sampled
    assert ["0", "—", "—", "43,981", "43,981", "—", "11"] in table_rows(h200["aime25"])


def test_server_counters_are_read_not_dumped(h200: dict[str, str]) -> None:
    text = text_of(h200["gsm8k-max-num-seqs-256"])
    assert "Requests finished 1,319 (length 80 · stop 1,239)" in text
    assert "Prefix-cache hit rate 1.5% (20,432 of 1,346,770 prompt tokens)" in text
    assert "Measured over 15.2 s" in text
    assert "Requests in the engine, peak 63 running · 11 waiting" in text
    for raw in ("15.224165543000026", '"mean"', "by_finished_reason", "{'hits'", "request_tpot_s", "queue_s"):
        assert raw not in text, raw


def latency(html: str) -> dict[tuple[str, str], list[str]]:
    """The latency table: (metric, server|client) -> [mean, p50, p90, p99, n]."""
    out: dict[tuple[str, str], list[str]] = {}
    metric = ""
    body = html.split('<table class="grid num lat">', 1)[1].split("</table>", 1)[0]
    for row in table_rows(body)[1:]:
        metric = row[0] or metric
        out[(metric, row[1])] = row[2:]
    return out


def test_latencies_paired_by_what_they_measure(h200: dict[str, str]) -> None:
    lat = latency(h200["gsm8k-max-num-seqs-256"])
    # the client's per-request TPOT beside vLLM's per-request histogram (n = requests) ...
    assert lat[("TPOT per request", "server")] == ["9.4 ms", "9.6 ms", "22.0 ms", "24.8 ms", "1,319"]
    assert lat[("TPOT per request", "client")] == ["9.0 ms", "9.1 ms", "13.3 ms", "18.3 ms", "1,171"]
    # ... and vLLM's per-token inter-token histogram (n = tokens) beside the client's chunk gaps
    assert lat[("ITL per token gap", "server")][-1] == "67,193"
    assert lat[("ITL per token gap", "client")][-1] == "43,383"
    assert lat[("TTFT", "server")][0] == "144 ms" and lat[("TTFT", "client")][0] == "218 ms"


def test_impossible_queue_percentiles_are_bounded(h200: dict[str, str]) -> None:
    """Stored by evalkit's even-spread estimate: mean 20 ms, p50 150 ms. No non-negative times have a median
    above twice their mean: shown as that bound."""
    queue = latency(h200["gsm8k-max-num-seqs-256"])[("Queue time", "server")]
    assert queue == ["20.0 ms", "≤ 40.1 ms", "≤ 200 ms", "297 ms", "1,319"]
    assert "150 ms" not in queue


@pytest.mark.parametrize(
    ("run", "needles"),
    [
        (
            "gsm8k-max-num-seqs-256",
            [
                "gsm8k: 148 of 1,319 (11.2%) answers were empty",
                "scored as wrong and counted in n, so the score cannot exceed the share of non-empty answers "
                "(at most 88.8%)",
                "gsm8k: 80 of 1,319 (6.1%) responses stopped at max_tokens (256 tokens)",
            ],
        ),
        (
            "aime25",
            [
                "aime25: 101 of 120 (84.2%) answers had no extractable answer",
                "the score measures the answer format as much as the math",
                "aime25: 17 of 120 (14.2%) responses stopped at max_tokens (1,024 tokens)",
            ],
        ),
    ],
)
def test_failure_modes_get_banners(h200: dict[str, str], run: str, needles: list[str]) -> None:
    banners = " ".join(text_of(b) for b in re.findall(r'<div class="banner warn">(.*?)</div>', h200[run], re.S))
    for needle in needles:
        assert needle in banners, needle


def test_proportions_get_wilson_intervals_and_denominators(h200: dict[str, str]) -> None:
    aime = text_of(h200["aime25"])
    assert "avg@4 0.0% Wilson 95% CI 0.0% – 11.4% · 0 of 120 samples (30 problems)" in aime
    assert "pass@1 0.0% Wilson 95% CI 0.0% – 11.4% · n=30 problems" in aime or "0 of 30 problems" in aime
    assert "0.0% – 0.0%" not in aime
    assert ["2025-I-1", "0", "4", "0", "0.0%", "0%–49%", ""] in table_rows(h200["aime25"])
    gsm = text_of(h200["gsm8k-max-num-seqs-256"])
    assert "exact_match · strict-match 1.4% Wilson 95% CI 0.9% – 2.2% · 19 of 1,319" in gsm


def test_aime_ttft_is_explained(h200: dict[str, str]) -> None:
    """Every AIME request waited ~6.95 s for its first token (p50 6,943 ms, p99 6,954 ms); vLLM's own TTFT
    (6.6 s mean) with 0.2 ms of queue time puts the wait inside the engine."""
    text = text_of(h200["aime25"])
    assert "TTFT p50 6,943 ms and p99 6,954 ms: the requests waited about the same 6.9 s" in text
    assert "TTFT 6,614 ms mean, 0.2 ms of it in its queue): the time went inside the engine" in text
    assert "Where TTFT went 6,671 ms mean = 0.2 ms in the server's queue + 6,613 ms in its engine" in text
    # the GSM8K runs had no such wait; their client TTFT counts only the 1,171 requests that returned text
    gsm = text_of(h200["gsm8k-max-num-seqs-256"])
    assert "waited about the same" not in gsm
    assert "client: 218 ms mean over the 1,171 requests that returned text, so the two are not subtracted" in gsm


def test_concurrency_used_and_its_trace(h200: dict[str, str]) -> None:
    assert "Concurrency 128 (asked: auto); limit 64 at 0.0 s, 128 at 0.5 s" in text_of(h200["aime25"])
    assert "Concurrency 64 (asked: auto)" in text_of(h200["gsm8k-max-num-seqs-256"])


def stalled_samples() -> list[dict[str, Any]]:
    """The AIME run's pattern: 64 requests sent at 0 s and 56 at 0.5 s; the first got its first token at 3.1 s,
    all others within 11 ms of 6.94 s (TTFTs read from the example report)."""
    rows = [{"start_s": 0.0, "ttft_ms": 3123.0, "e2e_ms": 8355.0, "output_tokens": 294}]
    for i in range(1, 120):
        start = 0.0 if i < 64 else 0.5
        first = 6.943 + (i % 12) / 1000
        rows.append(
            {
                "start_s": start,
                "ttft_ms": (first - start) * 1000,
                "e2e_ms": (first - start) * 1000 + 1500.0,
                "output_tokens": 340,
            }
        )
    return rows


def test_stall_from_the_samples() -> None:
    from evalkit.reporting.timecourse import first_token_stall

    stall = first_token_stall(stalled_samples())
    assert stall is not None
    assert stall.start_s == pytest.approx(3.123) and stall.end_s == pytest.approx(6.943)
    assert stall.waiting == 119 and stall.burst == 119 and len(stall.affected) == 119
    steady = [{"start_s": i * 0.01, "ttft_ms": 150.0 + i % 7, "e2e_ms": 900.0} for i in range(300)]
    assert first_token_stall(steady) is None


def test_stall_banner_in_the_report(tmp_path: Path) -> None:
    run = tmp_path / "aime25"
    shutil.copytree(H200 / "aime25", run)
    rows = stalled_samples()
    with (run / "samples.jsonl").open("w") as f:
        for i, r in enumerate(rows):
            f.write(
                json.dumps(
                    {
                        "task": "aime25",
                        "doc_id": i // 4,
                        "sample_index": i % 4,
                        "status": "no_answer",
                        "correct": {"boxed": False},
                        **r,
                    }
                )
                + "\n"
            )
    text = text_of(render_run_html(run))
    assert (
        "no request got its first token for 3.8 s (3.1–6.9 s into the run) while 119 waited; then 119 first "
        "tokens came within 100 ms. The TTFT of 119 requests includes this wait." in text
    )
    assert "TTFT of the 1 requests that did not wait through it: p50 3,123 ms" in text


def test_timeline() -> None:
    from evalkit.reporting.timecourse import timeline

    tl = timeline([{"start_s": 0.0, "ttft_ms": 1000.0, "e2e_ms": 3000.0, "output_tokens": 200}] * 2)
    assert sum(x * 0.1 for x in tl["tok_s"]) == pytest.approx(400)  # every token counted once
    assert max(tl["in_flight"]) == pytest.approx(2) and tl["t"][1] == pytest.approx(0.1)


def test_real_cpu_vllm_run() -> None:
    """A real store with samples: few-shot examples per document (lm-eval's gsm8k), gold answers after ####."""
    html = render_run_html(CPU)
    text = text_of(html)
    assert "gsm8k: 2 of 10 (20.0%) answers were empty" in text
    assert "the primary metric is 0.0% of the other 8 answers" in text
    assert "Wilson 95% CI 0.0% – 27.8% · 0 of 10" in text
    assert "GPU memory was not sampled" in text
    data = rf.sample_data(html)
    first = json.loads((CPU / "samples.jsonl").read_text().splitlines()[0])
    row = next(r for r in data["rows"] if r["d"] == str(first["doc_id"]))
    assert row["g"] == first["target"].rpartition("#### ")[2] == "260"
    assert len(row["fs"]) == 5  # the question is shown first, the 5 examples apart
    assert rf.text_of(data["texts"][row["q"]]).startswith("Question: ") and first["prompt"].endswith(
        rf.text_of(data["texts"][row["q"]])
    )
    ids = {c["id"] for c in json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))["charts"]}
    assert "timeline-gsm8k" in ids


def test_compare_shows_concurrency_and_colours() -> None:
    html = render_compare_html([H200 / "gsm8k-max-num-seqs-256", H200 / "gsm8k-max-num-seqs-64"])
    rows = [r for r in table_rows(html) if len(r) > 8 and r[1].startswith("gsm8k-max-num-seqs")]
    a, b = rows
    # --concurrency auto settled on 64 for A and stepped 64 -> 128 for B: B's TTFT is queueing at twice the load
    # (the runs table's last three columns: concurrency used, config (differs), Pareto; metrics and speed lead)
    assert a[-3] == "64" and b[-3] == "128 (64 at 0.0 s → 128 at 0.5 s)"
    assert "empty 148" in a[1] and "truncated 80" in a[1] and "empty 148" in b[1]
    assert "TTFT p99" in html and "TPOT p99" in html
    # B is slower: its throughput change and its TTFT changes are red, not grey
    assert '<div class="d worse">-40.6%</div>' in html  # output tok/s 4,508 -> 2,678
    assert re.search(r'<div class="d worse">\+536\.0%</div>', html)  # TTFT p50 207 ms -> 1,318 ms
