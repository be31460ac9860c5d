"""Parity: lm-eval's own local-completions and `evalkit run gsm8k` on the same server agree exactly."""

import json

import pytest

from evalkit.config import load_config
from evalkit.runner import Runner
from tests.parity import evalkit_per_doc, per_doc, run_lm_eval

LIMIT = 30


@pytest.mark.slow
def test_gsm8k_parity_with_lm_eval_local_completions(tmp_path, test_server):
    ref = run_lm_eval(test_server.url, "test-model", LIMIT)
    cfg = load_config(
        {
            "tasks": ["gsm8k"],
            "endpoint": test_server.url,
            "limit": LIMIT,
            "concurrency": "1",
            "output_dir": tmp_path / "run",
            "report": False,
        }
    )
    Runner(cfg).run()
    theirs, ours = per_doc(ref), evalkit_per_doc(tmp_path / "run")
    assert sorted(theirs) == sorted(ours) == list(range(LIMIT))
    for doc_id in theirs:
        assert ours[doc_id]["prompt"] == theirs[doc_id]["prompt"], doc_id
        assert ours[doc_id]["response"] == theirs[doc_id]["response"], doc_id
        assert ours[doc_id]["filtered"] == theirs[doc_id]["filtered"], doc_id
        assert ours[doc_id]["metrics"] == theirs[doc_id]["metrics"], doc_id
    summary = json.loads((tmp_path / "run/summary.json").read_text())["tasks"]["gsm8k"]["metrics"]
    res = ref["results"]["gsm8k"]
    for f in ("strict-match", "flexible-extract"):
        assert summary[f"exact_match,{f}"]["value"] == res[f"exact_match,{f}"]
        assert summary[f"exact_match,{f}"]["stderr"] == pytest.approx(res[f"exact_match_stderr,{f}"], rel=1e-12)
    # the test server answers some right and some wrong on purpose, so the comparison is not vacuous
    assert 0 < summary["exact_match,strict-match"]["value"] < 1
    # both clients sent the same request bodies (prompt, stop, max_tokens, temperature, seed)
    bodies = [r["body"] for r in test_server.requests]
    lm_eval_bodies = {b["prompt"]: b for b in bodies if not b.get("stream")}
    evalkit_bodies = {b["prompt"]: b for b in bodies if b.get("stream")}
    assert lm_eval_bodies.keys() == evalkit_bodies.keys()
    for prompt, b in lm_eval_bodies.items():
        e = evalkit_bodies[prompt]
        for k in ("stop", "max_tokens", "temperature", "seed", "model"):
            assert e[k] == b[k], k


@pytest.mark.slow
def test_evalkit_lm_class_under_lm_evals_own_evaluator(test_server):
    """lm-eval's evaluator driving evalkit's LM class gives the same results as local-completions."""
    from evalkit.client.lm_eval_model import EvalkitLM

    ref = run_lm_eval(test_server.url, "test-model", 10)
    timings = []
    lm = EvalkitLM(base_url=test_server.url, num_concurrent=4, on_result=lambda inst, resp: timings.append(resp))
    mine = run_lm_eval(test_server.url, "test-model", 10, lm=lm)
    assert per_doc(mine) == per_doc(ref)
    assert mine["results"]["gsm8k"]["exact_match,strict-match"] == ref["results"]["gsm8k"]["exact_match,strict-match"]
    assert len(timings) == 10 and all(t.ttft_ms is not None for t in timings)


def test_importing_evalkit_lm_keeps_lm_evals_own_models() -> None:
    """lm-eval loads its built-in models only while its registry is empty: registering ``evalkit`` first must not
    hide ``local-completions`` and the others (a fresh interpreter, so no earlier import fills the registry)."""
    import subprocess
    import sys

    code = (
        "import evalkit.client.lm_eval_model; from lm_eval.api.registry import get_model; "
        "print(get_model('local-completions'))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-500:]
    assert "LocalCompletionsAPI" in res.stdout
