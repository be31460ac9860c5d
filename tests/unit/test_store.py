import orjson
import pytest

from evalkit.contracts import SampleRecord
from evalkit.scoring.speed import percentile, percentiles, speed_summary
from evalkit.store import RunStore
from evalkit.store.files import iter_sample_dicts, write_json_atomic


def rec(i: int, **kw) -> SampleRecord:
    base = dict(key=f"k{i}", task="t", doc_id=i, prompt="p", status="ok", response="r")
    base.update(kw)
    return SampleRecord(**base)


def test_append_and_read_back(tmp_path):
    store = RunStore(tmp_path / "run").open()
    for i in range(3):
        store.append(rec(i))
    store.close()
    assert [r.doc_id for r in store.records()] == [0, 1, 2]


def test_torn_last_line_is_ignored_and_repaired(tmp_path):
    store = RunStore(tmp_path).open()
    store.append(rec(0))
    store.close()
    with open(store.samples_path, "ab") as f:
        f.write(b'{"key": "k1", "task": "t", "doc_')  # crash mid-write
    assert [r.doc_id for r in store.records()] == [0]
    store.open()  # reopening cuts the torn tail so the next record starts on its own line
    store.append(rec(2))
    store.close()
    assert [r.doc_id for r in store.records()] == [0, 2]


def test_corrupt_middle_line_is_an_error(tmp_path):
    p = tmp_path / "samples.jsonl"
    p.write_bytes(b'{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(orjson.JSONDecodeError):
        list(iter_sample_dicts(p))


def test_atomic_json_leaves_no_temp_files(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"a": 1})
    write_json_atomic(tmp_path / "x.json", {"a": 2})
    assert orjson.loads((tmp_path / "x.json").read_bytes()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    vals = sorted([5.0, 1.0, 9.0, 3.0, 7.5, 2.25])
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(vals, q) == pytest.approx(float(np.percentile(vals, q)))
    assert percentiles([]).n == 0


def test_speed_summary_excludes_failures_and_uses_wall_span():
    records = [
        rec(0, ttft_ms=100, tpot_ms=10, e2e_ms=1000, output_tokens=91, prompt_tokens=10, start_s=0.0),
        rec(1, ttft_ms=300, tpot_ms=30, e2e_ms=1000, output_tokens=9, prompt_tokens=10, start_s=1.0),
        rec(2, status="api_error", response=None, start_s=0.5),
    ]
    s = speed_summary(records)
    assert s.wall_s == pytest.approx(2.0)
    assert s.output_tokens_per_s == pytest.approx(50.0)
    assert s.requests_per_s == pytest.approx(1.0)
    assert s.ttft_ms.p50 == pytest.approx(200)
    assert s.ttft_ms.n == 2
