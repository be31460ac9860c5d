"""What the server serves: model discovery (``GET /v1/models`` through aiohttp, read up to a bound on its
decompressed size), the model a run evaluates, and the one line for a redirect evalkit does not follow.

The endpoint URL and its credentials are :mod:`evalkit.config.endpoint`'s; the body is read by
:func:`evalkit.server.http_reads.read_capped`, as every other aiohttp body evalkit reads.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from evalkit.config.endpoint import credentials, display_url, split_netloc
from evalkit.errors import EndpointError
from evalkit.limits import BodyTooLarge
from evalkit.server.http_reads import read_capped

log = logging.getLogger(__name__)


def redirect_error(status: int, location: str | None, url: str) -> str:
    """The one line for a redirect (``Location``) that the request to ``url`` got and evalkit does not follow."""
    try:
        target = display_url(urljoin(url, location)) if location else "another URL"
    except ValueError:  # not a URL (e.g. a broken IPv6 address)
        target = "another URL"
    return f"HTTP {status}: the endpoint redirected to {target} (use that URL as --endpoint)"


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_model_len: int | None


def list_models(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> list[ServedModel]:
    """``GET /v1/models`` (no redirect followed, the body read up to ``MAX_BODY_BYTES`` decompressed), with
    one-line errors for the usual mistakes."""
    if api_key and split_netloc(urlsplit(base_url))[1] is not None:
        log.warning(
            "evalkit: warning: the user:password in the endpoint URL is ignored: the API key (EVALKIT_API_KEY, "
            "OPENAI_API_KEY or --api-key-file) is sent instead; unset it to send the URL's credentials"
        )
    base_url, headers = credentials(base_url, api_key)
    where = display_url(base_url)
    body = asyncio.run(_models_body(base_url.rstrip("/") + "/models", headers, where, timeout_s))
    try:
        data: Any = json.loads(body)
        items = data["data"]
        return [ServedModel(id=str(m["id"]), max_model_len=m.get("max_model_len")) for m in items]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise EndpointError(
            f"{where}/models answered JSON without a 'data' list; not an OpenAI-compatible API"
        ) from None


async def _models_body(url: str, headers: dict[str, str], where: str, timeout_s: float) -> bytes:
    """The body of ``GET url`` (the ``/models`` of the endpoint shown as ``where``) through aiohttp, the client
    every request of a run goes through; one-line errors for what is not a JSON answer."""
    import aiohttp

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(url, headers=headers, allow_redirects=False) as resp,
        ):
            _check_models_status(resp.status, resp.headers.get("location"), url, where)
            ctype = resp.headers.get("content-type", "")
            if "json" not in ctype:
                raise EndpointError(
                    f"{where}/models answered {ctype or 'no content type'}, not JSON; this is not an "
                    "OpenAI-compatible API (pass the URL of the vLLM server, ending in /v1)"
                )
            return await read_capped(resp)  # decompressed piece by piece: a gzip bomb stops at the bound
    except BodyTooLarge as e:
        raise EndpointError(
            f"{where}/models answered {e} (decompressed), far more than a list of models; this is not an "
            "OpenAI-compatible API, or a broken proxy (pass the URL of the vLLM server, ending in /v1)"
        ) from None
    except asyncio.TimeoutError:  # TimeoutError from Python 3.11 on; aiohttp's own timeouts subclass it
        raise EndpointError(f"{where} did not answer within {timeout_s:.0f}s; is the server up?") from None
    except aiohttp.ClientPayloadError:
        raise EndpointError(f"{where}/models sent a body that does not decode (bad compression)") from None
    except (aiohttp.ClientError, ValueError):  # connection refused or reset, a bad host or URL
        raise EndpointError(f"cannot connect to {where}; is the server running and the host/port right?") from None


def _check_models_status(status: int, location: str | None, url: str, where: str) -> None:
    """The one-line error for a ``/models`` status that is not a success (nothing for 2xx)."""
    if status == 401:
        raise EndpointError(
            f"{where} answered 401 Unauthorized: the API key is wrong or missing; set EVALKIT_API_KEY "
            "(or OPENAI_API_KEY, or --api-key-file)"
        )
    if status == 403:
        raise EndpointError(f"{where} answered 403 Forbidden: this API key may not list models")
    if status == 404:
        raise EndpointError(
            f"{where}/models answered 404: not an OpenAI-compatible API root; pass the URL that ends in /v1"
        )
    if 300 <= status < 400:
        raise EndpointError(redirect_error(status, location, url))
    if status >= 400 or status < 200:
        raise EndpointError(f"{where}/models answered HTTP {status}; check the server log")


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
