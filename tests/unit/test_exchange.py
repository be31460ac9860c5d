"""The in-memory request records (evalkit/contracts/exchange.py) stay the same size for a whole run: a run holds
every request it planned, and each one sent is pickled to the scoring process (``Worker.score_many``). A dataclass
with an instance ``__dict__`` got that dict materialised, 64 bytes kept per request, on its first pickling (the
one-hour run's steady growth in the run's process: ~12 MB over 180,000 requests); the request types have slots,
and pickle as their constructor's call (the slots' own ``__getstate__`` left cyclic garbage per pickling).
The scheduler's loop-lag samples are 8 bytes each, not a float object and a list slot."""

from __future__ import annotations

import gc
import pickle
import tracemalloc

from evalkit.contracts import Request, SchedulerStats
from evalkit.contracts.exchange import Conversation, GenParams


def _requests(n: int) -> list[Request]:
    gen = GenParams(max_tokens=16, stop=("\n",))
    later = Conversation(turns=(({"role": "user", "content": "and then?"},),))
    return [
        Request(task="t", doc_id=i, sample_index=0, prompt=f"q{i}", gen=gen, target="1", conversation=later)
        for i in range(n)
    ]


def test_pickling_the_requests_a_run_holds_keeps_nothing_beside_them() -> None:
    held = _requests(5_000)
    pickle.dumps(held[:10])  # pickle's own first-use allocations, before the measurement
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for req in held:
            pickle.dumps(("score_many", [("t", req, None)]), protocol=pickle.HIGHEST_PROTOCOL)
        kept = tracemalloc.get_traced_memory()[0] - before  # cyclic garbage counts: no gc.collect() first
    finally:
        tracemalloc.stop()
    assert kept < 5_000 * 4, f"{kept} bytes kept after pickling 5,000 held requests"  # was 64 bytes each
    assert pickle.loads(pickle.dumps(held[7])) == held[7]
    assert pickle.loads(pickle.dumps(held[7].gen)) == held[7].gen


def test_request_types_have_no_instance_dict() -> None:
    req = _requests(1)[0]
    for obj in (req, req.gen, req.conversation):
        assert not hasattr(obj, "__dict__"), type(obj).__name__


def test_loop_lag_samples_are_a_float_array() -> None:
    stats = SchedulerStats()
    stats.loop_lag_ms.append(1.5)
    assert getattr(stats.loop_lag_ms, "itemsize", None) == 8 and list(stats.loop_lag_ms) == [1.5]
