"""How often the gate's perplexity rule (evalkit/gating/corpus.py) fails at the edge of its budget, and how often it
catches a 5% increase, on synthetic documents.

    python -m benchmarks.corpus_calibration [--reps 1000] [--docs 20 60 200]

Each replicate draws ``n`` documents with lengths lognormal(5.5, sigma) words (median ~245; sigma 0.5 and 1.0)
and a baseline loss of 2.5..4 nats per word, then a candidate whose loss per word is higher by ln(1 + change) plus
N(0, sd) per document. Type I: the true corpus change is exactly the default budget (+1%, sd 0.02), so a fail is
a false alarm (nominal rate alpha = 0.05). Power: the true change is +5% (sd 0.05). Both use the gate's defaults
(alpha 0.05, 5000 resamples) through :func:`evalkit.gating.stats.corpus_bootstrap`.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from evalkit.gating.stats import corpus_bootstrap

BUDGET = 0.01
ALPHA = 0.05


def fail_rate(n: int, change: float, reps: int, sd: float, sigma: float, seed: int) -> float:
    """Share of ``reps`` synthetic comparisons of ``n`` documents that the rule fails."""
    rng = np.random.default_rng(seed)
    fails = 0
    for r in range(reps):
        words = rng.lognormal(5.5, sigma, n)
        base = -rng.uniform(2.5, 4.0, n) * words
        cand = base - (math.log(1 + change) + rng.normal(0.0, sd, n)) * words
        est = corpus_bootstrap((base, words, cand, words), "weighted_perplexity", BUDGET, ALPHA, 5000, r)
        fails += est.value > BUDGET and est.p_value < ALPHA
    return fails / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000, help="replicates per type I cell (power: a third)")
    parser.add_argument("--docs", type=int, nargs="+", default=[20, 60, 200])
    args = parser.parse_args()
    for sigma in (0.5, 1.0):
        for n in args.docs:
            type1 = fail_rate(n, BUDGET, args.reps, 0.02, sigma, seed=7)
            power = fail_rate(n, 0.05, max(1, args.reps // 3), 0.05, sigma, seed=8)
            print(f"lengths sigma {sigma}, {n} documents: type I {type1:.3f}, power at +5% {power:.3f}", flush=True)


if __name__ == "__main__":
    main()
