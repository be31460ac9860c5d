"""Errors of the release gate; each carries one line naming the problem and the fix (exit 2, bad input)."""

from __future__ import annotations

from evalkit.errors import EvalkitError


class GateInputError(EvalkitError):
    """A run directory the gate cannot read (a file missing or not valid JSON)."""


class PolicyError(EvalkitError):
    """A policy file that is not valid YAML or names an unknown key or a bad value."""


class CannotCompare(EvalkitError):
    """Two runs that measured different things (task version, data, limit, few-shot or prompts)."""


class CannotDecide(EvalkitError):
    """Inputs no verdict may rest on: a run still being written, or the same run on both sides (exit 2)."""
