"""A task's latest sample records held column by column, the form a summary reads them in.

A record as a pydantic model costs ~2.2 KB in memory even slimmed (its field dict, a float object per latency, a
string object per status): a one-hour run at 50 requests/s (180,000 records) read back for its summary was ~400 MB.
Here each field is a column: floats in an ``array('d')`` (NaN for None: the store never writes NaN), integers in the
narrowest signed array that holds them (its lowest value for None), every other field as a code into the distinct
values the column has seen (a status, a target, an ``extracted`` dict: stored once each); a column whose rows all
hold one value is that value. The request key is read from the record's line when asked for (each row keeps its
line's offset): summaries ask for it only on resumed runs. A row is an ``int`` (its position) of a class made for
its :class:`SampleRows`, whose properties read the columns; rows read as :class:`~evalkit.contracts.SampleFields`,
the fields of a ``SampleRecord``, and compare by position (two sets' rows are not to be mixed).

What a summary never reads is dropped on the way in, as it always was: the prompt and the chat messages (read as
``""`` and None), the response and the reasoning unless ``keep_text``, and the inter-token latencies, which go to
one float32 array (``itl``; each row's part of it by :meth:`SampleRows.itl_of`, and, for a run over several
endpoints, each endpoint's ITLs in an array of their own, ``itl_by_endpoint``).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast, overload

import orjson

from evalkit.contracts import UNRECORDED, SampleFields, SampleRecord
from evalkit.store.files import iter_sample_lines, sample_at

FLOATS = ("ttft_ms", "tpot_ms", "e2e_ms", "start_s", "retry_lost_s", "scheduled_s")
INTS = ("doc_id", "sample_index", "attempts", "prompt_tokens", "output_tokens", "reasoning_tokens")
# what a summary never reads, and what it reads as
DROPPED: dict[str, Any] = {"prompt": "", "messages": None, "itl_ms": []}
TEXTS = ("response", "reasoning")  # kept only with keep_text
CODED = tuple(
    name for name in SampleRecord.model_fields if name not in (*FLOATS, *INTS, *DROPPED, "key")
)  # every other field: a code per row into the column's distinct values
NUMPY = {"b": "i1", "h": "i2", "i": "i4", "q": "i8", "B": "u1", "H": "u2", "I": "u4", "Q": "u8", "d": "f8"}
HASH_MASK = (1 << 64) - 1


def _default(name: str) -> Any:
    """The field's default (None for a field every line has)."""
    info = SampleRecord.model_fields[name]
    return None if info.is_required() else info.get_default(call_default_factory=True)


DEFAULTS = {name: _default(name) for name in SampleRecord.model_fields}


class _Ints:
    """An integer column in the narrowest of ``b h i q`` that holds it, the type's lowest value standing for None;
    widened as a value needs."""

    __slots__ = ("none", "top", "values")

    def __init__(self) -> None:
        self._use("b")

    def _use(self, typecode: str) -> None:
        self.values = array(cast(Any, typecode))
        bits = 8 * self.values.itemsize
        self.none, self.top = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def append(self, v: int | None) -> None:
        if v is None:
            v = self.none
        elif not self.none < v <= self.top:
            self._widen(v)
        self.values.append(v)

    def _widen(self, v: int) -> None:
        old, none = self.values, self.none
        while not self.none < v <= self.top:
            self._use("bhiq"["bhiq".index(self.values.typecode) + 1])
        self.values.extend(self.none if x == none else x for x in old)


class _Coded:
    """A column of codes (the narrowest of ``B H I`` that holds them) into the distinct values seen, dicts and
    lists told apart by their JSON."""

    __slots__ = ("codes", "index", "values")

    def __init__(self, default: Any) -> None:
        self.values: list[Any] = [default]
        self.index: dict[Any, int] = {self._id(default): 0}
        self.codes = array("B")

    @staticmethod
    def _id(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)  # True and 1 are equal keys; their JSON is not

    def append(self, value: Any) -> None:
        ident = self._id(value)
        code = self.index.get(ident)
        if code is None:
            code = self.index[ident] = len(self.values)
            self.values.append(value)
            if code == 1 << (8 * self.codes.itemsize):
                self.codes = array("H" if self.codes.typecode == "B" else "I", self.codes)
        self.codes.append(code)


class _Row(int):
    """A row of a :class:`SampleRows`: its position, with the set's columns as properties (made per set)."""

    __slots__ = ()


def _float_property(column: array) -> property:
    def get(row: int) -> float | None:
        v = column[row]
        return None if v != v else v  # NaN: None

    return property(get)


def _int_property(column: array, none: int) -> property:
    def get(row: int) -> int | None:
        v = column[row]
        return None if v == none else v

    return property(get)


def _coded_property(codes: array, values: list[Any]) -> property:
    return property(lambda row: values[codes[row]])


def _constant_property(value: Any) -> property:
    if isinstance(value, list | dict):  # a fresh one per read, as a record's own
        return property(lambda row: type(value)(value))
    return property(lambda row: value)


