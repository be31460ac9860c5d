"""Secrets kept out of everything evalkit records or shows: URL credentials, secret flags, secret variables,
and the credentials a server may quote back in what it sends (:func:`redact_text`).

>>> redact_url("http://user:pw@127.0.0.1:8000/v1")
'http://***@127.0.0.1:8000/v1'
>>> redact_url("https://hooks.example.com/alert?token=abc&channel=ops")
'https://hooks.example.com/alert?token=***&channel=ops'
>>> redact_argv(["evalkit", "run", "--endpoint", "user:pw@host:8000", "--server-env", "HF_TOKEN=hf_x"])
['evalkit', 'run', '--endpoint', '***@host:8000', '--server-env', 'HF_TOKEN=***']
>>> redact_text("invalid header Authorization: Bearer sk-live-123456", ["sk-live-123456"])
'invalid header Authorization: ***'
>>> redact_db_url("postgresql:/bob:s3cret pw@db/h")
'postgresql:/***@db/h'
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urlsplit

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_PATH_WORDS = ("FILE", "PATH", "DIR")  # --api-key-file names where a secret is, not the secret
# the userinfo of a URL (scheme://user:password@host), or of a scheme-less one at the start of a value
# (user:password@host, also after "--flag=")
_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/?#]*@"
    r"|(?P<bare>^|(?<==))[^\s/?#@:=]+:[^\s/?#]*@"
)
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a query parameter (?name=value or &name=value); its value is a secret when the name holds one of these words
_QUERY_PARAM = re.compile(r"(?P<head>[?&](?P<name>[^=&#?\s\"']+)=)(?P<value>[^&#\s\"']*)")
_QUERY_WORDS = (*SECRET_WORDS, "SIG", "AUTH", "PASS", "CREDENTIAL")


def _query_secret(m: re.Match[str]) -> str:
    name = m.group("name").upper()
    secret = any(w in name for w in _QUERY_WORDS) and m.group("value")
    return m.group("head") + ("***" if secret else m.group("value"))


# credentials in free text (a server's error message): the value of an Authorization / API-key header or field,
# a Bearer or Basic token (one with a digit or symbol: not "Basic auth"), an OpenAI-style sk- key, a
# user:password@host standing alone
_TEXT_SECRETS = re.compile(
    r"(?i)(?P<name>\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_]?key)(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
    r"(?:(?:bearer|basic|token)\s+)?[^\s\"',;)}\]]+"
    r"|(?P<scheme>\b(?:bearer|basic))\s+(?=[A-Za-z0-9._~+/=-]*[0-9+/=._~-])[A-Za-z0-9._~+/=-]{4,}"
    r"|\bsk-[A-Za-z0-9_-]{6,}"
    r"|(?P<userinfo>(?<![^\s\"'(<])[^\s/?#@:=\"'(<]+:[^\s/?#@\"']+@(?=[\w\[]))"
)
MIN_SECRET_CHARS = 4  # a shorter literal secret is not searched for in texts (it would cut up ordinary words)


def redact_url(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it replaced by ``***@``, and the values of query
    parameters named like a secret (``token``, ``api_key``, ``sig``, ``password``, ``auth``...) by ``***``."""
    text = _USERINFO.sub(lambda m: (m.group("scheme") or m.group("bare") or "") + "***@", text)
    return _QUERY_PARAM.sub(_query_secret, text)


# a database URL's scheme as typed, with whatever separators follow it (``postgresql://``, ``postgresql:/``,
# ``postgresql//``, ``postgresql:// ``): what comes after it up to the URL's last @ is its user and password
_DB_SCHEME = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*[:/\s]+")


def db_url_userinfo(url: str) -> str:
    """The ``user:password`` part of a database URL, whatever its shape: all between its scheme (and the ``:``,
    ``/`` and spaces after it) and its last ``@``; "" when it has no ``@``."""
    head, at, _ = url.rpartition("@")
    if not at:
        return ""
    scheme = _DB_SCHEME.match(head)
    return head[scheme.end() :] if scheme else head


