"""BFCL's multi-turn function backends, vendored from ``bfcl-eval`` 2026.3.23 (Apache-2.0, Copyright the Gorilla
authors; ``bfcl_eval/eval_checker/multi_turn_eval/func_source_code/``): a file system, math, messages, Twitter,
tickets, trading, travel and vehicle control, plain Python that runs offline (math needs ``mpmath``).

The files are BFCL's own, byte for byte except one line in four of them: the absolute import of
``long_context`` is relative here. Sources and sha256 sums: ``tasks/data/README.md``. They are left out of
ruff and mypy (``pyproject.toml``): they are upstream code kept as it is, not evalkit's.
"""
