"""Run configuration, resolved in one place: CLI > config file (YAML/TOML/JSON) > ``EVALKIT_*`` env > defaults."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from evalkit.config.server_config import ServerConfig, world_size
from evalkit.config.settings_files import read_settings_file
from evalkit.config.shard import Shard, parse_shard
from evalkit.config.slos import parse_slos
from evalkit.config.workload import WorkloadSettings
from evalkit.errors import ConfigError, warn

SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # vLLM's OpenAI server: seed as a torch long (int64)
# --gpus-billed and --cost-per-gpu-hour: more is a typo (past 2**63 GPUs unwritable, an infinite price $inf)
MAX_GPUS_BILLED = 1_000_000
MAX_COST_PER_GPU_HOUR = 1_000_000.0
# EVALKIT_* variables read outside RunConfig: the prompt cache (evalkit/tasks/prompt_cache.py), the download cache
# of scripts/setup_vllm_cpu.sh, the model of scripts/demo.sh and the vllm tests, the browser tests' Chromium, the
# run history's database (evalkit/history/db.py) and the PostgreSQL server of its tests (scripts/postgres.sh)
OTHER_ENV = frozenset(
    {
        "EVALKIT_CACHE_DIR",
        "EVALKIT_CACHE",
        "EVALKIT_VLLM_MODEL",
        "EVALKIT_CHROMIUM",
        "EVALKIT_HISTORY_URL",
        "EVALKIT_TEST_POSTGRES_URL",
        "EVALKIT_TEST_POSTGRES_DIR",
    }
)


class RunConfig(BaseSettings):
    """Everything a run needs. Unknown keys are refused, and so are non-finite numbers (nan, inf).

    Example::

        cfg = load_config(cli={"tasks": ["gsm8k"], "endpoint": "http://127.0.0.1:8000/v1", "limit": 50})
    """

    model_config = SettingsConfigDict(
        env_prefix="EVALKIT_", extra="forbid", env_nested_delimiter="__", allow_inf_nan=False
    )

    tasks: list[str] = Field(default_factory=list)
    endpoint: str | list[str] | None = None  # several: one eval sharded over them (same model on each)
    model: str | None = None
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    endpoint_kind: Literal["completions", "chat"] | None = None
    concurrency: int | Literal["auto"] = "auto"
    max_concurrency: int = Field(default=512, ge=1)
    auto_start: int = Field(default=128, ge=1)
    # warm-up requests per sampling config before the timed phase (evalkit/client/warmup.py); None: the run's
    # concurrency level; 0: none
    warmup: int | None = Field(default=None, ge=0)
    limit: int | None = Field(default=None, ge=1)
    num_fewshot: int | None = Field(default=None, ge=0)
    num_samples: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_length: int | None = Field(default=None, ge=2)
    seed: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    drop_reasoning: bool | None = None  # multi-turn tool tasks: earlier turns' reasoning left out (task default: yes)
    output_dir: Path | None = None
    tasks_dir: list[Path] = Field(default_factory=list)
    # lm-eval:NAME tasks: lm-eval's --include_path folders, a local tokenizer (else the server's /tokenize), and a
    # folder of local data files (<task>/<split>.jsonl) instead of lm-eval's dataset loading
    include_path: list[Path] = Field(default_factory=list)
    tokenizer: str | None = None
    data_dir: Path | None = None
    # lm-eval:NAME tasks: lm-eval's --apply_chat_template, --fewshot_as_multiturn (None: on with the chat template)
    # and --system_instruction (evalkit/tasks/lmeval_chat.py)
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool | None = None
    system_instruction: str | None = None
    fresh: bool = False
    max_error_rate: float = Field(default=0.0, ge=0, le=1)
    report: bool = True
    # --rest-run: a run of the probe tasks at rest, beside whose accuracy the report shows the probes' under load
    rest_run: Path | None = None
    connect_timeout_s: float = Field(default=10.0, gt=0)
    idle_timeout_s: float = Field(default=120.0, gt=0)  # between data events, once a request's tokens flow
    ttft_timeout_s: float = Field(default=1800.0, gt=0)  # from a send to its first data event (queue wait, prefill)
    max_attempts: int = Field(default=5, ge=1)
    max_retry_s: float = Field(default=600.0, gt=0)
    allow_model_mismatch: bool = False  # accept responses naming a model the endpoint does not list (not the run's)
    server: ServerConfig | None = None
    docs: list[int] | None = None  # only these document ids (evalkit watch: one slice of the task per tick)
    # the arrival process (evalkit/client/arrivals.py, docs/load.md): --request-rate R requests/s, Poisson by
    # default (gamma of shape --burstiness), or --arrival constant (request i due at i/R); a linear ramp instead
    # of a rate; --duration: no request is sent after so many seconds of the timed phase
    request_rate: float | None = Field(default=None, gt=0)
    arrival: Literal["poisson", "constant"] | None = None
    burstiness: float | None = Field(default=None, gt=0)
    ramp_up_start_rps: float | None = Field(default=None, gt=0)
    ramp_up_end_rps: float | None = Field(default=None, gt=0)
    duration_s: float | None = Field(default=None, gt=0)
    # processes sending the timed phase's requests (evalkit/runner/sender_processes.py); None: as many as the
    # offered load needs, at most the cores
    client_processes: int | None = Field(default=None, ge=1)
    # --start-at: the wall-clock time (Unix seconds) the timed phase's schedule counts from, shared by a load's
    # shards; the phase waits for it (started late: what is due already goes at once; a resumed run: ignored)
    start_at: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # --shard I/N: only the I-th of N parts of each task's documents (config/shard.py), as (index, count)
    shard: tuple[int, int] | None = None
    user: str | None = None  # the OpenAI ``user`` field sent with every request
    headers: dict[str, str] = Field(default_factory=dict)  # extra HTTP headers sent with every request
    # latency SLOs in ms (ttft, tpot, e2el), as vllm bench serve --goodput: the summary's goodput figures
    goodput: dict[str, float] | None = None
    # dollars per GPU-hour: the summary's cost figures
    cost_per_gpu_hour: float | None = Field(default=None, gt=0, le=MAX_COST_PER_GPU_HOUR)
    # GPUs the cost is for (default: the started server's)
    gpus_billed: int | None = Field(default=None, ge=1, le=MAX_GPUS_BILLED)
    # the workload tasks' settings (random, sharegpt, trace, sessions) and the probes mixed into them
    workload: WorkloadSettings = Field(default_factory=WorkloadSettings)

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto":
            if not v.isdigit() or int(v) < 1:
                raise ValueError("must be a positive integer or 'auto'")
            return int(v)
        if isinstance(v, int) and v < 1:
            raise ValueError("must be a positive integer or 'auto'")
        return v

    @field_validator("duration_s", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return parse_duration_s(v) if isinstance(v, str) else v

    def check_arrivals(self) -> None:
        """ConfigError for arrival and sender settings that do not go together (each field alone is checked by its
        type)."""
        ramp = (self.ramp_up_start_rps, self.ramp_up_end_rps)
        if (ramp[0] is None) != (ramp[1] is None):
            given = "--ramp-up-start-rps" if ramp[1] is None else "--ramp-up-end-rps"
            raise ConfigError(f"{given} alone is no ramp; give both --ramp-up-start-rps and --ramp-up-end-rps")
        paced = self.request_rate is not None or ramp[0] is not None
        if ramp[0] is not None and self.request_rate is not None:
            raise ConfigError("give either --request-rate or a ramp (--ramp-up-start-rps/--ramp-up-end-rps), not both")
        for name, value in (("--arrival", self.arrival), ("--burstiness", self.burstiness)):
            if value is not None and not paced:
                raise ConfigError(f"{name} shapes the arrivals at --request-rate R; give --request-rate too")
        if self.burstiness is not None and self.arrival == "constant":
            raise ConfigError("--burstiness shapes Poisson/gamma arrivals; --arrival constant has none: drop one")
        if self.client_processes is not None and self.client_processes > 1 and self.in_flight_cap() == "auto":
            raise ConfigError(
                f"--client-processes {self.client_processes} splits a fixed --concurrency or a --request-rate over "
                "processes; --concurrency auto tunes one process's: give --concurrency N or --request-rate R"
            )
        if paced and self.concurrency == "auto" and "concurrency" in self.model_fields_set:
            raise ConfigError(
                "--concurrency auto tunes requests in flight, the arrival process sets the load; with "
                "--request-rate give --concurrency N to cap requests in flight, or leave it out for no cap"
            )

    def arrivals_paced(self) -> bool:
        """Whether an arrival process (a rate or a ramp) sets when requests are sent."""
        return self.request_rate is not None or self.ramp_up_start_rps is not None

    def in_flight_cap(self) -> int | Literal["auto"] | None:
        """The cap on requests in flight: ``concurrency``; None (no cap, as vllm bench serve without
        --max-concurrency) under an arrival process where ``concurrency`` was not given."""
        if self.arrivals_paced() and "concurrency" not in self.model_fields_set:
            return None
        return self.concurrency

    @field_validator("shard", mode="before")
    @classmethod
    def _shard(cls, v: Any) -> Any:
        """``I/N``, ``auto/N`` or ``N`` (the index from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID)."""
        if isinstance(v, str | int) and not isinstance(v, bool):
            part = parse_shard(str(v))
            return (part.index, part.count)
        if isinstance(v, list | tuple) and len(v) == 2:
            part = parse_shard(f"{v[0]}/{v[1]}")
            return (part.index, part.count)
        return v

    def shard_part(self) -> Shard | None:
        """The run's shard (None: the whole task)."""
        return None if self.shard is None else Shard(*self.shard)

    @field_validator("warmup", mode="before")
    @classmethod
    def _warmup(cls, v: Any) -> Any:
        """``true``/``false`` (a config file or EVALKIT_WARMUP) mean the default warm-up and none."""
        if isinstance(v, str) and v.strip().lower() in ("true", "false", "on", "off", "yes", "no"):
            v = v.strip().lower() in ("true", "on", "yes")
        if isinstance(v, bool):
            return None if v else 0
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int | None) -> int | None:
        if v is not None and not SEED_MIN <= v <= SEED_MAX:
            raise ValueError(f"must fit in a signed 64-bit integer ({SEED_MIN}..{SEED_MAX}, vLLM's range)")
        return v

    @field_validator("chat_template_kwargs", mode="before")
    @classmethod
    def _ctk(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError as e:
                raise ValueError(f"not valid JSON ({e.msg}); pass e.g. '{{\"thinking\": true}}'") from None
            if not isinstance(v, dict):
                raise ValueError("must be a JSON object, e.g. '{\"enable_thinking\": true}'")
        return v

    @field_validator("goodput", mode="before")
    @classmethod
    def _goodput(cls, v: Any) -> Any:
        """``["ttft:500", "tpot:20"]``, ``"ttft:500,tpot:20"`` or a mapping, as {key: milliseconds}."""
        if v is None or (isinstance(v, list | tuple | dict) and not v):
            return None
        return parse_slos([v] if isinstance(v, str) else v)

    def billed_gpus(self) -> int | None:
        """The GPUs the run's cost is for: ``gpus_billed``, else the started server's tensor x pipeline x data
        parallel size; None without ``cost_per_gpu_hour``. ConfigError for a cost on an endpoint with no count."""
        if self.cost_per_gpu_hour is None:
            return None
        if self.gpus_billed is not None:
            return self.gpus_billed
        if self.server is None:
            raise ConfigError(
                "--cost-per-gpu-hour on an endpoint: evalkit does not know its GPUs; give --gpus-billed N"
            )
        return world_size(self.server)

    @field_validator("endpoint", mode="before")
    @classmethod
    def _endpoint(cls, v: Any) -> Any:
        if isinstance(v, list | tuple):
            if not v:
                return None
            if not all(isinstance(u, str) and u.strip() for u in v):
                raise ValueError("must be a URL or a list of URLs")
            return v[0] if len(v) == 1 else list(v)
        return v

    @property
    def endpoints(self) -> list[str]:
        """The endpoint URLs as given (one, several, or none)."""
        if self.endpoint is None:
            return []
        return [self.endpoint] if isinstance(self.endpoint, str) else list(self.endpoint)

    def resolved_api_key(self) -> str | None:
        """The first line of api_key_file when one is given (command line/file beat the environment), else
        EVALKIT_API_KEY, else OPENAI_API_KEY."""
        if self.api_key_file is not None:
            try:
                lines = self.api_key_file.read_text().strip().splitlines()
            except OSError as e:
                raise ConfigError(f"cannot read --api-key-file {self.api_key_file}: {e.strerror}") from None
            return (lines[0].strip() or None) if lines else None
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get("OPENAI_API_KEY") or None


def _env_names() -> tuple[set[str], tuple[str, ...]]:
    """The EVALKIT_* names RunConfig reads (a nested setting as ``EVALKIT_SERVER__FIELD``) and the prefixes under
    which a mapping setting takes its keys (``EVALKIT_SERVER__ENV__NAME``)."""
    names = {f"EVALKIT_{f.upper()}" for f in RunConfig.model_fields} | {
        f"EVALKIT_SERVER__{f.upper()}" for f in ServerConfig.model_fields
    }
    return names | OTHER_ENV, ("EVALKIT_CHAT_TEMPLATE_KWARGS__", "EVALKIT_SERVER__ENV__")


def warn_unknown_env(environ: Mapping[str, str]) -> None:
    """One warning line for each ``EVALKIT_*`` variable evalkit does not read (a typo is otherwise ignored
    silently), naming the closest known variable."""
    known, prefixes = _env_names()
    for var in sorted(environ):
        name = var.upper()
        if not name.startswith("EVALKIT_") or name in known or name.startswith(prefixes):
            continue
        close = difflib.get_close_matches(name[8:], sorted(k[8:] for k in known), n=1)
        hint = f"did you mean EVALKIT_{close[0]}?" if close else "evalkit run --help lists the settings"
        warn(f"environment variable {var} is not an evalkit setting and is ignored; {hint}")


def read_config_file(path: Path, what: str = "config file") -> dict[str, Any]:
    """A YAML, TOML (``.toml``) or JSON (``.json``) config file as a dict, read by
    :func:`evalkit.config.settings_files.read_settings_file` (size, encoding, YAML aliases and nesting checked)."""
    data = read_settings_file(path, what, ConfigError)
    if "api_key" in data:
        raise ConfigError(f"{what} {path}: api_key does not belong in a file; set EVALKIT_API_KEY or api_key_file")
    return data


def _one_line(err: ValidationError, source: str) -> str:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"]) or "config"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    if e["type"] == "extra_forbidden":
        known = ", ".join(sorted(RunConfig.model_fields)) if len(e["loc"]) == 1 else "see evalkit run --help"
        return f"unknown setting '{loc}' in {source}; known settings: {known}{more}"
    value = e.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    msg = str(e["msg"]).removeprefix("Value error, ")
    return f"invalid value for '{loc}' in {source}: {msg}{shown}{more}"


def given(cli: dict[str, Any]) -> dict[str, Any]:
    """The command-line values that were given (None, [] and an unset ``--fresh`` were not)."""
    return {k: v for k, v in cli.items() if not (v is None or v == [] or (v is False and k in ("fresh",)))}


def parse_duration_s(text: str) -> float:
    """``"90"``, ``"90s"``, ``"10m"``, ``"1.5h"`` as seconds; ValueError naming the form otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", text.lower())
    if m is None:
        raise ValueError("must be seconds, or a number with s, m or h (e.g. 90s, 10m, 1h)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def load_config(cli: dict[str, Any], config_file: Path | None = None) -> RunConfig:
    """Merge CLI values (None = not given) over the config file, over EVALKIT_* env, over defaults."""
    warn_unknown_env(os.environ)
    merged: dict[str, Any] = read_config_file(config_file) if config_file else {}
    for key, value in given(cli).items():
        if key in ("server", "workload") and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    source = f"{config_file} / command line" if config_file else "command line / EVALKIT_* environment"
    try:
        cfg = RunConfig(**merged)
        cfg.check_arrivals()
        return cfg
    except ValidationError as e:
        raise ConfigError(_one_line(e, source)) from None
    except SettingsError as e:  # an EVALKIT_* variable for a list/mapping setting that is not JSON
        m = re.search(r'field "(\w+)"', str(e))
        var = f"EVALKIT_{m.group(1).upper()}" if m else "an EVALKIT_* variable"
        raise ConfigError(
            f"environment variable {var} does not parse: lists and mappings are given as JSON, "
            """e.g. EVALKIT_TASKS='["gsm8k"]'"""
        ) from None
