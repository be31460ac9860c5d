"""JSON as written read into typed values, leniently: the tolerant value readers (``as_*``) and the field-by-field
reads of :func:`lenient` / :func:`lenient_value`, which keep what reads and name each value that does not as a
:class:`Dropped` (its path, the value as written, the type it is not).

The store's reader (:mod:`evalkit.store.reader`) reads ``summary.json`` and ``manifest.json`` through them; a
reader with bounds of its own (the gate's fail-closed loader) declares them as a model read by :func:`lenient`
(``Run.task_as``), so that each value out of bounds is named as written too.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo


def as_dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def as_num(x: Any) -> float | None:
    """A finite number, else None (bools are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def as_int(x: Any) -> int | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return None


def as_str(x: Any) -> str | None:
    if x is None:
        return None
    return x if isinstance(x, str) else str(x)


M = TypeVar("M", bound=BaseModel)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class of a field's annotation (``Model`` or ``Model | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, UnionType):
        for arg in get_args(annotation):
            if (found := _model_in(arg)) is not None:
                return found
    return None


def _container(annotation: Any) -> tuple[Any, Any] | None:
    """(origin, item annotation) of a ``list[X]`` / ``dict[str, X]`` annotation (``| None`` allowed), else None."""
    if get_origin(annotation) in (Union, UnionType):
        found = [c for a in get_args(annotation) if (c := _container(a)) is not None]
        return found[0] if found else None
    origin = get_origin(annotation)
    if origin is list:
        return list, get_args(annotation)[0]
    if origin is dict:
        return dict, get_args(annotation)[1]
    return None


_NOT_READ = object()


@dataclass(frozen=True)
class Dropped:
    """A value a lenient read did not take: ``where`` (its dotted path, e.g. ``tasks.gsm8k.requests``), the
    ``value`` as read, and ``expected``: the type it does not read as."""

    where: str
    value: Any
    expected: str


def _admits_none(annotation: Any) -> bool:
    return (
        annotation is Any
        or annotation is None
        or annotation is type(None)
        or (get_origin(annotation) in (Union, UnionType) and type(None) in get_args(annotation))
    )


def _expected(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def lenient_value(annotation: Any, raw: Any, where: str = "", dropped: list[Dropped] | None = None) -> Any:
    """``raw`` (JSON as read) as ``annotation``, validated strictly as JSON (no numbers from strings, no bools as
    numbers): a model is read field by field (:func:`lenient`), a list or mapping keeps the entries that read;
    ``_NOT_READ`` when it does not read or is null (an entry of a list or mapping may be null where its type
    allows). Each value that does not read is added to ``dropped`` (with its path from ``where``) when it is
    given; an absent or null one is not."""
    if raw is None:
        return _NOT_READ
    model = _model_in(annotation)
    if model is not None:
        value = lenient(model, raw, where, dropped)
        if value is None:
            _drop(dropped, where, raw, annotation)
        return _NOT_READ if value is None else value
    container = _container(annotation)
    if container is not None and container[1] is not Any:
        origin, item = container
        if origin is list and isinstance(raw, list):
            return [v for i, x in enumerate(raw) if (v := _entry(item, x, f"{where}[{i}]", dropped)) is not _NOT_READ]
        if origin is dict and isinstance(raw, dict):
            return {
                str(k): v
                for k, x in raw.items()
                if (v := _entry(item, x, f"{where}.{k}" if where else str(k), dropped)) is not _NOT_READ
            }
        _drop(dropped, where, raw, annotation)
        return _NOT_READ
    try:
        return _adapter(annotation).validate_json(orjson.dumps(raw), strict=True)
    except (ValidationError, TypeError, orjson.JSONEncodeError):
        _drop(dropped, where, raw, annotation)
        return _NOT_READ


def _entry(item: Any, raw: Any, where: str, dropped: list[Dropped] | None) -> Any:
    """An entry of a list or mapping: null where its type allows it (else dropped, and named in ``dropped``),
    else :func:`lenient_value`."""
    if raw is None:
        if _admits_none(item):
            return None
        if dropped is not None:
            dropped.append(Dropped(where, None, _expected(item)))
        return _NOT_READ
    return lenient_value(item, raw, where, dropped)


def _drop(dropped: list[Dropped] | None, where: str, raw: Any, annotation: Any) -> None:
    if dropped is not None and raw is not None:
        dropped.append(Dropped(where, raw, _expected(annotation)))


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def lenient(model: type[M], data: Any, where: str = "", dropped: list[Dropped] | None = None) -> M | None:
    """``data`` (a JSON object as read) as ``model``, each field read on its own (:func:`lenient_value`): a field
    that does not read falls back to its default; None when ``data`` is not a mapping or a required field is
    missing or does not read. Keys the model does not know are kept where it allows them. ``where`` and
    ``dropped``: as for :func:`lenient_value`."""
    if not isinstance(data, dict):
        return None
    try:
        return model.model_validate_json(orjson.dumps(data), strict=True)
    except (ValidationError, TypeError, orjson.JSONEncodeError):
        pass
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        value = lenient_value(info.annotation, data.get(name), f"{where}.{name}" if where else name, dropped)
        if value is not _NOT_READ:
            values[name] = value
        elif name in data and data[name] is None and _admits_none(info.annotation):
            values[name] = None
        elif info.is_required():
            return None
    if model.model_config.get("extra") == "allow":
        values.update((k, v) for k, v in data.items() if k not in model.model_fields)
    try:
        return model.model_validate(values)
    except ValidationError:
        return None


def read_fields(
    fields: dict[str, FieldInfo], raw: dict[str, Any], where: str, dropped: list[Dropped]
) -> dict[str, Any]:
    """The ``fields`` (a model's) in ``raw`` that read (:func:`lenient_value`), by name; the others in ``dropped``."""
    prefix = f"{where}." if where else ""
    return {
        key: value
        for key, info in fields.items()
        if (value := lenient_value(info.annotation, raw.get(key), prefix + key, dropped)) is not _NOT_READ
    }
