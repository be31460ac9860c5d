"""CI's guard on the client's CPU per request (issue 47): the short mode of ``benchmarks/bench_request_rate.py``.

The real ``evalkit run gsm8k`` against the ``--fast`` test server, beside the bare aiohttp loop
(``benchmarks/raw_client.py``) sending the same 400 short-answer streaming requests at concurrency 256: the
request phase's CPU per request (the run's own accounting, every thread of the process) must stay within 2x the
bare loop's. CPU time, not wall time, so that a busy machine does not fail it; the measurement itself (bound 1.5x,
full GSM8K, several rounds) is the benchmark's, recorded in docs/benchmarks.md. Marked serial (tests/conftest.py).
"""

from __future__ import annotations

from benchmarks.bench_request_rate import measure

GUARD_RATIO = 2.0


def test_evalkit_spends_at_most_twice_the_bare_loops_cpu_per_request() -> None:
    out = measure(rounds=1, limit=400, concurrency=256, warmup=False, short=True)
    row = out["rounds"][0]
    print(f"evalkit/bare CPU per request: {row['ratio']:.2f}")
    bare, ours = row["bare"], row["evalkit"]
    assert bare["requests"] == ours["requests"] == 400
    assert row["ratio"] <= GUARD_RATIO, (
        f"evalkit's request phase spends {ours['cpu_us_per_request']:.0f} µs of CPU per request, "
        f"{row['ratio']:.2f}x the bare loop's {bare['cpu_us_per_request']:.0f} µs (guard: {GUARD_RATIO}x); "
        "profile it with `python -m benchmarks.bench_request_rate` and py-spy"
    )
