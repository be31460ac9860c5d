"""HTML reports from stored runs: size bounds, escaping of hostile model output, tolerance of missing keys,
self-containment (no external resources, CSP hashes match), Pareto front and flips."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from evalkit.reporting import compute_flips, html, pareto_front, render_compare, render_run, render_run_html
from evalkit.reporting.analysis import (
    accuracy_by_length,
    cdf_points,
    cut_text,
    fit_limit,
    primary_correct,
)
from evalkit.reporting.provenance import endpoint_host, parse_argv

try:
    from tests import report_fixtures as rf
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    import report_fixtures as rf  # type: ignore[no-redef]

MB = 1_000_000
sample_data, text_of = rf.sample_data, rf.text_of


@pytest.fixture(autouse=True)
def strict_templates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undefined template variables are errors in tests (a view-model bug, not a missing store key)."""
    monkeypatch.setattr(html, "STRICT_UNDEFINED", True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    return {
        "gsm8k": rf.build_gsm8k_run(base / "gsm8k-base"),
        "gsm8k_hostile": rf.build_gsm8k_run(base / "gsm8k-hostile", hostile=True),
        "gsm8k_fast": rf.build_gsm8k_run(
            base / "gsm8k-fp8",
            seed=1,
            accuracy=0.74,
            speed=1.5,
            server_argv=["vllm", "serve", "Qwen/Qwen3-8B", "--quantization", "fp8", "--max-num-seqs", "256"],
        ),
        "gsm8k_worse": rf.build_gsm8k_run(base / "gsm8k-bad", seed=2, accuracy=0.6, speed=0.9, client_bound=True),
        "aime": rf.build_aime_run(base / "aime"),
        "aime_hostile": rf.build_aime_run(base / "aime-hostile", hostile=True, seed=4),
        "minimal": rf.build_minimal_run(base / "minimal"),
    }


# ------------------------------------------------------------------------------------------------------------
# Structure helpers


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self._in: tuple[str, dict[str, str | None]] | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = (tag, dict(attrs))
            self._buf = []

    def handle_endtag(self, tag: str) -> None:
        if self._in is not None and tag == self._in[0]:
            text = "".join(self._buf)
            if tag == "script":
                self.scripts.append((self._in[1], text))
            else:
                self.styles.append(text)
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self._buf.append(data)


def parse(text: str) -> Tags:
    t = Tags()
    t.feed(text)
    t.close()
    return t


def raw_inline_blocks(text: str, tag: str) -> list[str]:
    """Exact source text between <tag ...> and </tag> (what a CSP hash covers)."""
    return re.findall(rf"<{tag}(?: [^>]*)?>(.*?)</{tag}>", text, flags=re.DOTALL)


def assert_self_contained(text: str) -> None:
    t = parse(text)
    names = [tag for tag, _ in t.tags]
    for forbidden in (
        "link",
        "img",
        "iframe",
        "object",
        "embed",
        "base",
        "video",
        "audio",
        "source",
        "frame",
    ):
        assert forbidden not in names, f"<{forbidden}> in report"
    for tag, attrs in t.tags:
        for k, v in attrs.items():
            assert not k.startswith("on"), f"event handler attribute {k} on <{tag}>"
            assert k != "style", f"style attribute on <{tag}> (blocked by the CSP)"
            if k in ("src", "srcset", "action", "formaction", "poster", "data"):
                raise AssertionError(f"<{tag} {k}={v!r}> loads something")
            if k == "href":
                assert v is not None and v.startswith("#"), f"<{tag} href={v!r}> leaves the page"
    # exactly our scripts: the sample list (gzip'd JSON in base64, not executed) when the run has samples, the
    # chart data (not executed), Chart.js, report.js
    kinds = [attrs.get("type") for attrs, _ in t.scripts]
    assert kinds in (["application/json", None, None], ["application/gzip", "application/json", None, None]), kinds
    for attrs, body in t.scripts:
        if attrs.get("type") == "application/gzip":
            assert re.fullmatch(r"[A-Za-z0-9+/=]*", body), "the sample data is not plain base64"
    assert all("src" not in attrs for attrs, _ in t.scripts)
    # the CSP allows exactly the inline blocks that are there
    csp = next(
        attrs["content"]
        for tag, attrs in t.tags
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp is not None
    assert "default-src 'none'" in csp and "unsafe-eval" not in csp and "unsafe-inline" not in csp
    blocks = raw_inline_blocks(text, "script")
    executed = [b for (attrs, _), b in zip(t.scripts, blocks, strict=True) if attrs.get("type") is None]
    for block in executed + raw_inline_blocks(text, "style"):
        digest = base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp
    # the CSP meta comes before any script or style
    assert text.index("Content-Security-Policy") < text.index("<style") < text.index("<script")
    assert "sourceMappingURL" not in text


def report_data(text: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.DOTALL)
    assert m
    data = json.loads(m.group(1))
    assert isinstance(data, dict)
    return data


# ------------------------------------------------------------------------------------------------------------
# Single-run report


def test_gsm8k_report_size_and_content(runs: dict[str, Path]) -> None:
    out = render_run(runs["gsm8k"])
    assert out == runs["gsm8k"] / "report.html"
    size = out.stat().st_size
    assert size < 1.5 * MB, size
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    # headline: both metrics with a Wilson CI and the denominator, speed cards
    for needle in (
        "exact_match · strict-match",
        "exact_match · flexible-extract",
        "Wilson 95% CI",
        "of 1,314",
        "Output tok/s",
        "Requests/s",
        "TTFT p50",
        "TPOT p50",
    ):
        assert needle in text, needle
    # warnings for api_error and truncated, but not client-bound
    assert "5 of 1,319 (0.4%) requests failed after retries (api_error)" in text
    assert "responses stopped at max_tokens" not in text  # 7 of 1,319: under the 1% that gets a banner
    assert "client was the bottleneck" not in text
    # provenance
    for needle in (
        "Qwen/Qwen3-8B",
        "http://gpu-box:8000/v1",
        "--max-num-seqs 256",
        "VLLM_USE_V1=1",
        "a" * 64,
        "NVIDIA H200",
        "0.11.0",
        "2025-06-01T10:00:00+00:00",
        "temperature",
    ):
        assert needle in text, needle
    # server + GPU
    assert "Prefix-cache hit rate" in text and "121,345" in text
    # every sample is a row of the data; the few-shot examples are stored once, the question per row
    data = sample_data(text)
    assert len(data["rows"]) == 1319 and data["tasks"] == ["gsm8k"]
    assert sum(text_of(t).count("Question: Example 1:") for t in data["fewshot"]) == 1
    row = data["rows"][0]
    assert text_of(data["texts"][row["q"]]).startswith("Question: Doc 0:") and len(row["fs"]) >= 5
    assert row["g"] == text_of(data["texts"][row["tg"]]).rpartition("#### ")[2]  # the gold answer, not the solution
    # charts: CDFs, throughput over time and accuracy by length, from samples
    ids = {c["id"] for c in report_data(text)["charts"]}
    assert {"cdf-ttft_ms", "cdf-tpot_ms", "cdf-e2e_ms", "acc-length", "timeline-gsm8k"} <= ids
    for cid in ids:
        assert f'data-chart="{cid}"' in text
    # no per-sample ITL lists
    assert "itl_ms" not in text and "itl_ms" not in json.dumps(data)


def test_aime_report_size_and_cut(runs: dict[str, Path]) -> None:
    out = render_run(runs["aime"], runs["aime"].parent / "aime-report.html")
    size = out.stat().st_size
    assert size < 1.5 * MB, size
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    data = sample_data(text)
    assert len(data["rows"]) == 480
    responses = [r["r"] for r in data["rows"] if r.get("r") is not None]
    assert any(isinstance(r, list) and r[2] > 0 for r in responses)  # cut, with the count of what was left out
    assert "avg@16" in text and "pass@8" in text and "maj@16" in text
    # the answer at the end of a long response survives the cut
    assert any("\\boxed{" in text_of(r) for r in responses)
    # 16 samples of a problem share one prompt: stored once
    assert len(data["texts"]) < 100
    # per-problem table and clamp note
    assert "2025-II-15" in text
    # the clamp in words, not its JSON record (issue 49)
    assert "max_tokens was lowered for some requests, from 38912 to as low as 32768, so that prompt and answer" in text
    assert "clamped_to" not in text
    assert "1 of 480 (0.2%) requests failed" in text


def test_report_sizes_are_recorded(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sizes = {name: len(render_run_html(runs[name]).encode()) for name in ("gsm8k", "aime")}
    with capsys.disabled():
        print(f"\nreport sizes (bytes): {sizes}")
    assert sizes["gsm8k"] < 1.5 * MB and sizes["aime"] < 1.5 * MB


HOSTILE_RAW = ["<script>window.__pwned", "<img src=x", "<b>bold?</b>"]
HOSTILE_ESCAPED = [
    "&lt;/script&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;",
    "&lt;img src=x onerror=alert(1)&gt;",
    "{{ 7*7 }}",
    "{% raw %}",
    "&lt;b&gt;bold?&lt;/b&gt;",
]


@pytest.mark.parametrize("name", ["gsm8k_hostile", "aime_hostile"])
def test_hostile_model_output_is_text(runs: dict[str, Path], name: str) -> None:
    text = render_run(runs[name], runs[name].parent / f"{name}.html").read_text(encoding="utf-8")
    assert_self_contained(text)
    for raw in HOSTILE_RAW:
        assert raw not in text, raw
    data = sample_data(text)  # model text is data (base64 in a non-executed block), intact after decoding
    texts = json.dumps(data, ensure_ascii=False)
    assert rf.CANARY.replace("/", "\\/") in texts or rf.CANARY in texts
    if name == "gsm8k_hostile":
        assert HOSTILE_ESCAPED[1] in text  # the model name, escaped
        row = data["rows"][3]
        assert rf.HOSTILE in text_of(data["texts"][row["q"]]) and rf.HOSTILE in text_of(row["r"])
        assert "{{ 7*7 }}" in text_of(row["r"])  # not evaluated as a template
        # the 200,000-char line is cut, with the count of what was left out
        long = data["rows"][4]["r"]
        assert isinstance(long, list) and long[3] == rf.LONG_LINE_LEN + len(rf.CANARY)
        assert len(long[0]) + len(long[1]) <= 20_000 and long[1].endswith(rf.CANARY)
    assert "__pwned" not in json.dumps(report_data(text))  # model text never goes to the chart data


def test_hostile_labels_in_comparison(tmp_path: Path, runs: dict[str, Path]) -> None:
    weird = rf.build_gsm8k_run(tmp_path / "<img src=x onerror=alert(1)>", seed=5, hostile=True)
    out = render_compare([weird, runs["gsm8k"]], tmp_path / "cmp.html")
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    for raw in HOSTILE_RAW[:2]:
        assert raw not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    data = report_data(text)  # labels are in the chart data: escaped by |tojson, intact after parsing
    scatter = [c for c in data["charts"] if c["kind"] == "scatter"]
    assert any("<img src=x onerror=alert(1)>" in p["label"] for c in scatter for p in c["points"])
    assert "\\u003cimg" in text


def test_minimal_and_empty_runs_render(tmp_path: Path, runs: dict[str, Path]) -> None:
    text = render_run(runs["minimal"], tmp_path / "m.html").read_text(encoding="utf-8")
    assert_self_contained(text)
    assert "could not be parsed" in text
    assert len(sample_data(text)["rows"]) == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    text = render_run(empty).read_text(encoding="utf-8")
    assert "manifest.json is missing" in text and "samples.jsonl is missing" in text
    assert "No samples recorded." in text
    with pytest.raises(FileNotFoundError):
        render_run(tmp_path / "does-not-exist")


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((*prefix, k))
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(obj, list) and obj:
        out.append((*prefix, 0))
        out.extend(_paths(obj[0], (*prefix, 0)))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any, delete: bool) -> None:
    for k in path[:-1]:
        obj = obj[k]
    if delete and isinstance(obj, dict):
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


@pytest.mark.parametrize("which", ["manifest.json", "summary.json"])
def test_every_missing_or_odd_key_is_tolerated(tmp_path: Path, which: str) -> None:
    """Drop each key (and set it to null, and to a wrong type) in turn: the report still renders."""
    run = rf.build_gsm8k_run(tmp_path / "run", n=12)
    rf.build_aime_run(tmp_path / "aime", problems=2, samples_per_problem=2, response_chars=300, reasoning_chars=300)
    # merge the aime task in, so its detail (per_problem) is covered too
    for name in ("manifest.json", "summary.json"):
        a = json.loads((tmp_path / "aime" / name).read_text())
        b = json.loads((run / name).read_text())
        b["tasks"].update(a["tasks"])
        (run / name).write_text(json.dumps(b))
    original = json.loads((run / which).read_text())
    paths = _paths(original)
    assert len(paths) > 60
    for path in paths:
        for value, delete in ((None, True), (None, False), ("x", False), ([1], False), ({"a": 1}, False)):
            doc = copy.deepcopy(original)
            _set(doc, path, value, delete)
            (run / which).write_text(json.dumps(doc))
            try:
                render_run_html(run)
            except Exception as e:  # pragma: no cover - the message names the path
                raise AssertionError(f"{which} {path} -> {value!r} (delete={delete}): {e!r}") from e


def test_odd_samples_are_tolerated(tmp_path: Path) -> None:
    run = rf.build_gsm8k_run(tmp_path / "run", n=5)
    lines = (run / "samples.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    odd = []
    for key in list(rec):
        for value in (None, "x", 7, [1, {"a": None}], {"b": [None]}, True):
            r = dict(rec)
            r[key] = value
            odd.append(json.dumps(r))
    (run / "samples.jsonl").write_text("\n".join(lines + odd + ["{not json", "[]", "null", ""]) + "\n")
    text = render_run_html(run)
    assert "could not be parsed" in text


def test_atomic_write_leaves_no_temp_files(tmp_path: Path, runs: dict[str, Path]) -> None:
    out = tmp_path / "sub" / "r.html"
    render_run(runs["minimal"], out)
    render_run(runs["minimal"], out)  # overwrite
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.html"]


# ------------------------------------------------------------------------------------------------------------
# Comparison report


def test_compare_report(tmp_path: Path, runs: dict[str, Path]) -> None:
    dirs = [runs["gsm8k"], runs["gsm8k_fast"], runs["gsm8k_worse"]]
    out = render_compare(dirs, tmp_path / "compare.html")
    size = out.stat().st_size
    assert size < 5 * MB, size
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    for needle in (
        "gsm8k-base",
        "gsm8k-fp8",
        "gsm8k-bad",
        "--quantization</b>=fp8",
        "output tok/s",
        "TTFT p50",
        "TPOT p50",
        "exact_match · strict-match",
        "95% CI",
        "vs A",
        "client-bound",
    ):
        assert needle in text, needle
    # Pareto: base (more accurate) and fp8 (faster) are on the front, the worse-and-slower run is not
    data = report_data(text)
    (scatter,) = [c for c in data["charts"] if c["kind"] == "scatter"]
    on_front = {p["label"]: p["front"] for p in scatter["points"]}
    assert on_front == {"A gsm8k-base": True, "B gsm8k-fp8": True, "C gsm8k-bad": False}
    assert [p["x"] for p in scatter["front"]] == sorted(p["x"] for p in scatter["front"])
    assert text.count('<span class="front">on front</span>') == 2
    # flips between A and B
    assert "Broken: correct in A, wrong in B" in text and "Fixed: wrong in A, correct in B" in text
    assert "Question under test" in text and "few-shot examples" in text  # examples only counted


def test_compare_pair_and_errors(tmp_path: Path, runs: dict[str, Path]) -> None:
    dirs = [runs["gsm8k"], runs["gsm8k_fast"], runs["gsm8k_worse"]]
    text = render_compare(dirs, tmp_path / "c.html", pair=(2, 0)).read_text(encoding="utf-8")
    assert "Flips: C → A" in text
    with pytest.raises(ValueError):
        render_compare(dirs, tmp_path / "c.html", pair=(1, 1))
    with pytest.raises(ValueError):
        render_compare(dirs, tmp_path / "c.html", pair=(0, 3))
    with pytest.raises(ValueError):
        render_compare([], tmp_path / "c.html")
    single = render_compare([runs["gsm8k"]], tmp_path / "one.html").read_text(encoding="utf-8")
    assert 'id="flips"' not in single


def test_compare_mixed_and_missing(tmp_path: Path, runs: dict[str, Path]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    dirs = [runs["aime"], runs["aime_hostile"], runs["gsm8k"], runs["minimal"], empty]
    out = render_compare(dirs, tmp_path / "mixed.html")
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert out.stat().st_size < 10 * MB
    assert "Per-problem accuracy changes" in text  # aime: several samples per problem
    assert "&lt;script&gt;window.__pwned" in text and "<script>window.__pwned" not in text


def test_compare_warns_on_different_data(tmp_path: Path) -> None:
    a = rf.build_gsm8k_run(tmp_path / "a", n=20)
    b = rf.build_gsm8k_run(tmp_path / "b", n=20, seed=1)
    m = json.loads((b / "manifest.json").read_text())
    m["tasks"]["gsm8k"]["data_sha256"]["test"] = "f" * 64
    m["tasks"]["gsm8k"]["version"] = 4
    (b / "manifest.json").write_text(json.dumps(m))
    text = render_compare([a, b], tmp_path / "c.html").read_text(encoding="utf-8")
    assert "data_sha256 differs" in text and "different task versions" in text


# ------------------------------------------------------------------------------------------------------------
# Pure functions


def test_pareto_front() -> None:
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0)]) == [0]
    # (throughput, accuracy): 0 dominated by 1; 1, 2, 3 trade off; 4 missing
    pts: list[tuple[float | None, float | None]] = [
        (100, 0.70),
        (120, 0.75),
        (200, 0.72),
        (90, 0.80),
        (None, 0.9),
    ]
    assert pareto_front(pts) == [3, 1, 2]
    # equal points are both kept; a point equal in one coordinate and worse in the other is dominated
    assert pareto_front([(1, 1), (1, 1), (1, 0.5), (0.5, 1)]) == [0, 1]
    # a chain: only the best survives
    assert pareto_front([(1, 1), (2, 2), (3, 3)]) == [2]
    assert pareto_front([(float("nan"), 1), (1, float("inf")), (1, 1)]) == [2]
    assert pareto_front([(None, None)]) == []


def _s(task: str, doc: int, idx: int, correct: Any, key: str = "strict-match") -> dict[str, Any]:
    return {
        "task": task,
        "doc_id": doc,
        "sample_index": idx,
        "correct": {key: correct, "other": not correct},
        "status": "ok",
    }


def test_flips() -> None:
    a = [
        _s("t", 0, 0, True),
        _s("t", 1, 0, True),
        _s("t", 2, 0, False),
        _s("t", 3, 0, False),
        _s("t", 4, 0, None),
        _s("t", 5, 0, True),
        _s("u", 0, 0, True),
    ]
    b = [
        _s("t", 0, 0, True),
        _s("t", 1, 0, False),
        _s("t", 2, 0, True),
        _s("t", 3, 0, False),
        _s("t", 4, 0, True),
        _s("t", 6, 0, True),
        _s("u", 0, 0, False),
    ]
    f = compute_flips(a, b)
    assert [fl.key for fl in f.broken] == [("t", 1, 0), ("u", 0, 0)]
    assert [fl.key for fl in f.fixed] == [("t", 2, 0)]
    assert (f.both_correct, f.both_wrong, f.unscored, f.only_a, f.only_b) == (1, 1, 1, 1, 1)
    assert f.problems == []  # one sample per doc
    # primary flag is the first key of `correct` (not "other", which says the opposite)
    assert all(fl.metric == "strict-match" for fl in f.broken + f.fixed)


def test_flips_use_a_primary_key_in_b_and_per_problem() -> None:
    a = [{"task": "x", "doc_id": 1, "sample_index": i, "correct": {"m": i < 3, "n": False}} for i in range(4)]
    # B lists keys in another order: A's primary key "m" is still used
    b = [{"task": "x", "doc_id": 1, "sample_index": i, "correct": {"n": True, "m": i == 0}} for i in range(4)]
    f = compute_flips(a, b)
    assert [fl.key[2] for fl in f.broken] == [1, 2]
    assert f.fixed == []
    (p,) = f.problems
    assert (p.acc_a, p.acc_b, p.n_a, p.n_b) == (0.75, 0.25, 4, 4) and p.delta == pytest.approx(-0.5)


def test_primary_correct() -> None:
    assert primary_correct({}) == (None, None)
    assert primary_correct({"correct": {"a": None, "b": True}}) == ("a", None)
    assert primary_correct({"correct": {"a": False}}) == ("a", False)
    assert primary_correct({"correct": {"a": False, "b": True}}, "b") == ("b", True)
    assert primary_correct({"correct": {"a": "yes"}}) == ("a", None)
    assert primary_correct({"correct": ["x"]}) == (None, None)


def test_text_cutting() -> None:
    assert cut_text(None, 10) is None
    c = cut_text("abc", 10)
    assert c is not None and not c.is_cut and c.head == "abc"
    long = "A" * 100 + "END"
    c = cut_text(long, 30)
    assert c is not None and c.is_cut and c.tail.endswith("END") and len(c.head) + len(c.tail) == 30
    assert c.omitted == len(long) - 30 and c.total == len(long)


def test_fit_limit() -> None:
    assert fit_limit([100, 200], budget=1000, max_limit=3000) == 3000
    lim = fit_limit([10_000] * 10, budget=20_000, max_limit=3000)
    assert lim == 2000
    assert fit_limit([10_000] * 10, budget=20_000, max_limit=3000, weights=[2.0] * 10) == 1000
    assert fit_limit([10_000] * 10, budget=10, max_limit=3000, min_limit=200) == 200


def test_distributions() -> None:
    pts = cdf_points(range(1000), max_points=50)
    assert len(pts) <= 50 and pts[0] == [0, 0.001] and pts[-1] == [999, 1.0]
    assert cdf_points([]) == []
    la = accuracy_by_length(
        [
            {"output_tokens": 10, "correct": {"m": True}},
            {"output_tokens": 70, "correct": {"m": False}, "status": "truncated"},
            {"output_tokens": 70, "correct": {"m": True}},
            {"output_tokens": None, "correct": {"m": True}},
            {"output_tokens": 5, "correct": {"m": None}},
            {"output_tokens": 100_000, "correct": {"m": True}},
        ]
    )
    by = {b.label: b for b in la.buckets if b.n}
    assert by["0–63"].accuracy == 1.0 and by["64–127"].accuracy == 0.5 and by["64–127"].truncated == 1
    assert by["≥32768"].n == 1 and la.unknown_length == 1


def test_endpoint_and_argv_parsing() -> None:
    assert endpoint_host("https://user:secret@api.example.com:8443/v1?key=abc#x") == "https://api.example.com:8443/v1"
    assert endpoint_host(None) is None and endpoint_host("not a url") is None
    pos, flags = parse_argv(["vllm", "serve", "m", "--tp", "2", "--enforce-eager", "--seed", "-1", "--x=y", "-q"])
    assert pos == ["vllm", "serve", "m"]
    assert flags == {"--tp": "2", "--enforce-eager": "true", "--seed": "-1", "--x": "y", "-q": "true"}


def test_size_bound_without_shared_prefix_and_many_rows(tmp_path: Path) -> None:
    """Few-shot examples drawn per document (no common prefix) and more samples than rows listed: under the
    size target, every listed row keeps its question, answer and gold answer; the examples are left out."""
    run = rf.build_gsm8k_run(tmp_path / "big", n=4000, fewshot_per_doc=True)
    text = render_run_html(run)
    assert len(text.encode()) < 1.5 * MB, len(text.encode())
    assert "Listing 2,000 of 4,000 samples" in text
    data = sample_data(text)
    assert len(data["rows"]) == 2000 and data["fewshot"] is None
    assert "few-shot examples before each question (gsm8k) are left out" in text
    assert all(r.get("q") is not None and r.get("g") for r in data["rows"])
    # failures are kept among the rows listed
    assert sum(r["s"] == "api_error" for r in data["rows"]) == 5


def test_gsm8k_per_doc_fewshot_size(tmp_path: Path) -> None:
    """1319 GSM8K samples with per-document few-shot examples (as lm-eval's gsm8k v3 builds them): < 1.5 MB."""
    run = rf.build_gsm8k_run(tmp_path / "perdoc", fewshot_per_doc=True)
    size = len(render_run_html(run).encode())
    assert size < 1.5 * MB, size
