"""Secrets kept out of everything evalkit records or shows: URL credentials, secret flags, secret variables.

>>> redact_url("http://user:pw@127.0.0.1:8000/v1")
'http://***@127.0.0.1:8000/v1'
>>> redact_url("https://hooks.example.com/alert?token=abc&channel=ops")
'https://hooks.example.com/alert?token=***&channel=ops'
>>> redact_argv(["evalkit", "run", "--endpoint", "user:pw@host:8000", "--server-env", "HF_TOKEN=hf_x"])
['evalkit', 'run', '--endpoint', '***@host:8000', '--server-env', 'HF_TOKEN=***']
"""

from __future__ import annotations

import re

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


def redact_url(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it replaced by ``***@``, and the values of query
    parameters named like a secret (``token``, ``api_key``, ``sig``, ``password``, ``auth``...) by ``***``."""
    text = _USERINFO.sub(lambda m: (m.group("scheme") or m.group("bare") or "") + "***@", text)
    return _QUERY_PARAM.sub(_query_secret, text)


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
