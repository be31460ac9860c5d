"""lm-eval-backed tasks: lm-eval's own task definition (prompts, few-shot sampler, filters, metrics),
pointed at vendored data files and driven by evalkit.

Nothing of lm-eval's prompt building, filtering or scoring is re-implemented here: requests come from
``ConfigurableTask.build_all_requests``, answers go through the task's own ``FilterEnsemble``s and
``process_results``, and metrics through the task's aggregation and lm-eval's ``stderr_for_metric``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.errors import TaskError
from evalkit.records import MetricValue, SampleRecord, Status
from evalkit.tasks.base import GenParams, Request, Response, Score, Task, TaskSettings
from evalkit.tasks.data import read_jsonl

LM_EVAL_SEED = 1234  # lm-eval's default seed for API models and for the few-shot sampler


def lm_eval_tasks_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


def _quiet_lm_eval() -> None:
    for name in ("lm_eval", "lm-eval"):
        logging.getLogger(name).setLevel(logging.ERROR)


class LmEvalTask(Task):
    """A task whose prompts, filters and metrics are lm-eval's own.

    Example::

        task = registry.get("gsm8k")
        reqs = task.build_requests(TaskSettings(limit=5))
    """

    endpoint_kind = "completions"

    def __init__(self, spec: dict[str, Any], root: Path) -> None:
        self.spec = spec
        self.name = spec["name"]
        self.description = spec.get("description", "")
        lm_spec = spec.get("lm_eval") or {}
        base = lm_spec.get("base")
        if not base:
            raise TaskError(
                f"task {self.name}: 'lm_eval.base' is missing; name lm-eval's task YAML, e.g. gsm8k/gsm8k.yaml"
            )
        self.base_yaml = lm_eval_tasks_dir() / base
        if not self.base_yaml.is_file():
            raise TaskError(f"task {self.name}: lm-eval has no task file {base} (looked in {lm_eval_tasks_dir()})")
        self.overrides = dict(lm_spec.get("overrides") or {})
        self.data_files = {split: (root / rel).resolve() for split, rel in (spec.get("data") or {}).items()}
        for split, path in self.data_files.items():
            if not path.is_file():
                raise TaskError(f"task {self.name}: data file for split '{split}' not found: {path}")
        self._config: dict[str, Any] | None = None
        self._lm_task: Any = None
        self.version = str(spec.get("version") or self._base_config().get("metadata", {}).get("version", "0"))

    # -- lm-eval objects ---------------------------------------------------------------------------------
    def _base_config(self) -> dict[str, Any]:
        if self._config is None:
            from lm_eval.tasks._yaml_loader import load_yaml

            cfg = copy.deepcopy(load_yaml(self.base_yaml, resolve_func=True))
            for key in ("tag", "group", "task_list"):
                cfg.pop(key, None)
            cfg.update(copy.deepcopy(self.overrides))
            cfg["task"] = self.name
            self._config = cfg
        return self._config

    def _load_splits(self, **_: Any) -> dict[str, Any]:
        import datasets

        return {split: datasets.Dataset.from_list(read_jsonl(path)) for split, path in self.data_files.items()}

    def lm_task(self, num_fewshot: int | None = None) -> Any:
        """lm-eval's ConfigurableTask on the vendored data, set up as ``simple_evaluate`` would."""
        from lm_eval.api.task import ConfigurableTask

        _quiet_lm_eval()
        cfg = copy.deepcopy(self._base_config())
        cfg["dataset_path"] = "evalkit-vendored"
        cfg.pop("dataset_name", None)
        cfg["dataset_kwargs"] = {}
        cfg["custom_dataset"] = self._load_splits
        cfg["metadata"] = dict(cfg.get("metadata") or {})
        task = ConfigurableTask(config=cfg)
        default_shots = task.get_config("num_fewshot")
        if num_fewshot is not None and default_shots != 0:
            task.set_config(key="num_fewshot", value=num_fewshot)
        elif default_shots is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=LM_EVAL_SEED)
        return task

    # -- Task contract -----------------------------------------------------------------------------------
    def defaults(self) -> dict[str, Any]:
        gen = self._base_config().get("generation_kwargs") or {}
        return {
            "num_fewshot": self._base_config().get("num_fewshot"),
            "temperature": float(gen.get("temperature", 0.0)),
            "top_p": gen.get("top_p"),
            "max_tokens": int(gen.get("max_gen_toks", 256)),
            "num_samples": int(self._base_config().get("repeats", 1)),
        }

    def metric_names(self) -> list[str]:
        cfg = self._base_config()
        metrics = [m["metric"] for m in cfg.get("metric_list") or []]
        filters = [f["name"] for f in cfg.get("filter_list") or [{"name": "none"}]]
        return [f"{m},{f}" for f in filters for m in metrics]

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        task = self.lm_task(settings.num_fewshot)
        self._lm_task = task
        if int(task.get_config("repeats") or 1) != 1:
            raise TaskError(f"task {self.name}: lm-eval tasks with repeats > 1 are not supported; use a python task")
        task.build_all_requests(limit=settings.limit, rank=0, world_size=1)
        out: list[Request] = []
        for inst in task.instances:
            if inst.request_type != "generate_until":
                raise TaskError(f"task {self.name}: only generate_until tasks are supported, got {inst.request_type}")
            context, gen_kwargs = inst.args[0], inst.args[1]
            out.append(
                Request(
                    task=self.name,
                    doc_id=int(inst.doc_id),
                    sample_index=0,
                    prompt=context,
                    gen=self._gen_params(gen_kwargs, settings),
                    target=str(task.doc_to_target(inst.doc)),
                )
            )
        self._instances = {(int(i.doc_id), int(i.idx)): i for i in task.instances}
        return out

    @staticmethod
    def _gen_params(gen_kwargs: dict[str, Any], s: TaskSettings) -> GenParams:
        until = gen_kwargs.get("until") or []
        if isinstance(until, str):
            until = [until]
        max_tokens = gen_kwargs.get("max_tokens", gen_kwargs.get("max_gen_toks", 256))
        temperature = gen_kwargs.get("temperature", 0.0)
        return GenParams(
            max_tokens=int(s.max_tokens if s.max_tokens is not None else max_tokens),
            temperature=float(s.temperature if s.temperature is not None else temperature),
            top_p=s.top_p if s.top_p is not None else gen_kwargs.get("top_p"),
            seed=s.seed if s.seed is not None else LM_EVAL_SEED,
            stop=tuple(until),
        )

    def score(self, request: Request, response: Response) -> Score:
        inst = copy.copy(self._instances[(request.doc_id, request.sample_index)])
        inst.resps = [response.text or ""]
        inst.filtered_resps = {}
        extracted: dict[str, str | None] = {}
        correct: dict[str, bool | None] = {}
        for ensemble in self._lm_task._filters:
            ensemble.apply([inst])
        for fname, value in inst.filtered_resps.items():
            extracted[fname] = None if value is None else str(value)
            results = self._lm_task.process_results(inst.doc, [value])
            for metric, v in results.items():
                correct[fname] = bool(v) if metric == self._primary_metric() else correct.get(fname)
        status: Status = "truncated" if response.finish_reason == "length" else "ok"
        if not (response.text or "").strip():
            status = "empty"
        return Score(status=status, extracted=extracted, correct=correct, extraction="lm-eval filters")

    def _primary_metric(self) -> str:
        metrics = [m["metric"] for m in self._base_config().get("metric_list") or []]
        return metrics[0] if metrics else "exact_match"

    def per_doc_metrics(self, response_text: str, doc_id: int, sample_index: int = 0) -> dict[str, dict[str, Any]]:
        """{filter: {metric: value}} for one response, computed by lm-eval's filters and process_results."""
        inst = copy.copy(self._instances[(doc_id, sample_index)])
        inst.resps = [response_text]
        inst.filtered_resps = {}
        for ensemble in self._lm_task._filters:
            ensemble.apply([inst])
        return {f: self._lm_task.process_results(inst.doc, [v]) for f, v in inst.filtered_resps.items()}

    def summarize(self, records: Sequence[SampleRecord]) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        from lm_eval.api.metrics import stderr_for_metric

        task = self._lm_task if self._lm_task is not None else self.lm_task()
        by_doc: dict[int, list[SampleRecord]] = {}
        for r in records:
            by_doc.setdefault(r.doc_id, []).append(r)
        raw: dict[tuple[str, str], list[Any]] = {}
        scored = 0
        for doc_id in sorted(by_doc):
            recs = sorted(by_doc[doc_id], key=lambda r: r.sample_index)
            if any(r.status == "api_error" for r in recs):
                continue  # failed requests are counted, never scored as wrong
            scored += 1
            for r in recs:
                for fname, metrics in self.per_doc_metrics(r.response or "", doc_id, r.sample_index).items():
                    for metric, value in metrics.items():
                        raw.setdefault((metric, fname), []).append(value)
        out: dict[str, MetricValue] = {}
        aggregations = task.aggregation()
        for (metric, fname), items in raw.items():
            agg = aggregations[metric]
            value = float(agg(items))
            se_fn = stderr_for_metric(metric=agg, bootstrap_iters=100000)
            se = float(se_fn(items)) if se_fn is not None and len(items) > 1 else None
            ci = (value - 1.96 * se, value + 1.96 * se) if se is not None else None
            out[f"{metric},{fname}"] = MetricValue(value=value, stderr=se, ci95=ci, n=len(items))
        return out, {"docs_scored": scored, "docs_total": len(by_doc)}


def make_task(spec: dict[str, Any], root: Path) -> Task:
    return LmEvalTask(spec, root)
