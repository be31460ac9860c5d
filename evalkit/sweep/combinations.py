"""The combinations of a sweep, in the order they run: config by config (a server starts once per distinct
server config), then sampling point, then concurrency level; with ``repeats: N`` every combination N times,
the repeats interleaved among the combinations that share a server or endpoint (all of them once, then all
again), so that drift of the machine over time spreads over every combination alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalkit.config import ServerConfig
from evalkit.sweep.sweep_file import Sampling, SweepSpec

DEFAULT = "default"  # the sampling name when the sweep has no sampling axis


@dataclass(frozen=True)
class Combination:
    """One run of the sweep. ``server``: what to start (None with an endpoint); ``settings``: the RunConfig
    fields of this run (tasks, limit, sampling, concurrency, endpoint/model for an endpoint sweep)."""

    config: str
    sampling: str
    concurrency: int | None
    server: ServerConfig | None
    settings: dict[str, Any] = field(default_factory=dict)
    repeat: int | None = None  # 1..N with ``repeats: N`` (N > 1), else None

    @property
    def name(self) -> str:
        """The run dir's name: ``<config>__<sampling>__c<level>`` (``cauto`` without a concurrency axis), then
        ``__r<k>`` for the k-th repeat."""
        level = self.concurrency if self.concurrency is not None else "auto"
        return f"{self.config}__{self.sampling}__c{level}" + (f"__r{self.repeat}" if self.repeat is not None else "")

    @property
    def point(self) -> str:
        """The combination without its repeat: the runs of one config, sampling point and level."""
        level = self.concurrency if self.concurrency is not None else "auto"
        return f"{self.config}__{self.sampling}__c{level}"

    def server_key(self) -> str | None:
        """Equal for combinations that can share one server process."""
        return None if self.server is None else self.server.model_dump_json()


def plan(spec: SweepSpec) -> list[Combination]:
    """Every config x sampling point x concurrency level, grouped so that combinations with the same server
    config are next to each other."""
    samplings: dict[str, Sampling | None] = dict(spec.sampling) if spec.sampling else {DEFAULT: None}
    levels: list[int | None] = list(spec.concurrency) if spec.concurrency else [None]
    out: list[Combination] = []
    for config in spec.configs:
        server = spec.server_config(config) if spec.server is not None else None
        base: dict[str, Any] = {"tasks": list(spec.tasks), "limit": spec.limit}
        if spec.warmup is not None:  # each run warms its own server and sampling point (evalkit/client/warmup.py)
            base["warmup"] = spec.warmup
        if spec.goodput is not None:
            base["goodput"] = dict(spec.goodput)
        if spec.cost_per_gpu_hour is not None:  # the sweep starts the server itself: the run is told its GPUs
            base.update(cost_per_gpu_hour=spec.cost_per_gpu_hour, gpus_billed=spec.gpus(config))
        if server is None:
            ep = spec.endpoint_config(config)
            base.update(endpoint=ep.endpoint, model=ep.model)
        else:
            base.update(model=server.expected_model_name)
        for sname, sampling in samplings.items():
            gen = sampling.model_dump(exclude_none=True) if sampling is not None else {}
            for level in levels:
                settings = {**base, **gen, "concurrency": level if level is not None else "auto"}
                for k in range(1, spec.repeats + 1):
                    repeat = k if spec.repeats > 1 else None
                    out.append(Combination(config, sname, level, server, settings, repeat))
    order = {key: i for i, key in enumerate(dict.fromkeys(c.server_key() for c in out))}
    # stable: within a server (or the endpoints), the file's order, repeat by repeat
    return sorted(out, key=lambda c: (order[c.server_key()], c.repeat or 0))
