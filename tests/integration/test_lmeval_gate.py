"""The gate on lm-eval loglikelihood tasks (records per request, lm-eval's per-document scores in the summary's
``detail.doc_scores``): a multiple-choice task run end to end on the test server (``echo`` with ``logprobs``) and
gated (the same server twice passes, a server whose logits are perturbed enough to flip choices fails, another
task version exits 2), and a loglikelihood_rolling task's perplexities named as not judged (cannot decide)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.contracts import SampleRecord
from evalkit.gating import evaluate, from_run_dir
from evalkit.testing.answers import TOKEN_RE
from evalkit.testing.scored import Perturbation, scored_fields, token_id
from tests.lmeval_tasks import METRICS_MC, PAGES, write_tasks

TASK = "lm-eval:gate_mc"
WORDS = ["red", "blue", "green", "black", "white", "small", "large", "old", "new", "fast", "slow", "warm"]
THINGS = ["apple", "car", "house", "river", "stone", "bird", "tree", "road", "cloud", "ship", "lamp", "door"]


@pytest.fixture(autouse=True)
def _cache(lm_eval_cache: Path) -> None:
    """Each test its own evalkit cache (tests/conftest.py)."""


def _loglikelihood(context: str, continuation: str) -> float:
    """The clean test server's loglikelihood of ``continuation`` after ``context``, as lm-eval reads its answer."""
    ctx = [token_id(p) for p in TOKEN_RE.findall(context)]
    ids = [token_id(p) for p in TOKEN_RE.findall(context + continuation)]
    body = {"prompt": ids, "echo": True, "logprobs": 1, "max_tokens": 1}
    answer = scored_fields(body, False, Perturbation(), 1)
    assert answer is not None
    return float(sum(answer["logprobs"]["token_logprobs"][len(ctx) : -1]))


def test_the_test_server_answers_echo_with_logprobs_in_vllms_shape(test_server: object) -> None:
    """The same request as the recorded vLLM answer (tests/data/lmeval/vllm_echo_answer.json): the same fields,
    positions over the prompt and the generated token, the first one's logprob null."""
    import urllib.request

    rec = json.loads((Path(__file__).parents[1] / "data" / "lmeval" / "vllm_echo_answer.json").read_text())
    body = {**rec["request"], "model": None}
    req = urllib.request.Request(test_server.url + "/completions", data=json.dumps(body).encode(),  # type: ignore[attr-defined]
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req) as r:
        ours = json.loads(r.read())["choices"][0]
    theirs = rec["answer"]["choices"][0]
    assert set(theirs) - {"routed_experts"} <= set(ours)
    assert set(ours["logprobs"]) == set(theirs["logprobs"])
    n = len(rec["request"]["prompt"]) + 1
    assert all(len(ours["logprobs"][k]) == n for k in ours["logprobs"])
    assert ours["logprobs"]["token_logprobs"][0] is None and ours["logprobs"]["top_logprobs"][0] is None
    assert ours["prompt_token_ids"] == rec["request"]["prompt"] and len(ours["token_ids"]) == 1
    for lp, top in zip(ours["logprobs"]["token_logprobs"][1:], ours["logprobs"]["top_logprobs"][1:], strict=True):
        assert lp in top.values() and 1 <= len(top) <= 2  # the token's own and the top-1 (one entry when it is)


