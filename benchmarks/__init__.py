"""Benchmarks (not tests): they print ratios measured side by side in one run. Figures: docs/benchmarks.md."""
