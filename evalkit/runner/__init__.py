"""One run of a RunConfig: :class:`Runner` (``orchestrate``) and the modules it calls per task (``endpoints``,
``plan``, ``resume``, ``warmups``, ``request_phase``, ``observe``)."""

from evalkit.runner.orchestrate import Runner, RunOutcome
from evalkit.runner.resume import planned_fingerprint

__all__ = ["RunOutcome", "Runner", "planned_fingerprint"]