class SampleRows(Sequence[SampleFields]):
    """The latest record of each request of ``task`` in the samples.jsonl at ``path`` (a re-sent request's last
    line wins), ordered by (document, sample index), ties by the request's first line."""

    def __init__(self, path: Path, task: str, keep_text: bool, keep_itl: bool = True,
                 by_endpoint: bool = False) -> None:  # fmt: skip
        self.path = path
        self.itl = array("f")
        self.itl_by_endpoint: dict[str, array] = {}
        floats = {name: array("d") for name in FLOATS}
        ints = {name: _Ints() for name in INTS}
        coded = {name: _Coded(DEFAULTS[name]) for name in CODED if keep_text or name not in TEXTS}
        offsets, hashes, itl_at, itl_n = _Ints(), array("Q"), _Ints(), _Ints()
        nan = math.nan
        for offset, d in iter_sample_lines(path):
            if d.get("task") != task:
                continue
            offsets.append(offset)
            hashes.append(hash(d["key"]) & HASH_MASK)
            for name, column in floats.items():
                v = d.get(name)
                column.append(nan if v is None else v)
            for name, icolumn in ints.items():
                icolumn.append(d.get(name, DEFAULTS[name]))
            for name, ccolumn in coded.items():
                ccolumn.append(d.get(name, DEFAULTS[name]))
            gaps = d.get("itl_ms") or ()
            itl_at.append(len(self.itl))
            itl_n.append(len(gaps) if keep_itl else 0)
            if keep_itl:
                self.itl.extend(gaps)  # only answered requests have ITLs, and those are never re-sent
            if by_endpoint:
                self.itl_by_endpoint.setdefault(d.get("endpoint") or UNRECORDED, array("f")).extend(gaps)
        order = self._latest_in_order(offsets.values, hashes, ints["doc_id"].values, ints["sample_index"].values)
        del hashes
        kept = self._offsets = _take(offsets.values, order)
        del offsets
        self._itl_at, self._itl_n = _take(itl_at.values, order), _take(itl_n.values, order)
        namespace: dict[str, Any] = {"__slots__": (), "key": property(lambda row: sample_at(path, kept[row])["key"])}
        for name in FLOATS:
            taken = _take(floats.pop(name), order)
            namespace[name] = _float_property(taken) if any(v == v for v in taken) else None  # NaN != NaN
        for name, icolumn in ints.items():
            namespace[name] = _int_property(_take(icolumn.values, order), icolumn.none)
        for name, ccolumn in coded.items():
            several = len(ccolumn.values) > 1
            namespace[name] = _coded_property(_take(ccolumn.codes, order), ccolumn.values) if several else None
            ccolumn.index.clear()
        constants = {**DROPPED, **({} if keep_text else dict.fromkeys(TEXTS))}
        constants.update({name: DEFAULTS[name] for name, p in namespace.items() if p is None})
        namespace.update({name: _constant_property(value) for name, value in constants.items()})
        row_class = type("SampleRow", (_Row,), namespace)
        self._rows = [row_class(i) for i in range(len(order))]

    def _latest_in_order(self, offsets: array, hashes: array, doc_ids: array, sample_indices: array) -> Any:
        """The positions of each request's last line, ordered by (document, sample index), ties by the request's
        first line (as a dict of the records by key, sorted by those, orders them), as a numpy array."""
        import numpy as np

        n = len(hashes)
        docs = np.frombuffer(doc_ids, dtype=NUMPY[doc_ids.typecode])
        samples = np.frombuffer(sample_indices, dtype=NUMPY[sample_indices.typecode])
        hashed = np.frombuffer(hashes, dtype=np.uint64)
        by_hash = np.argsort(hashed, kind="stable")  # equal hashes together, in file order
        ordered = hashed[by_hash]
        repeated = np.flatnonzero(ordered[1:] == ordered[:-1])  # a re-sent request's lines (or, rarely, 2 keys)
        del ordered
        if not len(repeated):
            return np.lexsort((samples, docs))  # stable: ties in file order, each line its request's first
        first = np.arange(n)  # the line that places each kept line (its request's first)
        keep = np.ones(n, bool)
        for lines in self._repeats(by_hash, repeated):
            by_key: dict[str, list[int]] = {}
            for i in sorted(lines):
                by_key.setdefault(sample_at(self.path, offsets[i])["key"], []).append(i)
            for same in by_key.values():
                keep[same[:-1]] = False
                first[same[-1]] = same[0]
        kept = np.flatnonzero(keep)
        return kept[np.lexsort((first[kept], samples[kept], docs[kept]))]

    @staticmethod
    def _repeats(by_hash: Any, repeated: Any) -> Iterator[list[int]]:
        """The positions of each run of equal hashes (``repeated``: where a sorted hash equals the next)."""
        run: list[int] = []
        previous = -2
        for j in repeated.tolist():
            if j != previous + 1:  # a new run
                if run:
                    yield run
                run = [int(by_hash[j])]
            run.append(int(by_hash[j + 1]))
            previous = j
        if run:
            yield run

    def itl_of(self, row: SampleFields) -> array:
        """The inter-token latencies of one of these rows."""
        i = cast(int, row)
        at = self._itl_at[i]
        return self.itl[at : at + self._itl_n[i]]

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> SampleFields: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[SampleFields]: ...
    def __getitem__(self, i: int | slice) -> SampleFields | Sequence[SampleFields]:
        return cast(Any, self._rows[i])

    def __iter__(self) -> Iterator[SampleFields]:
        return iter(cast(list[SampleFields], self._rows))


def _take(column: array, order: Any) -> array:
    """``column``'s values at ``order`` (a numpy array of positions), in ``column``'s type."""
    import numpy as np

    out = array(column.typecode)
    out.frombytes(np.frombuffer(column, dtype=NUMPY[column.typecode])[order].tobytes())
    return out
