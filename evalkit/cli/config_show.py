"""``evalkit config show``: every setting's effective value and where it came from, secrets redacted.

Sources, in the order :func:`evalkit.config.load_config` applies them: ``command line`` > ``file PATH`` >
``env EVALKIT_X`` > ``default``. The API key is shown as ``***`` (from ``api_key_file``, ``EVALKIT_API_KEY`` or
``OPENAI_API_KEY``, as :meth:`~evalkit.config.RunConfig.resolved_api_key` picks it); URLs, server flags and
server environment go through :mod:`evalkit.redact`. The last line is the run history's database
(``EVALKIT_HISTORY_URL``, its password redacted).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_settings import EnvSettingsSource

from evalkit.config import RunConfig, given, load_config, read_config_file
from evalkit.redact import redact_argv, redact_env, redact_url


@dataclass(frozen=True)
class Setting:
    """One line of ``evalkit config show``: a setting's name (``server.port`` when nested), its shown value
    (secrets redacted) and its source."""

    name: str
    value: str
    source: str


def explain_config(cli: dict[str, Any], config_file: Path | None = None) -> list[Setting]:
    """The effective settings of a run given ``cli`` values (None: not given) and ``config_file``, each with its
    source, as :func:`~evalkit.config.load_config` resolves them (its errors are raised the same way)."""
    cfg = load_config(cli, config_file)
    sources = _Sources(given(cli), read_config_file(config_file) if config_file else {}, config_file)
    out = [_line(name, getattr(cfg, name), sources.of(name)) for name in RunConfig.model_fields if name != "server"]
    out[[s.name for s in out].index("api_key")] = _api_key(cfg, sources)
    if cfg.server is None:
        out.append(Setting("server", "None", sources.of("server")))
    else:
        for name in type(cfg.server).model_fields:
            out.append(_line(f"server.{name}", getattr(cfg.server, name), sources.of("server", name)))
    out.append(_history())
    return out


def _history() -> Setting:
    """Where the run is recorded: the run history's database URL, its password redacted, or off."""
    from evalkit.history.db import shown_url
    from evalkit.history.location import ENV, history_url

    url = history_url()
    return Setting("history", shown_url(url) if url else "off", f"env {ENV}" if os.environ.get(ENV) else "default")


class _Sources:
    def __init__(self, cli: Mapping[str, Any], file: Mapping[str, Any], path: Path | None) -> None:
        self.cli, self.file, self.path = cli, file, path
        self.env: dict[str, Any] = EnvSettingsSource(RunConfig)()

    def of(self, name: str, sub: str | None = None) -> str:
        """Where ``name`` (or ``name.sub``) came from."""
        for where, data in (("command line", self.cli), (f"file {self.path}", self.file), ("env", self.env)):
            value = data.get(name)
            found = value is not None if sub is None else isinstance(value, Mapping) and sub in value
            if found:
                return _env_var(name, sub) if where == "env" else where
        return "default"


def _env_var(name: str, sub: str | None) -> str:
    """``env NAME`` as the variable is spelled in the environment (names are case-insensitive)."""
    nested = f"EVALKIT_{name.upper()}__{sub.upper()}" if sub else None
    for want in filter(None, (nested, f"EVALKIT_{name.upper()}")):
        for var in os.environ:
            if var.upper() == want:
                return f"env {var}"
    return f"env EVALKIT_{name.upper()}"


def _api_key(cfg: RunConfig, sources: _Sources) -> Setting:
    if cfg.api_key_file is not None:
        return Setting("api_key", "***", f"api_key_file {cfg.api_key_file}")
    if cfg.api_key is not None:
        return Setting("api_key", "***", sources.of("api_key"))
    if os.environ.get("OPENAI_API_KEY"):
        return Setting("api_key", "***", "env OPENAI_API_KEY")
    return Setting("api_key", "None", "default")


def _line(name: str, value: Any, source: str) -> Setting:
    return Setting(name, _show(name, value), source)


def _show(name: str, value: Any) -> str:
    """A value as shown: secrets ``***``, URL credentials ``***@``, mappings and lists as JSON."""
    if isinstance(value, SecretStr):
        return "***"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if name == "server.env" and isinstance(value, dict):
        value = redact_env(value)
    elif name in ("server.extra_args", "server.command") and isinstance(value, list):
        value = redact_argv(value)
    if isinstance(value, dict | list):
        return redact_url(json.dumps(value, default=str))
    return redact_url(str(value))
