"""Helpers to run lm-eval's own `local-completions` on evalkit's vendored GSM8K and compare with evalkit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalkit.tasks.catalogue import builtin_tasks_dir


def lm_eval_gsm8k_config() -> dict[str, Any]:
    """lm-eval's own gsm8k task config, loaded by lm-eval, with only the data location changed (json files)."""
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(Path(lm_eval.tasks.__file__).parent / "gsm8k/gsm8k.yaml")
    cfg.pop("tag", None)
    data = builtin_tasks_dir() / "data/gsm8k"
    cfg.update(
        dataset_path="json",
        dataset_name=None,
        dataset_kwargs={"data_files": {"train": str(data / "train.jsonl"), "test": str(data / "test.jsonl")}},
    )
    return cfg


def run_lm_eval(base_url: str, model: str, limit: int, num_concurrent: int = 1, lm: Any = None) -> dict[str, Any]:
    """lm-eval's simple_evaluate with local-completions (strings, no tokenizer), or with the given LM object."""
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    model_arg: Any = lm or "local-completions"
    model_args = (
        None
        if lm
        else {
            "base_url": base_url.rstrip("/") + "/completions",
            "model": model,
            "tokenizer_backend": None,
            "tokenized_requests": False,
            "num_concurrent": num_concurrent,
            "max_retries": 1,
        }
    )
    return evaluator.simple_evaluate(
        model=model_arg,
        model_args=model_args,
        tasks=[lm_eval_gsm8k_config()],
        limit=limit,
        log_samples=True,
        task_manager=TaskManager(),
    )


def per_doc(lm_results: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """doc_id -> {"prompt", "response", "filtered": {filter: value}, "metrics": {filter: exact_match}}."""
    out: dict[int, dict[str, Any]] = {}
    for s in lm_results["samples"]["gsm8k"]:
        d = out.setdefault(s["doc_id"], {"filtered": {}, "metrics": {}})
        d["prompt"] = s["arguments"][0][0]
        d["response"] = s["resps"][0][0]
        d["filtered"][s["filter"]] = s["filtered_resps"][0]
        d["metrics"][s["filter"]] = s["exact_match"]
    return out


def evalkit_per_doc(run_dir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[r["doc_id"]] = {
            "prompt": r["prompt"],
            "response": r["response"],
            "filtered": r["extracted"],
            "metrics": {k: float(v) for k, v in r["correct"].items()},
        }
    return out
