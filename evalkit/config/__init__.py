"""Configuration, the leftmost layer: what a run and the server it starts are, resolved and checked before
anything runs. It imports no other layer (``lint-imports``).

- :mod:`~evalkit.config.settings`: :class:`RunConfig`, resolved by :func:`load_config` (CLI > config file >
  ``EVALKIT_*`` env > defaults);
- :mod:`~evalkit.config.server_config`: :class:`ServerConfig`, the vLLM server a run starts, and the checks of its
  layout over GPUs and nodes;
- :mod:`~evalkit.config.settings_files`: the one reader of settings files (run config, sweep file, gate policy).
"""

from evalkit.config.server_config import ServerConfig
from evalkit.config.settings import (
    MAX_COST_PER_GPU_HOUR,
    MAX_GPUS_BILLED,
    OTHER_ENV,
    SEED_MAX,
    SEED_MIN,
    RunConfig,
    given,
    load_config,
    read_config_file,
    warn_unknown_env,
)

__all__ = [
    "MAX_COST_PER_GPU_HOUR",
    "MAX_GPUS_BILLED",
    "OTHER_ENV",
    "SEED_MAX",
    "SEED_MIN",
    "RunConfig",
    "ServerConfig",
    "given",
    "load_config",
    "read_config_file",
    "warn_unknown_env",
]
