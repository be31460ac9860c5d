"""The release gate: did a candidate run keep the baseline's accuracy and speed (or a published score)?

Inputs are typed records (:mod:`evalkit.gate.inputs`) built from a run directory by :func:`from_run_dir`;
:func:`evaluate` compares a candidate with a baseline and :func:`evaluate_expected` checks it against the policy's
expected scores, both under a :class:`Policy` (:func:`load_policy`); :func:`write_outputs` writes gate.json,
gate.md and junit.xml.
"""

from evalkit._callable import make_callable
from evalkit.gate.command import gate_runs
from evalkit.gate.engine import evaluate, evaluate_expected
from evalkit.gate.errors import CannotCompare, CannotDecide, GateInputError, PolicyError
from evalkit.gate.inputs import Identity, MetricSamples, RunInputs, SpeedRecords, StatusCounts, TaskInputs
from evalkit.gate.load import from_run_dir
from evalkit.gate.output import append_step_summary, to_json, to_junit, to_markdown, write_outputs
from evalkit.gate.policy import Policy, default_policy, load_policy, policy_from_dict
from evalkit.gate.result import GateResult, Rule

__all__ = [
    "CannotCompare",
    "CannotDecide",
    "GateInputError",
    "GateResult",
    "Identity",
    "MetricSamples",
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

make_callable(__name__, gate_runs)  # evalkit.gate(baseline, candidate) is evalkit.api.gate
