"""Where the server is and what it serves: URL normalisation, credentials, model discovery (through ``httpx``),
and the bounded reading of every body evalkit takes from a server.

Credentials go to the endpoint's own origin and nowhere else: ``user:password@`` is taken out of the URL
(:func:`credentials`) and sent, like the API key, only in the ``Authorization`` header, and no HTTP request
evalkit makes follows a redirect (a redirect could take the header to another origin, or turn a POST into a
GET): API requests fail with :func:`redirect_error`'s one line, metrics and health reads count as not served.

Bodies are read in pieces up to a bound on their decompressed size (:mod:`evalkit.limits`), so a gzip bomb or
an endless body stops early: :func:`read_capped` (aiohttp), :func:`http_get` (urllib, which never
decompresses), :func:`list_models` (httpx, streamed).
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, unquote, urljoin, urlsplit, urlunsplit

from evalkit.errors import EndpointError
from evalkit.limits import MAX_BODY_BYTES, BodyTooLarge, size_text
from evalkit.redact import redact_url

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

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
        raise EndpointError(
            f"endpoint {redact_url(url)!r} is not an http(s) URL; pass e.g. --endpoint http://127.0.0.1:8000/v1"
        )
    path = parts.path.rstrip("/")
    for suffix in _SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    if not path.endswith("/v1"):
        path = path + "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _host_port(parts: SplitResult) -> tuple[str, str | None]:
    """(``host:port`` of the URL, its ``user:password`` or None)."""
    userinfo, at, host_port = parts.netloc.rpartition("@")
    return host_port, (userinfo if at else None)


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p`` (where vLLM serves /health and /metrics), without credentials."""
    parts = urlsplit(base_url)
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, _host_port(parts)[0], path.rstrip("/"), "", ""))


def display_url(base_url: str) -> str:
    """The URL without credentials, query or fragment, for records and messages."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, _host_port(parts)[0], parts.path, "", ""))


def credentials(url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """(the URL without ``user:password@``, the headers that authenticate to it).

    The API key, when one is set, goes as ``Authorization: Bearer``; else the URL's ``user:password`` as
    HTTP Basic auth; else nothing is sent.

    >>> credentials("http://u:p@h:1/v1", None)
    ('http://h:1/v1', {'Authorization': 'Basic dTpw'})
    """
    parts = urlsplit(url)
    host_port, userinfo = _host_port(parts)
    bare = urlunsplit(parts._replace(netloc=host_port))
    if api_key:
        return bare, {"Authorization": f"Bearer {api_key}"}
    if userinfo:
        user, _, password = userinfo.partition(":")
        token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
        return bare, {"Authorization": f"Basic {token}"}
    return bare, {}


def redirect_error(status: int, location: str | None, url: str) -> str:
    """The one line for a redirect (``Location``) that the request to ``url`` got and evalkit does not follow."""
    try:
        target = display_url(urljoin(url, location)) if location else "another URL"
    except ValueError:  # not a URL (e.g. a broken IPv6 address)
        target = "another URL"
    return f"HTTP {status}: the endpoint redirected to {target} (use that URL as --endpoint)"


async def read_capped(resp: aiohttp.ClientResponse, limit: int = MAX_BODY_BYTES, cut: bool = False) -> bytes:
    """The body of an aiohttp response, read in pieces (decompressed, when the session decompresses) up to
    ``limit`` bytes: past it, the first ``limit`` bytes when ``cut``, else BodyTooLarge."""
    if resp.content_length is not None and resp.content_length > limit and not cut:
        raise BodyTooLarge(f"more than {size_text(limit)}")
    buf = bytearray()
    async for piece in resp.content.iter_any():
        buf += piece
        if len(buf) > limit:
            if cut:
                return bytes(buf[:limit])
            raise BodyTooLarge(f"more than {size_text(limit)}")
    return bytes(buf)


def http_get(
    url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0, limit: int = MAX_BODY_BYTES
) -> tuple[int, bytes]:
    """GET ``url`` without following redirects: (status, body); (status, b"") for an HTTP error status or a
    redirect; (0, b"") when unreachable, and with a warning when the body is longer than ``limit`` bytes."""
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        with opener.open(urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout) as resp:
            body = resp.read(limit + 1)
            if len(body) > limit:
                log.warning("evalkit: warning: %s answered more than %s; ignored", display_url(url), size_text(limit))
                return 0, b""
            return int(resp.status), body
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (urllib.error.URLError, OSError, ValueError):
        return 0, b""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler, refusing every redirect (the 3xx is then raised as an HTTPError)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_model_len: int | None


def list_models(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> list[ServedModel]:
    """``GET /v1/models`` (no redirect followed, the body read up to ``MAX_BODY_BYTES`` decompressed), with
    one-line errors for the usual mistakes."""
    import httpx

    if api_key and _host_port(urlsplit(base_url))[1] is not None:
        log.warning(
            "evalkit: warning: the user:password in the endpoint URL is ignored: the API key (EVALKIT_API_KEY, "
            "OPENAI_API_KEY or --api-key-file) is sent instead; unset it to send the URL's credentials"
        )
    base_url, headers = credentials(base_url, api_key)
    where = display_url(base_url)
    try:
        with (
            httpx.Client(follow_redirects=False, timeout=timeout_s) as client,
            client.stream("GET", base_url.rstrip("/") + "/models", headers=headers) as resp,
        ):
            _check_models_status(resp.status_code, resp, where)
            ctype = resp.headers.get("content-type", "")
            if "json" not in ctype:
                raise EndpointError(
                    f"{where}/models answered {ctype or 'no content type'}, not JSON; this is not an "
                    "OpenAI-compatible API (pass the URL of the vLLM server, ending in /v1)"
                )
            body = bytearray()
            for piece in resp.iter_bytes():  # decompressed piece by piece: a gzip bomb stops at the bound
                body += piece
                if len(body) > MAX_BODY_BYTES:
                    raise BodyTooLarge(f"more than {size_text(MAX_BODY_BYTES)}")
    except BodyTooLarge as e:
        raise EndpointError(
            f"{where}/models answered {e} (decompressed), far more than a list of models; this is not an "
            "OpenAI-compatible API, or a broken proxy (pass the URL of the vLLM server, ending in /v1)"
        ) from None
    except httpx.TimeoutException:
        raise EndpointError(f"{where} did not answer within {timeout_s:.0f}s; is the server up?") from None
    except httpx.DecodingError:
        raise EndpointError(f"{where}/models sent a body that does not decode (bad compression)") from None
    except (httpx.TransportError, httpx.InvalidURL):
        raise EndpointError(f"cannot connect to {where}; is the server running and the host/port right?") from None
    try:
        data: Any = json.loads(body)
        items = data["data"]
        return [ServedModel(id=str(m["id"]), max_model_len=m.get("max_model_len")) for m in items]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise EndpointError(
            f"{where}/models answered JSON without a 'data' list; not an OpenAI-compatible API"
        ) from None


def _check_models_status(status: int, resp: Any, where: str) -> None:
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
        raise EndpointError(redirect_error(status, resp.headers.get("location"), str(resp.request.url)))
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
