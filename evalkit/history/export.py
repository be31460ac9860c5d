"""``evalkit history export``: the history's long table (:func:`evalkit.history.query.export_rows`) as CSV, or
as Parquet when pyarrow is installed."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.history.query import EXPORT_COLUMNS
from evalkit.store.files import write_text_atomic

FORMATS = ("csv", "parquet")


def table_format(path: Path, given: str | None) -> str:
    """The format asked for (``given``), else the one the file's extension names; EvalkitError when neither is."""
    fmt = (given or path.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise EvalkitError(f"cannot tell the export format of {path}; pass --format csv or --format parquet")
    return fmt


def write_table(rows: list[dict[str, Any]], path: Path, given: str | None = None) -> Path:
    """Write ``rows`` (the export columns) to ``path`` as CSV or Parquet; EvalkitError for a format or a file that
    cannot be written (Parquet without pyarrow says how to get it)."""
    fmt = table_format(path, given)
    try:
        if fmt == "csv":
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=list(EXPORT_COLUMNS), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
            write_text_atomic(path, buf.getvalue())
            return path
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise EvalkitError(
                "--format parquet needs pyarrow, which is not installed; pip install pyarrow, or pass --format csv"
            ) from None
        table = pa.Table.from_pylist(rows, schema=_schema(pa))
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        return path
    except OSError as e:
        raise EvalkitError(f"cannot write {path} ({e.strerror}); pass -o a writable file") from None


def _schema(pa: Any) -> Any:
    floats = {"temperature", "top_p", "value", "ci_low", "ci_high"}
    ints = {"run_id", "max_tokens", "n"}
    return pa.schema(
        [(c, pa.float64() if c in floats else pa.int64() if c in ints else pa.string()) for c in EXPORT_COLUMNS]
    )
