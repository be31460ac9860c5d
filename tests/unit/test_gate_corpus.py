"""The gate's corpus rule (evalkit/gating/corpus.py) on synthetic per-document (loglikelihood, length) pairs:
identical runs pass, a known 5% perplexity (or bits-per-byte) increase over enough documents fails, a small one
within the budget passes, too few documents or documents of another length cannot decide, the policy's
``max_increase`` and ``enabled`` apply, several baseline runs are pooled, and a summary's ``detail.doc_pairs``
is read (malformed entries noted, not compared)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.gating import CorpusMetric, evaluate, policy_from_dict
from evalkit.gating.corpus import MIN_CORPUS_DOCS
from evalkit.gating.engine import combine_runs
from evalkit.gating.inputs import Identity, RunInputs, SpeedRecords, StatusCounts, TaskInputs
from evalkit.gating.per_doc import per_doc_inputs
from evalkit.gating.stats import corpus_change

TASK = "wikitext"
WPPL = "word_perplexity,none"
BPB = "bits_per_byte,none"


def _docs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per document: loglikelihood (nats), words and bytes, of unequal lengths and per-token difficulty."""
    rng = np.random.default_rng(seed)
    words = rng.integers(50, 800, n).astype(float)
    nll_per_word = rng.uniform(2.5, 4.0, n)
    return -nll_per_word * words, words, words * 5.5


def _task(ll: np.ndarray, words: np.ndarray, nbytes: np.ndarray, docs: list[int] | None = None) -> TaskInputs:
    ids = docs if docs is not None else list(range(len(ll)))
    by_words = {d: (float(ll[i]), float(words[i])) for i, d in enumerate(ids)}
    by_bytes = {d: (float(ll[i]), float(nbytes[i])) for i, d in enumerate(ids)}
    corpus = {
        WPPL: CorpusMetric(WPPL, "weighted_perplexity", by_words),
        BPB: CorpusMetric(BPB, "bits_per_byte", by_bytes),
    }
    return TaskInputs(
        name=TASK,
        identity=Identity(version="1"),
        metrics={},
        speed=SpeedRecords(),
        counts=StatusCounts(total=len(ids), ok=len(ids)),
        asked_docs=frozenset(ids),
        scored_docs=frozenset(ids),
        corpus=corpus,
    )


def _run(label: str, task: TaskInputs) -> RunInputs:
    return RunInputs(label=label, tasks={TASK: task})


def _rules(result: object) -> dict[str, object]:
    return {r.name: r for r in result.rules if r.kind == "perplexity"}  # type: ignore[attr-defined]


QUIET = {"speed": {"output_tokens_per_s": None, "ttft_p50_ms": None, "tpot_p50_ms": None}}


def test_identical_runs_pass_with_a_zero_change() -> None:
    ll, w, b = _docs(60)
    result = evaluate(_run("a", _task(ll, w, b)), _run("b", _task(ll, w, b)), policy_from_dict(QUIET))
    assert result.verdict == "pass", result
    rules = _rules(result)
    assert set(rules) == {f"{TASK}: {WPPL} change", f"{TASK}: {BPB} change"}
    for r in rules.values():
        assert r.verdict == "pass" and r.observed == 0.0 and r.ci == (0.0, 0.0) and r.p_value > 0.9  # type: ignore[attr-defined]
        assert r.budget == 0.01  # type: ignore[attr-defined]


def test_a_five_percent_perplexity_increase_over_enough_documents_fails() -> None:
    ll, w, b = _docs(60)
    rng = np.random.default_rng(1)
    # each document loses log(1.05) nats per word, give or take per-document noise
    worse = ll - w * (math.log(1.05) + rng.normal(0.0, 0.01, len(ll)))
    result = evaluate(_run("a", _task(ll, w, b)), _run("b", _task(worse, w, b)), policy_from_dict(QUIET))
    assert result.verdict == "fail", result
    r = _rules(result)[f"{TASK}: {WPPL} change"]
    base_ppl = math.exp(-ll.sum() / w.sum())
    assert r.baseline == pytest.approx(base_ppl) and r.candidate == pytest.approx(math.exp(-worse.sum() / w.sum()))  # type: ignore[attr-defined]
    assert r.verdict == "fail" and r.observed == pytest.approx(0.05, abs=0.005)  # type: ignore[attr-defined]
    assert r.ci[0] > 0.01 and r.p_value < 0.05  # type: ignore[attr-defined]
    # bits per byte rises by the same nats over a larger loss: ~1.3% here, beyond the 1% budget
    bpb = _rules(result)[f"{TASK}: {BPB} change"]
    expected = (worse.sum() / ll.sum()) - 1
    assert bpb.observed == pytest.approx(expected) and bpb.verdict == "fail"  # type: ignore[attr-defined]


def test_an_increase_within_the_budget_passes_and_the_budget_is_the_policys() -> None:
    ll, w, b = _docs(60)
    worse = ll - w * math.log(1.005)  # 0.5% perplexity
    base, cand = _run("a", _task(ll, w, b)), _run("b", _task(worse, w, b))
    r = _rules(evaluate(base, cand, policy_from_dict(QUIET)))[f"{TASK}: {WPPL} change"]
    assert r.verdict == "pass" and r.observed == pytest.approx(0.005)  # type: ignore[attr-defined]
    strict = {**QUIET, "accuracy": {"tasks": {TASK: {WPPL: {"max_increase": 0.001}}}}}
    result = evaluate(base, cand, policy_from_dict(strict))
    assert _rules(result)[f"{TASK}: {WPPL} change"].verdict == "fail"  # type: ignore[attr-defined]
    off = {**QUIET, "accuracy": {"tasks": {TASK: {WPPL: {"enabled": False}, BPB: {"enabled": False}}}}}
    result = evaluate(base, _run("b", _task(ll - w, w, b)), policy_from_dict(off))
    assert {r.verdict for r in _rules(result).values()} == {"skip"}  # type: ignore[attr-defined]