def redact_db_url(url: str) -> str:
    """A database URL (``EVALKIT_HISTORY_URL``) fit to show, whatever its shape (a missing ``/`` or ``:``, spaces,
    an ``@`` or ``/`` in the password): its :func:`db_url_userinfo` replaced by ``***``, then
    :func:`redact_url` (secret query parameters). Nothing of it is parsed first, so a URL that does not parse
    is shown as safely as one that does."""
    userinfo = db_url_userinfo(url)
    if userinfo:
        head, _, rest = url.rpartition("@")
        url = head[: len(head) - len(userinfo)] + "***@" + rest
    return redact_url(url)


def _secret_variable(name: str) -> bool:
    """An environment variable whose name contains KEY, TOKEN, SECRET or PASSWORD."""
    return any(w in name.upper() for w in SECRET_WORDS)


def _secret_flag(flag: str) -> bool:
    """A flag with a word KEY, TOKEN, SECRET or PASSWORD (``--hf-token``; not ``--tokenizer-mode``, and not
    ``--api-key-file``, whose value is a path)."""
    words = flag[2:].upper().split("-")
    return flag.startswith("--") and words[-1] not in _PATH_WORDS and any(w in SECRET_WORDS for w in words)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Values of variables whose names contain KEY, TOKEN, SECRET or PASSWORD become "***"; credentials in
    URL values (``HTTPS_PROXY=http://user:pw@proxy``) become ``***@``."""
    return {k: "***" if _secret_variable(k) else redact_url(v) for k, v in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    """A command line fit to record: values of flags such as ``--api-key`` / ``--hf-token`` and of
    ``NAME=VALUE`` arguments with a secret name (``--server-env HF_TOKEN=…``) become "***", URL credentials
    ``***@`` (``--tokenizer-mode`` and ``--api-key-file PATH`` are left alone)."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        name, eq, _ = arg.partition("=")
        if eq and (_secret_flag(name) or (_VARIABLE.fullmatch(name) and _secret_variable(name))):
            out.append(name + "=***")
        elif i > 0 and _secret_flag(argv[i - 1]) and "=" not in argv[i - 1] and not arg.startswith("--"):
            out.append("***")
        else:
            out.append(redact_url(arg))
    return out


def _text_secret(m: re.Match[str]) -> str:
    if m.group("name"):
        return m.group("name") + m.group("sep") + "***"
    if m.group("scheme"):
        return m.group("scheme") + " ***"
    if m.group("userinfo"):
        return "***@"
    return "sk-***"


def redact_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (literal values, longest first; those under MIN_SECRET_CHARS
    characters skipped) replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SECRET_CHARS and secret in text:
            text = text.replace(secret, "***")
    return text


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """A text a server sent (an error message) fit to record or show: the literal ``secrets`` (the run's API
    key, URL password, ...: :func:`secrets_of`) replaced by ``***``, then credentials by their shape:
    ``Authorization: …`` / ``api_key=…`` values, ``Bearer …`` / ``Basic …`` tokens, ``sk-…`` keys and the
    ``user:password@`` of URLs."""
    text = redact_secrets(text, secrets)
    return redact_url(_TEXT_SECRETS.sub(_text_secret, text))


def secrets_of(
    api_key: str | None, urls: Iterable[str] = (), headers: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The literal secrets a client sends: the API key, each URL's ``user:password`` (as given, decoded, the
    password alone and base64'd as HTTP Basic sends it), and the values of headers that carry credentials
    (``Authorization``, or a name with KEY, TOKEN, SECRET, PASSWORD or AUTH), whole and after their scheme."""
    found: list[str] = [api_key] if api_key else []
    for url in urls:
        netloc = urlsplit(url if "://" in url else "http://" + url).netloc
        userinfo, at, _ = netloc.rpartition("@")
        if not at:
            continue
        user, _, password = userinfo.partition(":")
        plain = f"{unquote(user)}:{unquote(password)}"
        found += [userinfo, plain, password, unquote(password), base64.b64encode(plain.encode()).decode()]
    for name, value in (headers or {}).items():
        if name.lower() == "authorization" or any(w in name.upper() for w in (*SECRET_WORDS, "AUTH")):
            found += [value, value.partition(" ")[2]]
    return tuple(dict.fromkeys(s for s in found if s))
