"""Where the server is and what it serves: URL normalisation and model discovery (through ``openai``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from evalkit.errors import EndpointError

_SUFFIXES = ("/chat/completions", "/completions", "/models")


def normalize_base_url(url: str) -> str:
    """``http://h:p``, ``http://h:p/v1`` or ``http://h:p/v1/completions`` -> ``http://h:p/v1``.

    >>> normalize_base_url("http://127.0.0.1:8000/v1/completions")
    'http://127.0.0.1:8000/v1'
    """
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"endpoint {url!r} is not an http(s) URL; pass e.g. --endpoint http://127.0.0.1:8000/v1")
    path = parts.path.rstrip("/")
    for suffix in _SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    if not path.endswith("/v1"):
        path = path + "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p`` (where vLLM serves /health and /metrics)."""
    parts = urlsplit(base_url)
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", ""))


def display_url(base_url: str) -> str:
    """The URL without any credentials, for records."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_model_len: int | None


def list_models(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> list[ServedModel]:
    """``GET /v1/models`` through the openai package, with one-line errors for the usual mistakes."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", max_retries=0, timeout=timeout_s)
    where = display_url(base_url)
    try:
        raw = client.models.with_raw_response.list()
    except openai.AuthenticationError:
        raise EndpointError(
            f"{where} answered 401 Unauthorized: the API key is wrong or missing; set EVALKIT_API_KEY "
            "(or OPENAI_API_KEY, or --api-key-file)"
        ) from None
    except openai.PermissionDeniedError:
        raise EndpointError(f"{where} answered 403 Forbidden: this API key may not list models") from None
    except openai.NotFoundError:
        raise EndpointError(
            f"{where}/models answered 404: not an OpenAI-compatible API root; pass the URL that ends in /v1"
        ) from None
    except openai.APITimeoutError:
        raise EndpointError(f"{where} did not answer within {timeout_s:.0f}s; is the server up?") from None
    except openai.APIConnectionError:
        raise EndpointError(f"cannot connect to {where}; is the server running and the host/port right?") from None
    except openai.APIStatusError as e:
        raise EndpointError(f"{where}/models answered HTTP {e.status_code}; check the server log") from None
    ctype = raw.headers.get("content-type", "")
    if "json" not in ctype:
        raise EndpointError(
            f"{where}/models answered {ctype or 'no content type'}, not JSON; this is not an OpenAI-compatible "
            "API (pass the URL of the vLLM server, ending in /v1)"
        )
    try:
        data: Any = raw.http_response.json()
        items = data["data"]
        return [ServedModel(id=str(m["id"]), max_model_len=m.get("max_model_len")) for m in items]
    except (ValueError, KeyError, TypeError):
        raise EndpointError(
            f"{where}/models answered JSON without a 'data' list; not an OpenAI-compatible API"
        ) from None


def resolve_model(models: list[ServedModel], wanted: str | None, base_url: str) -> ServedModel:
    """The model to evaluate: ``wanted`` if served, else the only served one."""
    ids = [m.id for m in models]
    if wanted:
        for m in models:
            if m.id == wanted:
                return m
        raise EndpointError(
            f"model '{wanted}' is not served at {display_url(base_url)}; served: {', '.join(ids) or 'none'} (--model)"
        )
    if len(models) == 1:
        return models[0]
    if not models:
        raise EndpointError(f"{display_url(base_url)} serves no models; check the server")
    raise EndpointError(f"{display_url(base_url)} serves several models ({', '.join(ids)}); pick one with --model")
