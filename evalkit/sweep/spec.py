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
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evalkit.config import SEED_MAX, SEED_MIN, ServerConfig, read_config_file
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

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
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
        return self

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
                f"configs.{name}: unknown setting '{loc}'; with 'endpoint' a config may set endpoint and model"
            ) from None
        return EndpointConfig(endpoint=over.endpoint or self.endpoint, model=over.model or self.model)


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
        else:
            known = "see the sweep file example in docs/sweep.md"
        return f"unknown key '{loc}' in sweep file {path}; allowed: {known}"
    msg = str(e["msg"]).removeprefix("Value error, ")
    return f"sweep file {path}: {loc + ': ' if loc else ''}{msg}"