def write_gate_mc(folder: Path, docs: int = 40, version: str = "1.0") -> Path:
    """A multiple-choice task of two-word choices whose gold choice is the one the clean test server prefers (so
    that its accuracy is 100% and a perturbed server's is lower)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for d in range(docs):
        choices = [f"{WORDS[(d + 3 * i) % len(WORDS)]} {THINGS[(5 * d + i) % len(THINGS)]}" for i in range(4)]
        question = f"Item {d}: which pair?"
        context = f"Question: {question}\nAnswer:"
        label = max(range(4), key=lambda i: _loglikelihood(context, " " + choices[i]))
        rows.append({"question": question, "choices": choices, "label": label})
    (folder / "gate.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "gate_mc.yaml").write_text(
        f"task: gate_mc\ndataset_path: json\ntest_split: test\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'gate.jsonl'}\noutput_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_target: label\ndoc_to_choice: "{{choices}}"\n'
        f"{METRICS_MC}metadata:\n  version: {version}\n"
    )
    return folder


def _run(url: str, folder: Path, out: Path) -> None:
    args = ["run", TASK, "--include-path", str(folder), "--endpoint", url, "-o", str(out), "-q"]
    res = CliRunner().invoke(app, [*args, "--concurrency", "4", "--no-warmup", "--no-report"])
    assert res.exit_code == 0, res.output


def _gate(base: Path, cand: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = cand / "gate"
    res = CliRunner().invoke(app, ["gate", "-b", str(base), "-c", str(cand), "-o", str(out)])
    print(res.output)
    data = json.loads((out / "gate.json").read_text()) if (out / "gate.json").is_file() else {}
    return res.exit_code, data


def _accuracy(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {r["name"]: r["verdict"] for r in data["rules"] if r["kind"] == "accuracy"}


def test_a_multiple_choice_task_on_the_test_server_passes_or_fails_the_gate(tmp_path: Path) -> None:
    from evalkit.testing.server import Behaviour, TestServer

    folder = write_gate_mc(tmp_path / "tasks")
    # each answer takes 50 ms on the server, so a run's speed is the server's, not this machine's load: unpaced,
    # an identical rerun's requests/s moved by up to 36% on a busy 2-core box (beyond the one-run noise budget)
    with TestServer(Behaviour(ttft_s=0.05)) as srv:
        _run(srv.url, folder, tmp_path / "base")
        _run(srv.url, folder, tmp_path / "again")
        srv.state.behaviour.update(logit_noise=3.0, logit_noise_seed=11)  # logits that flip choices
        _run(srv.url, folder, tmp_path / "flipped")
    summary = json.loads((tmp_path / "base" / "summary.json").read_text())["tasks"][TASK]
    assert summary["metrics"]["acc,none"]["value"] == 1.0 and summary["counts"]["total"] == 160
    assert summary["detail"]["doc_scores"]["acc,none"] == {str(d): 1 for d in range(40)}
    from evalkit.reporting.run_tables import detail_view

    shown = detail_view(summary["detail"])  # the report's task details leave the per-document scores out
    assert "doc_scores" not in {kv.key for kv in [*shown.scalars, *shown.nested]}
    base = from_run_dir(tmp_path / "base").tasks[TASK]
    assert base.asked_docs == base.scored_docs == frozenset(range(40))  # documents, not requests
    import shutil

    shutil.copytree(tmp_path / "base", tmp_path / "edited")  # one document's third choice edited
    records = [json.loads(x) for x in (tmp_path / "base" / "samples.jsonl").read_bytes().splitlines()]
    edited = next(r for r in records if r["doc_id"] == 3 and r["sample_index"] == 2)
    edited["prompt"] += "!"
    (tmp_path / "edited" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _ = _gate(tmp_path / "base", tmp_path / "edited")
    assert code == 2  # the prompts differ on document 3: not comparable
    code, data = _gate(tmp_path / "base", tmp_path / "again")
    assert code == 0 and data["verdict"] == "pass" and not data["reasons"], data
    assert _accuracy(data) == {f"{TASK}: acc,none": "pass", f"{TASK}: acc_norm,none": "pass"}
    flipped = json.loads((tmp_path / "flipped" / "summary.json").read_text())["tasks"][TASK]
    assert flipped["metrics"]["acc,none"]["value"] < 0.7
    code, data = _gate(tmp_path / "base", tmp_path / "flipped")
    assert code == 1 and data["verdict"] == "fail", data
    assert _accuracy(data)[f"{TASK}: acc,none"] == "fail"


def test_the_gate_refuses_another_version_of_a_multiple_choice_task(tmp_path: Path) -> None:
    from evalkit.testing.server import TestServer

    with TestServer() as srv:
        _run(srv.url, write_gate_mc(tmp_path / "v1", docs=8), tmp_path / "a")
        _run(srv.url, write_gate_mc(tmp_path / "v2", docs=8, version="2.0"), tmp_path / "b")
    code, _ = _gate(tmp_path / "a", tmp_path / "b")
    assert code == 2


def _rolling(doc: int, ll: float) -> SampleRecord:
    extracted = {"loglikelihood": repr(ll), "is_greedy": "0", "idx": "0"}
    return SampleRecord(key=f"{doc}-0", task="lm-eval:tiny_roll", doc_id=doc, sample_index=0, prompt="",
                        status="ok", extracted=extracted)  # type: ignore[arg-type]  # fmt: skip


def test_a_rolling_tasks_per_document_pairs_are_recorded_and_other_metrics_named_as_not_judged(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from evalkit.gating.per_doc import per_doc_inputs
    from evalkit.tasks.lmeval_source import expand_lm_eval_tasks
    from evalkit.tasks.registry import Registry

    tasks, generated = expand_lm_eval_tasks(["lm-eval:tiny_roll"], [write_tasks(tmp_path / "t")])
    assert generated is not None
    task = Registry([generated]).get(tasks[0])
    metrics, detail = task.summarize([_rolling(d, -10.0 - d) for d in range(4)])
    assert detail["doc_scores"] == {} and detail["not_gated"] == {} and set(detail["doc_pairs"]) == set(metrics)
    words = [len(re.split(r"\s+", p)) for p in PAGES]  # lm-eval's word count of each page
    assert detail["doc_pairs"]["word_perplexity,none"] == {
        "aggregation": "weighted_perplexity",
        "docs": {str(d): [-10.0 - d, float(words[d])] for d in range(4)},
    }
    nbytes = [float(len(p.encode())) for p in PAGES]
    assert detail["doc_pairs"]["bits_per_byte,none"]["aggregation"] == "bits_per_byte"
    assert [v[1] for v in detail["doc_pairs"]["byte_perplexity,none"]["docs"].values()] == nbytes
    samples = [{"doc_id": d} for d in range(4)]
    inputs = per_doc_inputs(tasks[0], detail, samples, 4)
    assert inputs is not None and inputs.asked == inputs.scored == frozenset(range(4)) and not inputs.metrics
    for name, m in inputs.corpus.items():  # the gate's corpus value is lm-eval's aggregate
        assert m.value == pytest.approx(metrics[name].value)
    # a cut samples file, and a malformed score, are said
    cut = per_doc_inputs(tasks[0], {"doc_scores": {"acc,none": {"0": 2}}}, samples[:3], 4)
    assert cut is not None and cut.problems and cut.ignored and not cut.metrics
    # a metric with neither 0/1 scores nor pairs: the gate cannot decide on it, with the reason
    mc = from_run_dir(_gated_run(tmp_path))
    why = {"f1,none": "its per-document values are neither 0/1 scores nor (loglikelihood, length) pairs"}
    side = replace(mc, tasks={"roll": replace(mc.tasks[TASK], name="roll", metrics={}, not_gated=why)})
    result = evaluate(side, side)
    assert result.verdict == "cannot_decide"
    assert any("metric f1,none is not judged by the gate" in r for r in result.reasons)


def _gated_run(tmp_path: Path) -> Path:
    from evalkit.testing.server import TestServer

    with TestServer() as srv:
        _run(srv.url, write_gate_mc(tmp_path / "mc", docs=4), tmp_path / "run")
    return tmp_path / "run"


def test_a_watch_rotates_through_a_multiple_choice_tasks_documents(tmp_path: Path) -> None:
    """Each tick sends every choice of its documents; the window is judged by lm-eval's per-document scores: a
    pass on the same server, a fail once its logits flip choices."""
    from evalkit.testing.server import TestServer
    from evalkit.watch import Watch, read_history
    from tests.integration.test_watch import settings

    folder = write_gate_mc(tmp_path / "tasks")
    run = {"include_path": [folder]}
    with TestServer() as srv:
        _run(srv.url, folder, tmp_path / "base")
        kw = dict(task=TASK, per_tick=20, window=2, ticks=2, baseline=tmp_path / "base", run=run)
        args = ["watch", "--endpoint", srv.url, "--task", TASK, "--every", "0.05s", "--per-tick", "20", "--window",
                "2", "--ticks", "2", "--baseline", str(tmp_path / "base"), "--include-path", str(folder),
                "--request-rate", "1000", "--concurrency", "4"]  # fmt: skip
        res = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "same")])
        assert res.exit_code == 0, res.output
        history = read_history(tmp_path / "same")
        srv.state.behaviour.update(logit_noise=3.0, logit_noise_seed=11)
        flipped = Watch(settings(srv.url, tmp_path / "flipped", **kw)).run()  # type: ignore[arg-type]
    for rec in history:
        assert rec.status == "ok", rec.error
        lines = (tmp_path / "same" / rec.dir / "samples.jsonl").read_bytes().splitlines()
        assert rec.status == "ok" and len(rec.docs) == 20 and len(lines) == 80 == rec.counts["total"]
    assert history[-1].verdict == "pass", history[-1]
    assert flipped[-1].verdict == "fail", flipped[-1]
