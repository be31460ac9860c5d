"""Where a run sends: the ``--endpoint`` URLs (normalised, each once), or the vLLM server evalkit starts, and the
model they all serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.client.model_discovery import ServedModel, list_models, resolve_model
from evalkit.config import RunConfig
from evalkit.config.endpoint import display_url, normalize_base_url
from evalkit.errors import ConfigError, EndpointError, ServerError
from evalkit.redact import redact_text, secrets_of


def endpoint_urls(cfg: RunConfig) -> list[str]:
    """The base URLs of every ``--endpoint`` (normalised); one given twice is refused."""
    if not cfg.endpoint:
        raise ConfigError("no endpoint: pass --endpoint URL (a running server) or --serve MODEL (evalkit starts vLLM)")
    urls = [normalize_base_url(u) for u in cfg.endpoints]
    shown = [display_url(u) for u in urls]
    for i, url in enumerate(shown):
        if url in shown[:i]:
            raise ConfigError(f"--endpoint {url} is given twice; give each server once")
    return urls


def start_server(server: Any, cfg: RunConfig, log_dir: Path) -> str:
    """Start ``server`` (a VLLMServer of ``cfg.server`` logging to ``log_dir``) and return its base URL; a failure
    to start is a ServerError (with the log's last lines, redacted, when it got as far as launching)."""
    from evalkit.server.vllm_process import ServerStartError

    assert cfg.server is not None
    try:
        server.start()
    except ServerStartError as e:
        if not (e.log_tail or "").strip():  # refused before launching (e.g. port in use): one line
            raise ServerError(str(e)) from None
        key = cfg.server.api_key
        shown = redact_text(e.log_tail or "", secrets_of(key.get_secret_value() if key else None))
        tail = "\n".join("    " + line for line in shown.splitlines()[-15:])
        raise ServerError(f"{e}\n  last lines of {log_dir / 'server.log'}:\n{tail}") from None
    return server.base_url.rstrip("/") + "/v1"


def served_model(cfg: RunConfig, urls: list[str], api_key: str | None) -> tuple[ServedModel, set[str]]:
    """The model every endpoint serves (its smallest ``max_model_len``), and every id the endpoints list (the ids
    a response's ``model`` may name); a one-line error naming the first endpoint that is unreachable or does not
    serve it."""
    wanted = cfg.model or (cfg.server.expected_model_name if cfg.server else None)
    first = list_models(urls[0], api_key, timeout_s=cfg.connect_timeout_s)
    served = resolve_model(first, wanted, urls[0])
    listed = {m.id for m in first}
    lens = [served.max_model_len]
    for url in urls[1:]:
        models = list_models(url, api_key, timeout_s=cfg.connect_timeout_s)
        listed |= {m.id for m in models}
        same = next((m for m in models if m.id == served.id), None)
        if same is None:
            raise EndpointError(
                f"endpoint {display_url(url)} does not serve model '{served.id}' (served there: "
                f"{', '.join(m.id for m in models) or 'none'}) but {display_url(urls[0])} does; every --endpoint "
                "must serve the same model: drop that endpoint or start it with this model"
            )
        lens.append(same.max_model_len)
    known = [n for n in lens if n is not None]
    return ServedModel(served.id, min(known) if known else None), listed
