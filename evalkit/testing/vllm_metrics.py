"""vLLM-named Prometheus metrics for the test server (names, labels and buckets as in vLLM v1's
``vllm/v1/metrics/loggers.py`` and ``buckets.py``), rendered in the text exposition format the way
``prometheus_client`` writes it (``_total`` / ``_created`` samples, labels sorted)."""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from dataclasses import dataclass, field

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

COUNTERS = {
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
}
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    # the pre-v1 name of the inter-token histogram, still read by older dashboards and clients
    "vllm:time_per_output_token_seconds": ("Histogram of time per output token in seconds.", ITL_BUCKETS),
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request.",
        ITL_BUCKETS,
    ),
    "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", LATENCY_BUCKETS),
    "vllm:request_queue_time_seconds": (
        "Histogram of time spent in WAITING phase for request.",
        LATENCY_BUCKETS,
    ),
}
GAUGES = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
}

PREFIX_BLOCK = 16  # tokens per prefix-cache block, like vLLM's default block size


def _fmt(v: float) -> str:
    """Go-style float formatting, as prometheus_client's ``floatToGoString``."""
    d = float(v)
    if d == float("inf"):
        return "+Inf"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


@dataclass
class _Hist:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.buckets, v)] += 1
        self.total += v
        self.n += 1


@dataclass
class _ModelStats:
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    success: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0.0))
    hists: dict[str, _Hist] = field(default_factory=lambda: {name: _Hist(b) for name, (_, b) in HISTOGRAMS.items()})
    running: int = 0
    waiting: int = 0
    kv_tokens: int = 0


class Metrics:
    """Thread-safe store; the server updates it from its loop, tests read it from theirs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self._models: dict[str, _ModelStats] = {}
            self._created = time.time()
            self._prefix_blocks: set[int] = set()

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix block (vLLM's ``POST /reset_prefix_cache``); counters keep their values."""
        with self._lock:
            self._prefix_blocks.clear()

    def _m(self, model: str) -> _ModelStats:
        st = self._models.get(model)
        if st is None:
            st = self._models[model] = _ModelStats()
        return st

    # ---- updates
    def inc(self, model: str, name: str, v: float = 1.0) -> None:
        with self._lock:
            self._m(model).counters[name] += v

    def finished(self, model: str, reason: str) -> None:
        with self._lock:
            st = self._m(model)
            st.success[reason] = st.success.get(reason, 0.0) + 1

    def observe(self, model: str, name: str, v: float) -> None:
        with self._lock:
            self._m(model).hists[name].observe(v)

    def gauge_add(self, model: str, *, running: int = 0, waiting: int = 0, kv_tokens: int = 0) -> None:
        with self._lock:
            st = self._m(model)
            st.running += running
            st.waiting += waiting
            st.kv_tokens += kv_tokens

    def prefix_cache(self, model: str, tokens: list[str]) -> int:
        """Count a prompt against the prefix cache (blocks of PREFIX_BLOCK tokens); returns the hits."""
        with self._lock:
            hits = 0
            h = hash(model)
            missed = False
            for i in range(0, len(tokens) - PREFIX_BLOCK + 1, PREFIX_BLOCK):
                h = hash((h, *tokens[i : i + PREFIX_BLOCK]))
                if not missed and h in self._prefix_blocks:
                    hits += PREFIX_BLOCK
                else:
                    missed = True
                    self._prefix_blocks.add(h)
            if len(self._prefix_blocks) > 500_000:
                self._prefix_blocks.clear()
            st = self._m(model)
            st.counters["vllm:prefix_cache_queries"] += len(tokens)
            st.counters["vllm:prefix_cache_hits"] += hits
            return hits

    # ---- reads
    def value(self, model: str, name: str) -> float:
        """Current value of a counter (``vllm:prompt_tokens``...) or gauge, for in-process tests."""
        with self._lock:
            st = self._m(model)
            if name in st.counters:
                return st.counters[name]
            return float({"vllm:num_requests_running": st.running, "vllm:num_requests_waiting": st.waiting}[name])

    def render(self, models: list[str], kv_capacity_tokens: int, prefix_caching: bool = True) -> str:
        """The exposition text: vLLM's gauges, counters and histograms per model, and its ``vllm:cache_config_info``
        series (a KV cache of ``kv_capacity_tokens`` in blocks of :data:`PREFIX_BLOCK`, labels named as vLLM's)."""
        with self._lock:
            names = list(dict.fromkeys([*models, *self._models]))
            stats = [(m, self._m(m)) for m in names]
            created = _fmt(self._created)
            out: list[str] = []

            def lab(model: str, **extra: str) -> str:
                labels = {"engine": "0", "model_name": model, **extra}
                return "{" + ",".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"

            for name, doc in GAUGES.items():
                out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
                for model, st in stats:
                    v: float = {
                        "vllm:num_requests_running": st.running,
                        "vllm:num_requests_waiting": st.waiting,
                    }.get(name, min(1.0, st.kv_tokens / max(1, kv_capacity_tokens)))
                    out.append(f"{name}{lab(model)} {_fmt(v)}")

            def created_block(name: str, doc: str, label_sets: list[str]) -> None:
                out.extend([f"# HELP {name}_created {doc}", f"# TYPE {name}_created gauge"])
                out.extend(f"{name}_created{ls} {created}" for ls in label_sets)

            for name, doc in COUNTERS.items():
                out += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
                out.extend(f"{name}_total{lab(model)} {_fmt(st.counters[name])}" for model, st in stats)
                created_block(name, doc, [lab(model) for model, _ in stats])
            name, doc = "vllm:request_success", "Count of successfully processed requests."
            out += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
            label_sets = []
            for model, st in stats:
                for reason, v in st.success.items():
                    label_sets.append(lab(model, finished_reason=reason))
                    out.append(f"{name}_total{label_sets[-1]} {_fmt(v)}")
            created_block(name, doc, label_sets)
            for name, (doc, _) in HISTOGRAMS.items():
                out += [f"# HELP {name} {doc}", f"# TYPE {name} histogram"]
                for model, st in stats:
                    h = st.hists[name]
                    cum = 0
                    for le, c in zip((*h.buckets, float("inf")), h.counts, strict=True):
                        cum += c
                        out.append(f"{name}_bucket{lab(model, le=_fmt(le))} {_fmt(cum)}")
                    out.append(f"{name}_count{lab(model)} {_fmt(h.n)}")
                    out.append(f"{name}_sum{lab(model)} {_fmt(h.total)}")
                created_block(name, doc, [lab(model) for model, _ in stats])
            blocks = kv_capacity_tokens // PREFIX_BLOCK
            cache = {
                "block_size": str(PREFIX_BLOCK), "cache_dtype": "auto", "enable_prefix_caching": str(prefix_caching),
                "engine": "0", "gpu_memory_utilization": "0.92", "kv_cache_size_tokens": str(blocks * PREFIX_BLOCK),
                "num_cpu_blocks": "None", "num_gpu_blocks": str(blocks),
            }  # fmt: skip
            out += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                    "# TYPE vllm:cache_config_info gauge",
                    "vllm:cache_config_info{" + ",".join(f'{k}="{v}"' for k, v in cache.items()) + "} 1.0"]  # fmt: skip
            return "\n".join(out) + "\n"


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Tiny parser for the exposition format: ``{(sample_name, sorted label pairs): value}``."""
    import re

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    line_re = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        if not m:
            continue
        labels = tuple(sorted(label_re.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out
