"""The result store: a run directory written by :class:`RunStore` and read by :func:`open_run`.

- :mod:`evalkit.store.files`: file names, the atomic writer, line reading of ``samples.jsonl``
- :mod:`evalkit.store.identity`: a request's key and the record stored for it
- :mod:`evalkit.store.writer`: :class:`RunStore` (lock, appends, manifest, summary) for ``evalkit run``
- :mod:`evalkit.store.reader`: :func:`open_run` -> :class:`Run`, the one reader (report, gate, users' scripts)
- :mod:`evalkit.store.positions_file`: ``positions.bin`` (a ``logprobs`` task's teacher-forced positions), written
  and read
- :mod:`evalkit.store.lenient`: the typed reads of JSON as written, field by field (what does not read is named)
"""

from evalkit.store.reader import Run, open_run
from evalkit.store.writer import RunStore

__all__ = ["Run", "RunStore", "open_run"]
