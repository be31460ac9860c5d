"""What the run and comparison pages print in words rather than as records (issue 49, item 6): the max_tokens
clamp as a sentence, settings left to their default as "not set" (not ``null``), "× 1 GPU"."""

from __future__ import annotations

import html as html_text
import json
from pathlib import Path

from evalkit.reporting import render_compare_html, render_run_html
from evalkit.reporting.formatting import clamp_text
from tests.report_fixtures import build_gsm8k_run

CLAMP = {
    "max_model_len": 4096,
    "requested_max_tokens": 4096,
    "requests_clamped": 12,
    "lowest_max_tokens": 1830,
    "prompt_length_from": "tokenize",
}


def test_the_clamp_is_a_sentence(tmp_path: Path) -> None:
    run = build_gsm8k_run(tmp_path / "run", n=40)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["tasks"]["gsm8k"]["max_tokens_clamp"] = CLAMP
    (run / "manifest.json").write_text(json.dumps(manifest))
    html = html_text.unescape(render_run_html(run))
    said = (
        "max_tokens was lowered for 12 requests, from 4096 to as low as 1830, so that prompt and answer fit the "
        "server's max_model_len of 4096 (prompt lengths from tokenize)"
    )
    assert said in html and said == clamp_text(CLAMP).split(";")[0]
    assert "requests_clamped" not in html  # was the record as JSON, in a banner


def test_settings_left_to_their_default_say_not_set(tmp_path: Path) -> None:
    a = build_gsm8k_run(tmp_path / "a", n=40)  # limit, top_p and chat_template_kwargs are None
    html = render_run_html(a)
    assert ">null<" not in html and ">not set<" in html
    b = build_gsm8k_run(tmp_path / "b", n=40, temperature=0.6)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["tasks"]["gsm8k"]["settings"]["top_p"] = 0.95
    (b / "manifest.json").write_text(json.dumps(manifest))
    page = render_compare_html([a, b])
    assert "</b>=null<" not in page and "<b>gsm8k.top_p</b>=not set" in page


def test_one_gpu_is_one_gpu(tmp_path: Path) -> None:
    run = build_gsm8k_run(tmp_path / "run", n=40)
    summary = json.loads((run / "summary.json").read_text())
    summary["tasks"]["gsm8k"]["speed"].update(cost_per_million_output_tokens=1.5, gpus_billed=1)
    (run / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["pricing"] = {"cost_per_gpu_hour": 2.5, "gpus": 1}
    (run / "manifest.json").write_text(json.dumps(manifest))
    html = render_run_html(run)
    assert "$2.5/GPU-hour × 1 GPU" in html and "× 1 GPUs" not in html
