"""How a record of the run dir evolves (re-exported by :mod:`evalkit.contracts`): :class:`Record`, the base of every
model written to ``manifest.json``, ``summary.json`` or ``samples.jsonl``.

A field with a default is left out of the file while it holds its default, so that a field added later does not
change the files of older runs: a file written before it has no such key, reads back with the default, and writes
back without the key, byte for byte (tests/unit/test_contracts.py checks this on every run dir under ``tests/data``).
The fields that files of schema version 2 always carry, at their default too (``"reasoning": null``), are named in
each model's ``written_at_default`` and stay written. Adding ``x: float | None = None`` to a model therefore needs
nothing more; adding a field to ``written_at_default``, a required field, a rename or a change of a field's meaning
changes what old files say, and needs ``SCHEMA_VERSION`` bumped (ARCHITECTURE.md, Rules).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel
from pydantic.fields import FieldInfo


def _at_default(info: FieldInfo) -> Callable[[Any], bool]:
    """The test of whether a value equals the field's default (None is tested by identity)."""
    default = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    if default is None:
        return lambda value: value is None
    return lambda value: type(value) is type(default) and bool(value == default)


class Record(BaseModel):
    """A model of the run dir's files: its fields with a default are left out of the file while they hold it
    (``exclude_if``), except those named in ``written_at_default`` (and those declaring an ``exclude_if`` of
    their own)."""

    written_at_default: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        unknown = cls.written_at_default - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__}.written_at_default names no field {sorted(unknown)}")
        changed = False
        for name, info in cls.model_fields.items():
            if info.is_required() or info.exclude_if is not None or name in cls.written_at_default:
                continue
            info.exclude_if = _at_default(info)
            changed = True
        if changed:
            cls.model_rebuild(force=True)