def test_too_few_documents_cannot_decide_with_the_reason() -> None:
    n = MIN_CORPUS_DOCS - 1
    ll, w, b = _docs(n)
    result = evaluate(_run("a", _task(ll, w, b)), _run("b", _task(ll - w, w, b)), policy_from_dict(QUIET))
    assert result.verdict == "cannot_decide", result
    assert any(f"scored on {n} documents in both runs, fewer than the {MIN_CORPUS_DOCS}" in x for x in result.reasons)
    # documents scored on one side only do not count: 30 each, 15 in common
    ll, w, b = _docs(30)
    base = _task(ll, w, b, list(range(30)))
    cand = _task(ll, w, b, list(range(15, 45)))
    result = evaluate(_run("a", base), _run("b", cand), policy_from_dict({**QUIET, "min_coverage": 0.0}))
    assert result.verdict == "cannot_decide"
    assert any("scored on 15 documents in both runs" in x for x in result.reasons), result.reasons


def test_a_document_of_another_length_cannot_decide() -> None:
    ll, w, b = _docs(30)
    w2 = w.copy()
    w2[4] += 1
    result = evaluate(_run("a", _task(ll, w, b)), _run("b", _task(ll, w2, b)), policy_from_dict(QUIET))
    assert result.verdict == "cannot_decide"
    assert any("another length in the candidate (first: doc 4)" in x for x in result.reasons), result.reasons


def test_several_baseline_runs_are_pooled_per_document() -> None:
    ll, w, b = _docs(40)
    runs = [_run("a1", _task(ll, w, b)), _run("a2", _task(ll - 0.02 * w, w, b))]
    pooled = combine_runs("base", runs).tasks[TASK].corpus[WPPL]
    assert pooled.items[0] == pytest.approx((ll[0] - 0.01 * w[0], w[0]))
    result = evaluate(combine_runs("base", runs), _run("c", _task(ll, w, b)), policy_from_dict(QUIET))
    assert _rules(result)[f"{TASK}: {WPPL} change"].verdict == "pass"  # type: ignore[attr-defined]


def test_corpus_change_is_lm_evals_aggregation() -> None:
    ll, w, b = _docs(10)
    worse = ll * 1.1
    ppl = corpus_change(ll, w, worse, w, "weighted_perplexity")
    assert ppl == pytest.approx(math.exp(-worse.sum() / w.sum()) / math.exp(-ll.sum() / w.sum()) - 1)
    bpb = corpus_change(ll, b, worse, b, "bits_per_byte")
    assert bpb == pytest.approx((-worse.sum() / b.sum() / math.log(2)) / (-ll.sum() / b.sum() / math.log(2)) - 1)


def test_a_summarys_doc_pairs_are_read_and_malformed_ones_noted() -> None:
    detail = {
        "doc_scores": {},
        "doc_pairs": {
            WPPL: {"aggregation": "weighted_perplexity", "docs": {"0": [-10.5, 3], "1": [-4.0, 2]}},
            BPB: {"aggregation": "bits_per_byte", "docs": {"0": [-10.5, "x"]}},
            "other,none": {"aggregation": "mean", "docs": {"0": [-1.0, 1]}},
        },
        "not_gated": {},
    }
    inputs = per_doc_inputs(TASK, detail, [{"doc_id": 0}, {"doc_id": 1}], 2)
    assert inputs is not None and set(inputs.corpus) == {WPPL} and inputs.scored == frozenset({0, 1})
    assert inputs.corpus[WPPL].items == {0: (-10.5, 3.0), 1: (-4.0, 2.0)}
    assert inputs.corpus[WPPL].value == pytest.approx(math.exp(14.5 / 5))
    assert {w for w, _ in inputs.ignored} == {f"detail.doc_pairs.{BPB}", "detail.doc_pairs.other,none"}


def test_a_watch_window_keeps_each_documents_latest_pair() -> None:
    from evalkit.watch.window import merge

    ll, w, b = _docs(30)
    first, second = (
        _task(ll[:20], w[:20], b[:20], list(range(20))),
        _task(ll[10:] - 1, w[10:], b[10:], list(range(10, 30))),
    )
    window = merge("window", TASK, [first, second]).tasks[TASK]
    assert set(window.corpus[WPPL].items) == set(range(30)) == window.scored()
    assert (
        window.corpus[WPPL].items[12] == (float(ll[12] - 1), float(w[12])) and window.corpus[BPB].items[0][0] == ll[0]
    )


def test_a_sweep_recommendation_counts_a_perplexity_fail_as_a_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path
    from types import SimpleNamespace

    import evalkit.gating as gating
    from evalkit.sweep.recommend import Candidate, _accuracy_loss

    ll, w, b = _docs(60)
    runs = {"ref": _run("ref", _task(ll, w, b)), "worse": _run("worse", _task(ll - w * math.log(1.05), w, b))}
    monkeypatch.setattr(gating, "from_run_dir", lambda p: runs[Path(p).name])

    def cand(name: str) -> Candidate:
        return Candidate(SimpleNamespace(config=name, name=name), {}, Path(name))  # type: ignore[arg-type]

    loss = _accuracy_loss(cand("worse"), cand("ref"), "ref")
    assert loss is not None and loss.startswith(f"accuracy: {TASK}: ") and "change is worse than ref's" in loss
