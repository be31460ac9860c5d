"""lm-eval-backed tasks: lm-eval's own task definition (prompts, few-shot sampler, filters, metrics) driven by
evalkit: a task file naming lm-eval's YAML (``lm_eval.base``, vendored data) or any task of lm-eval's index by name
(``lm-eval:NAME``, ``lm_eval.task``; evalkit/tasks/lmeval_source.py), with its data from vendored files,
``--data-dir`` or lm-eval's own loading. ``generate_until`` requests are generations; ``loglikelihood``
(``multiple_choice``) and ``loglikelihood_rolling`` ones are scored requests (evalkit/tasks/lmeval_scored.py).

Nothing of lm-eval's prompt building, filtering or scoring is re-implemented here: requests come from
``ConfigurableTask.build_all_requests``, answers go through the task's own ``FilterEnsemble``s and
``process_results``, and metrics through the task's aggregation and lm-eval's ``stderr_for_metric``
(evalkit/tasks/lmeval_results.py). Over 400 lines: the prompt cache's build and both request kinds share one
lm-eval task object and its lock.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from evalkit.config.endpoint import credentials, server_root
from evalkit.contracts import EndpointKind, GenParams, MetricValue, Request, Response, SampleFields, Score, Status
from evalkit.errors import TaskError
from evalkit.store.files import safe_file_name
from evalkit.tasks import lmeval_chat as chat
from evalkit.tasks import lmeval_scored as scored
from evalkit.tasks.base import Task
from evalkit.tasks.data import read_jsonl
from evalkit.tasks.lmeval_results import aggregate, aggregation_names, doc_scores, generation_metrics, scored_metrics
from evalkit.tasks.lmeval_source import (
    config_hash,
    download_error,
    lm_eval_tasks_dir,
    local_splits,
    quiet_lm_eval,
    task_config,
)
from evalkit.tasks.lmeval_source import lm_eval_version as _lm_eval_version
from evalkit.tasks.prompt_cache import FORMAT as PROMPT_CACHE_FORMAT
from evalkit.tasks.prompt_cache import cache_writable, prompt_cache_dir, read_cache, write_cache
from evalkit.tasks.spec import TaskSettings, TaskSpec

LM_EVAL_SEED = 1234  # lm-eval's default seed for API models and for the few-shot sampler


class LmEvalTask(Task):
    """A task whose prompts, filters and metrics are lm-eval's own.

    Example::

        task = registry.get("gsm8k")
        reqs = task.build_requests(TaskSettings(limit=5))
    """

    endpoint_kind: EndpointKind = "completions"
    summary_needs_text = True

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.description = spec.description
        lm_spec = spec.options.get("lm_eval") or {}
        base, self.lm_name = lm_spec.get("base"), lm_spec.get("task")
        if not base and not self.lm_name:
            raise TaskError(
                f"task {self.name}: name lm-eval's task: 'lm_eval.base' (its YAML, e.g. gsm8k/gsm8k.yaml) or "
                "'lm_eval.task' (a name in lm-eval's index)"
            )
        self.include_path = tuple(str(p) for p in lm_spec.get("include_path") or ())
        self.tokenizer: str | None = lm_spec.get("tokenizer")
        self.lm_yaml: str | None = lm_spec.get("yaml")  # the task's lm-eval file (no index of every task to build)
        self.base_yaml: Path | None = None
        if base:
            self.base_yaml = lm_eval_tasks_dir() / base
            if not self.base_yaml.is_file():
                raise TaskError(f"task {self.name}: lm-eval has no task file {base} (looked in {lm_eval_tasks_dir()})")
        self.overrides = dict(lm_spec.get("overrides") or {})
        self.chat = chat.ChatPrompts.from_options(lm_spec.get("chat"), self.name)
        if self.chat.apply_chat_template:
            self.endpoint_kind = "chat"
        self._config: dict[str, Any] | None = None
        self.data_files = dict(spec.data)
        if lm_spec.get("data_dir") and not self.data_files:
            self.data_files = local_splits(self._base_config(), self.lm_name or self.name, Path(lm_spec["data_dir"]))
        for split, path in self.data_files.items():
            if not path.is_file():
                raise TaskError(f"task {self.name}: data file for split '{split}' not found: {path}")
        self._lm_task: Any = None
        self._build_tasks: dict[int | None, Any] = {}
        self._cache_keys: dict[int | None, str] = {}
        self._entries: dict[int | None, list[dict[str, Any]]] = {}  # the cache's entries, read and checked once
        self._metrics_cache: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._endpoint: tuple[str, dict[str, str]] | None = None  # the server whose /tokenize splits tokens
        self._splitters: dict[int | None, Any] = {}
        self.output_type = str(self._base_config().get("output_type") or "generate_until")
        if self.output_type not in ("generate_until", *scored.SCORED_TYPES):
            raise TaskError(f"task {self.name}: lm-eval output_type {self.output_type!r} is not supported")
        self.scored = self.output_type != "generate_until"
        self.chat.check_output_type(self.name, self.output_type)
        meta_version = str((self._base_config().get("metadata") or {}).get("version", "0"))
        # a task by name records lm-eval's version and a hash of its config: the gate compares only equal ones
        self.version = (
            spec.version
            or (f"{meta_version}+cfg.{config_hash(self._base_config())}" if self.lm_name else meta_version)
            + self.chat.version_suffix()
        )

    # -- lm-eval objects ---------------------------------------------------------------------------------
    def _base_config(self) -> dict[str, Any]:
        if self._config is None:
            if self.base_yaml is None:
                cfg = copy.deepcopy(task_config(str(self.lm_name), self.include_path, self.lm_yaml))
            else:
                text = self.base_yaml.read_text()
                if "!function" in text or "include:" in text:  # lm-eval's own loader (imports its task index)
                    from lm_eval.tasks._yaml_loader import load_yaml

                    cfg = copy.deepcopy(load_yaml(self.base_yaml, resolve_func=True))
                else:
                    cfg = yaml.safe_load(text)
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
        """lm-eval's ConfigurableTask on the local data (or lm-eval's own loading of its dataset), set up as
        ``simple_evaluate`` would."""
        from lm_eval.api.task import ConfigurableTask

        quiet_lm_eval()
        cfg = copy.deepcopy(self._base_config())
        if self.data_files:
            cfg["dataset_path"] = "evalkit-vendored"
            cfg.pop("dataset_name", None)
            cfg["dataset_kwargs"] = {}
            cfg["custom_dataset"] = self._load_splits
        cfg["metadata"] = dict(cfg.get("metadata") or {})
        try:
            task = ConfigurableTask(config=cfg)
        except (OSError, ValueError, FileNotFoundError, ImportError) as e:
            if self.data_files:
                raise
            raise download_error(self.lm_name or self.name, cfg, e) from None
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
            "max_tokens": 1 if self.scored else int(gen.get("max_gen_toks", 256)),
            "num_samples": int(self._base_config().get("repeats", 1)),
        }

    def metric_names(self, settings: TaskSettings | None = None) -> list[str]:
        cfg = self._base_config()
        metrics = [m["metric"] for m in cfg.get("metric_list") or []]
        filters = [f["name"] for f in cfg.get("filter_list") or [{"name": "none"}]]
        return [f"{m},{f}" for f in filters for m in metrics]

    def _cache_key(self, num_fewshot: int | None) -> str:
        """Once per few-shot setting (asked again by the runner, the plan and the build)."""
        key = self._cache_keys.get(num_fewshot)
        if key is None:
            blob = orjson.dumps(
                [
                    self.name,
                    self.version,
                    self.data_sha256,
                    self.base_yaml.read_bytes().decode() if self.base_yaml else config_hash(self._base_config()),
                    self.overrides,
                    num_fewshot,
                    _lm_eval_version(),
                    PROMPT_CACHE_FORMAT,
                    *([] if self.chat.plain else [self.chat.record()]),
                ],
                option=orjson.OPT_SORT_KEYS,
                default=str,
            )
            key = self._cache_keys[num_fewshot] = hashlib.sha256(blob).hexdigest()[:32]
        return key

    def _cache_path(self, num_fewshot: int | None) -> Path:
        return prompt_cache_dir() / f"{safe_file_name(self.name)}-{self._cache_key(num_fewshot)}.json"

    def _read_cache(self, num_fewshot: int | None) -> list[dict[str, Any]] | None:
        """The cached entries if the file holds every document (see ``evalkit/tasks/prompt_cache.py``), else None."""
        if num_fewshot not in self._entries:
            entries = read_cache(self._cache_path(num_fewshot), self._expected_documents())
            if entries is None:
                return None
            self._entries[num_fewshot] = entries
        return self._entries[num_fewshot]

    def _expected_documents(self) -> int | None:
        """How many documents lm-eval evaluates, counted in the data file (its rows, as ``read_jsonl`` reads them)
        when lm-eval takes them as they are; None when a ``process_docs`` may change their number."""
        cfg = self._base_config()
        split = cfg.get("test_split") or cfg.get("validation_split")
        path = self.data_files.get(split) if split else None
        if path is None or cfg.get("process_docs") is not None or self.scored:  # scored: several per document
            return None
        return sum(1 for line in path.read_bytes().splitlines() if line.strip())

    def _build_task(self, num_fewshot: int | None) -> Any:
        """lm-eval's task object that builds the prompts (one per few-shot setting); scoring reuses it."""
        task = self._build_tasks.get(num_fewshot)
        if task is None:
            task = self._build_tasks[num_fewshot] = self.lm_task(num_fewshot)
            if int(task.get_config("repeats") or 1) != 1:
                raise TaskError(
                    f"task {self.name}: lm-eval tasks with repeats > 1 are not supported; use a python task"
                )
            if self._lm_task is None:
                self._lm_task = task
        return task

    def _built(
        self, num_fewshot: int | None, on_entry: Callable[[dict[str, Any]], None] | None = None
    ) -> list[dict[str, Any]]:
        """Every document's lm-eval request (doc_id, context, gen_kwargs, target), built once and cached; each
        also goes to ``on_entry`` (in order) as soon as lm-eval has built it.

        The cache is keyed by task version, data hash, lm-eval's task file and version and the few-shot settings,
        so later runs and sweeps skip lm-eval's build (its cost: docs/benchmarks.md).
        """
        with self._lock:  # one build at a time
            built = self._read_cache(num_fewshot)
            if built is None:
                built = self._entries[num_fewshot] = self._build(num_fewshot, on_entry)
                write_cache(self._cache_path(num_fewshot), built)
            elif on_entry is not None:
                for entry in built:
                    on_entry(entry)
            return built

    def _build(
        self, num_fewshot: int | None, on_entry: Callable[[dict[str, Any]], None] | None
    ) -> list[dict[str, Any]]:
        """lm-eval's own ``build_all_requests``, watched: each document's request is taken as lm-eval constructs
        it (its ``construct_requests``, called once per document in order), and the whole list is checked against
        the instances lm-eval ends with, so what was streamed is exactly what lm-eval built."""
        task = self._build_task(num_fewshot)
        built: list[dict[str, Any]] = []
        construct = task.construct_requests

        def watched(*args: Any, **kwargs: Any) -> Any:
            out = construct(*args, **kwargs)
            for inst in out if isinstance(out, list) else [out]:
                if (inst.request_type == "generate_until") == self.scored:
                    raise TaskError(f"task {self.name}: a {inst.request_type} request in a {self.output_type} task")
                entry: dict[str, Any] = {"doc_id": int(inst.doc_id), "context": chat.context_text(inst.args[0])}
                if self.scored:  # lm-eval's request index within the document, and what is scored
                    entry.update(idx=int(inst.idx), type=inst.request_type, continuation="".join(inst.args[1:]))
                else:
                    entry["gen_kwargs"] = dict(inst.args[1])
                entry["target"] = str(task.doc_to_target(inst.doc))
                built.append(entry)
                if on_entry is not None:
                    on_entry(entry)
            return out

        task.construct_requests = watched
        try:
            task.build_all_requests(limit=None, rank=0, world_size=1, **self.chat.build_kwargs())
        finally:
            del task.construct_requests  # the class's own again
        final = [(int(inst.doc_id), chat.context_text(inst.args[0])) for inst in task.instances]
        if final != [(b["doc_id"], b["context"]) for b in built]:
            raise TaskError(
                f"task {self.name}: lm-eval's final requests differ from those it constructed one by one "
                f"(lm-eval {_lm_eval_version()}); please report this"
            )
        return built

    def quick_to_build(self, settings: TaskSettings) -> bool:
        """True when the prompt cache holds every document, or the task's requests are scored ones (tokenised at
        the run's server, so built in the run's process); a cold cache in a folder that cannot be written is
        said in one line (every run would build the prompts again)."""
        if self.scored or self._read_cache(settings.num_fewshot) is not None:
            return True
        cache_writable(prompt_cache_dir())
        return False

    def count_requests(self, settings: TaskSettings) -> int:
        if self.scored:  # a document's token requests are known once tokenised
            return len(self.build_requests(settings))
        cached = self._read_cache(settings.num_fewshot)
        n = len(cached) if cached is not None else len(self._build_task(settings.num_fewshot).eval_docs)
        if settings.docs is not None:
            n = len({d for d in settings.docs if 0 <= d < n})
        n = n if settings.limit is None else min(n, settings.limit)
        return n if settings.shard is None else len(range(settings.shard[0], n, settings.shard[1]))

    def use_endpoint(self, base_url: str, api_key: str | None) -> None:
        self._endpoint = credentials(server_root(base_url), api_key)

    def _splitter(self, settings: TaskSettings) -> Any:
        """lm-eval's local-completions token splitting, with ``--tokenizer`` or the run's server's tokenizer."""
        if self.tokenizer is None and self._endpoint is None:
            raise TaskError(
                f"task {self.name}: its {self.output_type} requests are tokenised at the run's server (or with "
                "--tokenizer PATH), which this command does not have; run it with evalkit run"
            )
        root, headers = self._endpoint or ("http://127.0.0.1", {})
        lm = self._splitters.get(settings.max_length)
        if lm is None:
            lm = self._splitters[settings.max_length] = scored.splitter(
                self.tokenizer, root, headers, settings.max_length
            )
        return lm

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        if self.scored:  # every request of the chosen documents (``limit`` counts documents)
            if settings.endpoint_kind == "chat":
                raise TaskError(f"task {self.name}: {self.output_type} requests need a completions endpoint, not chat")
            built = self._built(settings.num_fewshot)
            docs = settings.shard_of(
                [d for d in dict.fromkeys(b["doc_id"] for b in built) if settings.wants(d)][: settings.limit]
            )
            chosen = set(docs)
            entries = [b for b in built if b["doc_id"] in chosen]
            with self._lock:
                return scored.scored_requests(self.name, self._splitter(settings), entries)
        if self.chat.apply_chat_template and settings.endpoint_kind == "completions":
            raise TaskError(
                f"task {self.name}: --apply-chat-template sends chat messages; drop --endpoint-kind completions"
            )
        built = [b for b in self._built(settings.num_fewshot) if settings.wants(b["doc_id"])]
        return [self._request(b, settings) for b in settings.shard_of(built[: settings.limit])]

    def stream_requests(self, settings: TaskSettings, emit: Callable[[Request], None]) -> None:
        if self.scored:
            return super().stream_requests(settings, emit)
        sent = 0

        def on_entry(b: dict[str, Any]) -> None:
            nonlocal sent
            if settings.wants(b["doc_id"]) and (settings.limit is None or sent < settings.limit):
                if settings.shard is None or sent % settings.shard[1] == settings.shard[0]:
                    emit(self._request(b, settings))
                sent += 1  # the position in the unsharded run's selection

        self._built(settings.num_fewshot, on_entry)  # the whole set: the cache holds every document

    def preview(self, settings: TaskSettings) -> str:
        """The first request's text (a scored task's: its context and continuation, before tokenising)."""
        if not self.scored:
            return super().preview(settings)
        built = self._built(settings.num_fewshot)
        return built[0]["context"] + built[0]["continuation"] if built else ""

    def _request(self, b: dict[str, Any], settings: TaskSettings) -> Request:
        if self.chat.apply_chat_template:  # lm-eval's messages and request body of its chat API model
            msgs = chat.messages(b["context"])
            body = chat.chat_body(b["gen_kwargs"])
            gen_kwargs = {"until": body["stop"], "max_tokens": body["max_tokens"], "top_p": body.get("top_p")}
            gen = self._gen_params(gen_kwargs | {"temperature": body["temperature"]}, settings)
            prompt = chat.last_user_text(msgs)
            return Request(self.name, b["doc_id"], 0, prompt, gen, target=b["target"], messages=msgs)
        return Request(
            task=self.name,
            doc_id=b["doc_id"],
            sample_index=0,
            prompt=b["context"],
            gen=self._gen_params(b["gen_kwargs"], settings),
            target=b["target"],
        )

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

    def _task(self) -> Any:
        """lm-eval's task object for scoring (filters, process_results, aggregation)."""
        if self._lm_task is None:
            self._lm_task = self.lm_task()
        return self._lm_task

    def prepare(self) -> None:
        with self._lock:
            self._task()

    def per_doc_metrics(self, response_text: str, doc_id: int, prompt: str = "") -> dict[str, dict[str, Any]]:
        """{filter: {metric: value}} for one response, by lm-eval's own filters and ``process_results``."""
        cached = self._metrics_cache.get((doc_id, response_text))
        if cached is None:
            cached = generation_metrics(self._task(), self.name, response_text, doc_id, prompt)
            self._metrics_cache[(doc_id, response_text)] = cached
        return cached

    def score(self, request: Request, response: Response) -> Score:
        if self.scored:
            return scored.score_answer(request, response)
        metric = self._primary_metric()
        extracted: dict[str, str | None] = {}
        correct: dict[str, bool | None] = {}
        with self._lock:
            per_filter = self.per_doc_metrics(response.text or "", request.doc_id, request.prompt)
        for fname, values in per_filter.items():
            value = values["_filtered"]
            extracted[fname] = None if value is None else str(value)
            correct[fname] = bool(values[metric]) if metric in values else None
        status: Status = "truncated" if response.finish_reason == "length" else "ok"
        if not (response.text or "").strip():
            status = "empty"
        return Score(status=status, extracted=extracted, correct=correct, extraction="lm-eval filters")

    def _primary_metric(self) -> str:
        metrics = [m["metric"] for m in self._base_config().get("metric_list") or []]
        return metrics[0] if metrics else "exact_match"

    def summarize(self, records: Sequence[SampleFields]) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """lm-eval's aggregation and ``stderr_for_metric`` over the docs that got an answer; for scored requests
        also each document's 0/1 scores (``detail.doc_scores``) and (loglikelihood, length) pairs
        (``detail.doc_pairs``), what the gate pairs, and the metrics with neither (``detail.not_gated``, with the
        reason)."""
        task = self._task()
        raw: dict[tuple[str, str], list[Any]] = {}
        by_doc: dict[int, list[SampleFields]] = {}
        for r in records:
            if r.task == self.name:
                by_doc.setdefault(r.doc_id, []).append(r)
        n_scored = 0
        per_doc: dict[str, dict[int, Any]] = {}  # "metric,filter" -> doc_id -> lm-eval's per-document value
        for doc_id in sorted(by_doc):
            doc_records = sorted(by_doc[doc_id], key=lambda r: r.sample_index)
            if any(r.status == "api_error" for r in doc_records):
                continue  # failed requests are counted, never scored as wrong
            with self._lock:
                if self.scored:
                    extracted = [r.extracted for r in doc_records]
                    per_filter = scored_metrics(task, self.name, self.output_type, doc_id, extracted)
                else:
                    r = doc_records[0]
                    per_filter = self.per_doc_metrics(r.response or "", doc_id, r.prompt)
            if per_filter is None:
                continue  # a scored document with an answer that carried no logprobs
            n_scored += 1
            for fname, metrics in per_filter.items():
                for metric, value in metrics.items():
                    if metric != "_filtered":
                        raw.setdefault((metric, fname), []).append(value)
                        per_doc.setdefault(f"{metric},{fname}", {})[doc_id] = value
        out = aggregate(task, raw)
        detail: dict[str, Any] = {"docs_scored": n_scored, "docs_total": len(by_doc)}
        if self.scored:  # records are per request: the gate pairs documents by these
            detail["prefill"] = scored.PREFILL_NOTE
            detail["doc_scores"], detail["doc_pairs"], detail["not_gated"] = doc_scores(
                per_doc, aggregation_names(task)
            )
        return out, detail
