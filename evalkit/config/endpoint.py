"""Where the server is, as configured: an endpoint URL normalised to its ``/v1`` base, its root (where vLLM serves
``/health`` and ``/metrics``), its form for records and messages, and the credentials it carries.

Credentials go to the endpoint's own origin and nowhere else: ``user:password@`` is taken out of the URL
(:func:`credentials`) and sent, like the API key, only in the ``Authorization`` header. String work only, no
network: what reads from the server is :mod:`evalkit.server.http_reads` and :mod:`evalkit.client`.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from evalkit.errors import EndpointError
from evalkit.redact import redact_url

_SUFFIXES = ("/chat/completions", "/completions", "/models")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/+")  # a scheme (host:port has digits after its colon)


def normalize_base_url(url: str) -> str:
    """``http://h:p``, ``http://h:p/v1`` or ``http://h:p/v1/completions`` -> ``http://h:p/v1``.

    >>> normalize_base_url("http://127.0.0.1:8000/v1/completions")
    'http://127.0.0.1:8000/v1'
    """
    raw = url.strip()
    mistyped = _SCHEME.match(raw)
    if "://" not in raw and mistyped:  # htp:/host, http:/host: a scheme, not host:port
        raise EndpointError(
            f"endpoint {redact_url(url)!r} is not a valid URL (it starts {mistyped.group(0)!r}, not http:// or "
            "https://); pass e.g. --endpoint http://127.0.0.1:8000/v1"
        )
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


def split_netloc(parts: SplitResult) -> tuple[str, str | None]:
    """(``host:port`` of the URL, its ``user:password`` or None)."""
    userinfo, at, host_port = parts.netloc.rpartition("@")
    return host_port, (userinfo if at else None)


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p`` (where vLLM serves /health and /metrics), without credentials."""
    parts = urlsplit(base_url)
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, split_netloc(parts)[0], path.rstrip("/"), "", ""))


def display_url(base_url: str) -> str:
    """The URL without credentials, query or fragment, for records and messages."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, split_netloc(parts)[0], parts.path, "", ""))


def credentials(url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """(the URL without ``user:password@``, the headers that authenticate to it).

    The API key, when one is set, goes as ``Authorization: Bearer``; else the URL's ``user:password`` as
    HTTP Basic auth; else nothing is sent.

    >>> credentials("http://u:p@h:1/v1", None)
    ('http://h:1/v1', {'Authorization': 'Basic dTpw'})
    """
    parts = urlsplit(url)
    host_port, userinfo = split_netloc(parts)
    bare = urlunsplit(parts._replace(netloc=host_port))
    if api_key:
        return bare, {"Authorization": f"Bearer {api_key}"}
    if userinfo:
        user, _, password = userinfo.partition(":")
        token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
        return bare, {"Authorization": f"Basic {token}"}
    return bare, {}
