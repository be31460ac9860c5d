"""The release gate: did a candidate run keep the baseline's accuracy and speed (or a published score)?

Inputs are typed records (:mod:`evalkit.gating.inputs`) built from a run directory by :func:`from_run_dir`;
:func:`evaluate` compares a candidate with a baseline and :func:`evaluate_expected` checks it against the policy's
expected scores, both under a :class:`Policy` (:func:`load_policy`); :func:`write_outputs` writes gate.json,
gate.md and junit.xml.
"""

from evalkit.gating.engine import evaluate, evaluate_expected
from evalkit.gating.errors import CannotCompare, CannotDecide, GateInputError, PolicyError
from evalkit.gating.inputs import (
    CorpusMetric,
    Identity,
    MetricSamples,
    NumericsInputs,
    RunInputs,
    SpeedRecords,
    StatusCounts,
    TaskInputs,
)
from evalkit.gating.load import from_run_dir
from evalkit.gating.output import append_step_summary, to_json, to_junit, to_markdown, write_outputs
from evalkit.gating.policy import Policy, default_policy, load_policy, policy_from_dict
from evalkit.gating.result import GateResult, Rule

__all__ = [
    "CannotCompare",
    "CannotDecide",
    "CorpusMetric",
    "GateInputError",
    "GateResult",
    "Identity",
    "MetricSamples",
    "NumericsInputs",
    "Policy",
    "PolicyError",
    "Rule",
    "RunInputs",
    "SpeedRecords",
    "StatusCounts",
    "TaskInputs",
    "append_step_summary",
    "default_policy",
    "evaluate",
    "evaluate_expected",
    "from_run_dir",
    "load_policy",
    "policy_from_dict",
    "to_json",
    "to_junit",
    "to_markdown",
    "write_outputs",
]
