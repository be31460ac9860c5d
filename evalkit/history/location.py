"""Where the run history lives (``EVALKIT_HISTORY_URL``, or SQLite under the user's data dir), read without
SQLAlchemy, so that a command can tell whether the history is on before importing it."""

from __future__ import annotations

import os

ENV = "EVALKIT_HISTORY_URL"
OFF = ("off", "none", "0", "false", "no")


def history_url(env: dict[str, str] | None = None) -> str | None:
    """The history database's URL: ``EVALKIT_HISTORY_URL`` when set (None when it is ``off``), else
    ``sqlite:///<user data dir>/evalkit/history.sqlite``."""
    value = (os.environ if env is None else env).get(ENV, "").strip()
    if value.lower() in OFF and value:
        return None
    if value:
        return value
    import platformdirs

    return f"sqlite:///{platformdirs.user_data_path('evalkit') / 'history.sqlite'}"
