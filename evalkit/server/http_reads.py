"""The bounded, redirect-free reads of what a server answers, for the server layer (``/health``, ``/v1/models``,
``/version``, ``/metrics``) and the requests layer (API responses).

No HTTP request evalkit makes follows a redirect (a redirect could take the ``Authorization`` header to another
origin, or turn a POST into a GET): API requests fail with one line
(:func:`~evalkit.client.model_discovery.redirect_error`), metrics and health reads count as not served. Bodies are read
in pieces up to a bound on their decompressed size (:mod:`evalkit.limits`), so a gzip bomb or an endless body
stops early: :func:`read_capped` (aiohttp), :func:`http_get` (urllib, which never decompresses).
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evalkit.config.endpoint import display_url
from evalkit.limits import MAX_BODY_BYTES, BodyTooLarge, size_text

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)


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
