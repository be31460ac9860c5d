"""The sweep file: a YAML mapping validated by :class:`SweepSpec` (unknown keys are refused in one line; values are
typed strictly: `true` is not a number).

tasks: [gsm8k]
limit: 200
server: {model: Qwen/Qwen3-8B, gpu_memory_utilization: 0.9}   # or endpoint: http://host:8000/v1
configs:                        # name -> server settings over `server` (with endpoint: endpoint / model)
  seqs64: {max_num_seqs: 64}
  seqs256: {max_num_seqs: 256}
sampling:                       # optional: name -> generation settings
  greedy: {temperature: 0}
  t06: {temperature: 0.6, top_p: 0.95, seed: 1}
concurrency: [8, 32, 128]       # optional: fixed levels (else --concurrency auto)
repeats: 3                      # optional: every combination 3 times, interleaved (speed from run-to-run variation)
warmup: 0                       # optional: warm-up requests per sampling config of each run (default: its level)
goodput: {ttft: 500, tpot: 50}  # optional: each run's --goodput SLOs (ms): goodput columns in the table
cost_per_gpu_hour: 2.5          # optional: each run's price; GPUs: a server config's TP x PP x DP, or gpus_billed
gpus_billed: 8                  # an endpoint sweep's GPUs (a config may set its own: {endpoint: ..., gpus_billed: 4})
recommend: {reference: seqs64, min_goodput_share: 0.9}   # optional: sweep.md's recommendation (docs/sweep.md)
search: capacity                # optional: per config x sampling, evalkit capacity's search (goodput: its SLOs)
capacity: {slo_share: 0.99, point_duration: 60, probe: ["gsm8k:0.1"], workload: {random_input_len: 512}}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalkit.config import MAX_COST_PER_GPU_HOUR, MAX_GPUS_BILLED, SEED_MAX, SEED_MIN, ServerConfig, read_config_file
from evalkit.config.server_config import world_size
from evalkit.config.slos import parse_slos
from evalkit.config.workload import WorkloadSettings, parse_probe
from evalkit.errors import ConfigError

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # a config or sampling name becomes part of a folder name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Sampling(_Strict):
    """Generation settings of one point of the sampling axis (unset: the task's default)."""

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    max_tokens: int | None = Field(default=None, ge=1)
    num_samples: int | None = Field(default=None, ge=1)
    chat_template_kwargs: dict[str, Any] | None = None


class EndpointConfig(_Strict):
    """With ``endpoint``: what a config may change (another server, or another model on it)."""

    endpoint: str | None = None
    model: str | None = None
    gpus_billed: int | None = Field(default=None, ge=1, le=MAX_GPUS_BILLED)  # the GPUs behind it, for the cost columns


class Recommend(_Strict):
    """Which combination to buy: among those whose accuracy is not worse than config ``reference``'s (the gate's
    paired accuracy rules, default policy) and whose share of requests within the SLOs is at least
    ``min_goodput_share``, the one with the most good requests per dollar (:mod:`evalkit.sweep.recommend`)."""

    reference: str
    min_goodput_share: float = Field(default=0.9, ge=0, le=1)


class CapacitySearch(_Strict):
    """``search: capacity``'s settings: each config's search as ``evalkit capacity`` runs it (its ``--slo-share``,
    ``--search``, ``--start-rate`` / ``--start-concurrency``, ``--tolerance``, ``--point-duration`` (seconds),
    ``--point-requests``, ``--max-duration`` (seconds), ``--probe TASK:SHARE`` and the workload's settings
    (``--random-input-len`` …, as ``workload:`` keys); the SLOs are ``goodput:``."""

    slo_share: float = Field(default=0.99, gt=0, le=1)
    load: Literal["rate", "concurrency"] = "rate"
    start: float | None = Field(default=None, gt=0)
    tolerance: float = Field(default=0.05, ge=0.001, lt=1)
    point_duration: float | None = Field(default=None, gt=0)
    point_requests: int | None = Field(default=None, ge=1)
    max_duration: float | None = Field(default=None, gt=0)
    probe: list[str] | None = None  # TASK:SHARE: tasks mixed into the load, their accuracy at the answer
    workload: WorkloadSettings | None = None  # the workload task's settings (random_input_len, …)

    @field_validator("probe")
    @classmethod
    def _probe(cls, v: list[str] | None) -> list[str] | None:
        for item in v or []:
            parse_probe(item)
        return v


def _one_config() -> dict[str, dict[str, Any]]:
    return {"default": {}}


class SweepSpec(_Strict):
    """A sweep: every config x every sampling point x every concurrency level, on ``tasks``."""

    tasks: list[str] = Field(min_length=1)
    limit: int | None = Field(default=None, ge=1)
    endpoint: str | None = None
    model: str | None = None
    server: dict[str, Any] | None = None
    configs: dict[str, dict[str, Any]] = Field(default_factory=_one_config)
    sampling: dict[str, Sampling] | None = None
    concurrency: list[int] | None = None
    repeats: int = Field(default=1, ge=1, le=20)
    warmup: int | None = Field(default=None, ge=0)  # each run's --warmup (None: the default warm-up)
    goodput: dict[str, float] | None = None  # each run's --goodput SLOs (ms)
    cost_per_gpu_hour: float | None = Field(default=None, gt=0, le=MAX_COST_PER_GPU_HOUR)  # each run's price
    # each run's --gpus-billed (default: its server's GPUs)
    gpus_billed: int | None = Field(default=None, ge=1, le=MAX_GPUS_BILLED)
    recommend: Recommend | None = None
    search: Literal["capacity"] | None = None  # capacity: a capacity search per config x sampling point
    capacity: CapacitySearch | None = None  # its settings (default: evalkit capacity's)

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        self._check_capacity()
        if (self.endpoint is None) == (self.server is None):
            raise ValueError("give either 'endpoint' (a running server) or 'server' (evalkit starts vLLM), not both")
        if not self.configs:
            raise ValueError("'configs' is empty; leave it out for a single config")
        if self.concurrency is not None and (not self.concurrency or any(c < 1 for c in self.concurrency)):
            raise ValueError("'concurrency' must be a list of positive integers, e.g. [8, 32, 128]")
        for axis, names in (("configs", self.configs), ("sampling", self.sampling or {})):
            for name in names:
                if not re.match(NAME_PATTERN, name) or "__" in name:
                    raise ValueError(f"{axis} name {name!r} must be letters, digits, '.', '_' or '-' (no '__')")
        for name in self.configs:
            self.server_config(name) if self.server is not None else self.endpoint_config(name)
        if self.goodput is not None:
            self.goodput = parse_slos(self.goodput)
        if self.cost_per_gpu_hour is not None:
            for name in self.configs:
                if self.gpus(name) is None:
                    raise ValueError(
                        f"configs.{name}: an endpoint with a price needs gpus_billed (top level or config)"
                    )
        if self.recommend is not None:
            if self.recommend.reference not in self.configs:
                known = ", ".join(self.configs)
                raise ValueError(f"recommend.reference {self.recommend.reference!r} is not a config; one of {known}")
            if self.goodput is None or self.cost_per_gpu_hour is None:
                raise ValueError("recommend needs goodput (the SLOs) and cost_per_gpu_hour; give both")
        return self

    def _check_capacity(self) -> None:
        if self.search is None:
            if self.capacity is not None:
                raise ValueError("'capacity' settings go with 'search: capacity'; add it or drop 'capacity'")
            return
        if self.goodput is None:
            raise ValueError("search: capacity needs goodput (the SLOs the search holds), e.g. {ttft: 2000}")
        if len(self.tasks) != 1:
            raise ValueError(
                f"search: capacity measures one load: give one task or workload in 'tasks', not {len(self.tasks)} "
                "(mix others in with capacity.probe)"
            )
        if self.recommend is not None and not (self.capacity and self.capacity.probe):
            raise ValueError(
                "recommend with search: capacity judges accuracy on capacity.probe tasks; give capacity.probe, "
                'e.g. ["gsm8k:0.05"]'
            )
        for key in ("concurrency", "repeats"):
            if key in self.model_fields_set:
                raise ValueError(f"search: capacity sets each point's load itself; drop '{key}'")

    def gpus(self, name: str) -> int | None:
        """The GPUs config ``name`` is billed for: ``gpus_billed`` (its own, with an endpoint, else the file's),
        else its server's tensor x pipeline x data parallel size; None for an endpoint without a count."""
        if self.server is None:
            return self.endpoint_config(name).gpus_billed or self.gpus_billed
        return self.gpus_billed or world_size(self.server_config(name))

    def server_config(self, name: str) -> ServerConfig:
        """The server settings of config ``name``: ``server`` with that config's overrides."""
        merged = {**(self.server or {}), **self.configs[name]}
        try:
            return ServerConfig(**merged)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise ValueError(f"configs.{name}: {f'server setting {loc!r}: ' if loc else ''}{msg}") from None

    def endpoint_config(self, name: str) -> EndpointConfig:
        """The endpoint and model of config ``name`` (with ``endpoint``)."""
        try:
            over = EndpointConfig(**self.configs[name])
        except ValidationError as e:
            loc = ".".join(str(p) for p in e.errors()[0]["loc"])
            raise ValueError(
                f"configs.{name}: unknown setting '{loc}'; with 'endpoint' a config sets gpus_billed, "
                "endpoint and model"
            ) from None
        return EndpointConfig(
            endpoint=over.endpoint or self.endpoint, model=over.model or self.model, gpus_billed=over.gpus_billed
        )


def load_spec(path: Path) -> SweepSpec:
    """Read and validate a sweep file; raises ConfigError with one line naming the bad key or value."""
    data = read_config_file(Path(path), "sweep file")
    try:
        return SweepSpec(**data)
    except ValidationError as e:
        raise ConfigError(_one_line(e, Path(path))) from None


def _one_line(err: ValidationError, path: Path) -> str:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"])
    if e["type"] == "extra_forbidden":
        where = loc.rsplit(".", 1)
        if len(where) == 1:
            known = ", ".join(SweepSpec.model_fields)
        elif where[0].startswith("sampling."):
            known = ", ".join(Sampling.model_fields)
        elif where[0] == "recommend":
            known = ", ".join(Recommend.model_fields)
        elif where[0] == "capacity":
            known = ", ".join(CapacitySearch.model_fields)
        else:
            known = "see the sweep file example in docs/sweep.md"
        return f"unknown key '{loc}' in sweep file {path}; allowed: {known}"
    msg = str(e["msg"]).removeprefix("Value error, ")
    return f"sweep file {path}: {loc + ': ' if loc else ''}{msg}"
