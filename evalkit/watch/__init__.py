"""``evalkit watch``: canary evals on a live endpoint, drift verdicts by the gate, Prometheus metrics, alerts.

:class:`Watch` runs the ticks (:mod:`evalkit.watch.loop`), :mod:`evalkit.watch.window` judges the window of
ticks against the baseline, :class:`WatchMetrics` serves ``/metrics``, :class:`Webhook` posts verdict changes,
:func:`render_watch` draws the history as one HTML page.
"""

from evalkit.watch.exporter import WatchMetrics
from evalkit.watch.loop import CANARY_HEADER, CANARY_USER, Watch, WatchSettings
from evalkit.watch.tick_log import TickRecord, read_history
from evalkit.watch.webhook import Webhook
from evalkit.watch.window import ticks_to_detect, watch_policy

__all__ = [
    "CANARY_HEADER",
    "CANARY_USER",
    "TickRecord",
    "Watch",
    "WatchMetrics",
    "WatchSettings",
    "Webhook",
    "read_history",
    "ticks_to_detect",
    "watch_policy",
]
