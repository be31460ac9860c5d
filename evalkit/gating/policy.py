"""The gate's policy: what counts as a regression, read from a YAML file (unknown keys are refused; values are
typed strictly: ``true`` is not a number, nor ``"0.1"``; non-finite numbers are refused; an int is a valid float).

With no file the default policy applies: an accuracy drop of more than 1 point that is significant at alpha 0.05
(one-sided) fails, and so does a perplexity or bits-per-byte increase significantly beyond 1%; output tokens/s
dropping, or TTFT p50 or TPOT p50 rising, by more than 10% fails when several runs per side show it significant,
or, with one run per side, by more than the metric's run-to-run noise budget (:data:`GATED_SPEEDS`); speed at
different load is not judged; any failed request (api_error) in the candidate fails; a task holding teacher-forced
positions (``numerics``) is judged by :class:`NumericsPolicy`'s budgets instead of accuracy and speed. Example file::

    accuracy:
      default: {max_drop: 0.01, alpha: 0.05, mode: regression}
      tasks:
        gsm8k:
          "exact_match,strict-match": {max_drop: 0.02, mode: non-inferiority}
        wikitext:
          "word_perplexity,none": {max_increase: 0.02}
    speed:
      ttft_p50_ms: {max_change: 0.15, noise: 1.0, min_abs_ms: 5}
      e2e_p50_ms: {max_change: 0.10}
      min_goodput_share: 0.9        # runs made with --goodput: 90% of requests within the SLOs
      max_cost_per_million_output_tokens: 2.0   # runs made with --cost-per-gpu-hour
    rates: {max_error_rate: 0.0, max_truncated_rate: 0.02}
    numerics: {min_top1_agreement: 0.995, max_mean_kl: 0.0005, max_p99_kl: 0.005, max_mean_abs_dlp: 0.01}
    expected:
      - {task: aime25, metric: avg@8, value: 0.9333}
    require_matched_load: true
    min_coverage: 0.95            # each run must have scored 95% of the documents both were asked for
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from evalkit.config.settings_files import read_settings_file
from evalkit.gating.errors import PolicyError
from evalkit.gating.rule_catalogue import CAPACITY_RULES, GATED_SPEEDS, RATE_RULES, GatedSpeed, RateRule

MAX_RESAMPLES = 100_000  # bootstrap replicates: at 1,000+ items each rule then takes seconds, not hours
SEED_LIMIT = 2**32  # bootstrap seeds: 0 <= seed < 2**32

Mode = Literal["regression", "non-inferiority"]
"""regression: fail when a drop beyond the budget is significant; non-inferiority: pass only when the
confidence interval shows the drop stays within the budget."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class AccuracyRule(_Strict):
    """Allowed drop of one accuracy metric. ``max_drop`` is absolute (0.01 = 1 point), ``max_drop_rel`` a
    fraction of the baseline's value; with both set the smaller one is the budget. ``max_increase``: the allowed
    relative increase of a corpus metric of lm-eval's (perplexity, bits per byte: lower is better; 0.01 = 1%),
    judged by :mod:`evalkit.gating.corpus`."""

    max_drop: float | None = Field(default=0.01, ge=0, le=1)
    max_drop_rel: float | None = Field(default=None, ge=0, le=1)
    max_increase: float = Field(default=0.01, ge=0)
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    mode: Mode = "regression"
    enabled: bool = True

    def budget(self, reference: float) -> float:
        """The allowed drop in absolute points for a metric whose reference value is ``reference``."""
        limits = [
            x
            for x in (self.max_drop, None if self.max_drop_rel is None else self.max_drop_rel * reference)
            if x is not None
        ]
        return min(limits) if limits else 0.0


class AccuracyOverride(_Strict):
    """Per task and metric: the fields that differ from ``accuracy.default``."""

    max_drop: float | None = Field(default=None, ge=0, le=1)
    max_drop_rel: float | None = Field(default=None, ge=0, le=1)
    max_increase: float | None = Field(default=None, ge=0)
    alpha: float | None = Field(default=None, gt=0, lt=0.5)
    mode: Mode | None = None
    enabled: bool | None = None


class AccuracyPolicy(_Strict):
    default: AccuracyRule = Field(default_factory=AccuracyRule)
    tasks: dict[str, dict[str, AccuracyOverride]] = Field(default_factory=dict)

    def rule(self, task: str, metric: str) -> AccuracyRule:
        """The effective rule of ``metric`` of ``task``: the default with that metric's overrides applied."""
        override = self.tasks.get(task, {}).get(metric)
        if override is None:
            return self.default
        return self.default.model_copy(update=override.model_dump(exclude_none=True))


class SpeedRule(_Strict):
    """One speed metric's rule. With several runs per side: fail when the candidate is worse by more than
    ``max_change`` (0.10 = 10%) and that is significant at ``alpha`` (Welch's t-test over the runs). With one run
    per side there is no run-to-run variation to test against: fail when worse by more than ``noise`` (the
    run-to-run noise budget; None: the figure's in the rule catalogue, :data:`GATED_SPEEDS`) or ``max_change``,
    whichever is larger. ``min_abs_ms`` (latencies; None: the figure's ``floor_ms`` there): a change of fewer
    milliseconds never fails."""

    max_change: float = Field(default=0.10, gt=0)
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    noise: float | None = Field(default=None, gt=0)
    min_abs_ms: float | None = Field(default=None, ge=0)


# One run per side: each gated figure's run-to-run noise budget; latency changes smaller than its floor (ms) never
# fail. Both are the rule catalogue's (:data:`evalkit.gating.rule_catalogue.GATED_SPEEDS`), by key.
NOISE_BUDGETS: dict[str, float] = {g.key: g.noise for g in GATED_SPEEDS}
LATENCY_FLOORS_MS: dict[str, float] = {g.key: g.floor_ms for g in GATED_SPEEDS if g.floor_ms is not None}


class SpeedLimits(_Strict):
    """Speed rules (None turns one off), the fewest answered requests per run a comparison needs, and whether
    runs measured at different load (concurrency, request rate) are compared at all (``judge_unmatched_load``:
    false leaves their speed not judged). The rules' fields, one per figure of ``gated`` (the rule catalogue's
    :data:`GATED_SPEEDS`), come first: :func:`speed_policy_model` adds them."""

    gated: ClassVar[tuple[GatedSpeed, ...]] = ()
    min_requests: int = Field(default=30, ge=2)
    judge_unmatched_load: bool = False
    # the run's own figures (evalkit/gating/economics.py), off unless set: goodput within the SLOs the candidate
    # was run with (--goodput), at least this many requests/s and this share of its requests; goodput no lower
    # than the baseline's by more than this fraction; cost (--cost-per-gpu-hour) at most this many dollars
    min_goodput: float | None = Field(default=None, ge=0)
    min_goodput_share: float | None = Field(default=None, ge=0, le=1)
    max_goodput_drop: float | None = Field(default=None, ge=0, le=1)
    max_cost_per_million_output_tokens: float | None = Field(default=None, gt=0)

    def judged(self) -> list[tuple[GatedSpeed, SpeedRule]]:
        """The figures this policy judges (its rule is not None) with their rules, in the catalogue's order."""
        return [(g, rule) for g in self.gated if (rule := getattr(self, g.key)) is not None]


def speed_policy_model(gated: Sequence[GatedSpeed]) -> type[SpeedLimits]:
    """The ``speed:`` model: a :class:`SpeedRule` field (None by default unless ``judged``) per figure of
    ``gated``, a fraction per capacity rule (the rule catalogue's :data:`CAPACITY_RULES`), then
    :class:`SpeedLimits`' fields."""
    rules: dict[str, Any] = {
        g.key: (SpeedRule | None, Field(default_factory=SpeedRule) if g.judged else None) for g in gated
    }
    rules.update({r.key: (float, Field(default=r.default, ge=0, lt=1)) for r in CAPACITY_RULES})
    rule_fields = create_model("SpeedRules", __base__=_Strict, __module__=__name__, **rules)
    model = cast(
        type[SpeedLimits],
        create_model(
            "SpeedPolicy", __base__=(SpeedLimits, rule_fields), __doc__=SpeedLimits.__doc__, __module__=__name__
        ),
    )
    model.gated = tuple(gated)
    return model


GATED_SPEED: tuple[str, ...] = tuple(g.key for g in GATED_SPEEDS)
"""The speed figures a policy can judge (:class:`SpeedPolicy`'s rule fields, named by the speed catalogue's keys,
:data:`evalkit.contracts.SPEED_METRICS`), in the order the gate reports them."""


class RateLimits(_Strict):
    """Largest allowed share of the candidate's requests per status (None: not checked): a field per rule of
    ``rules`` (the rule catalogue's :data:`RATE_RULES`), added by :func:`rates_policy_model`."""

    rules: ClassVar[tuple[RateRule, ...]] = ()

    def limits(self) -> list[tuple[RateRule, float]]:
        """The rate rules this policy sets (not None) with their ceilings, in the catalogue's order."""
        return [(r, limit) for r in self.rules if (limit := getattr(self, r.key)) is not None]


def rates_policy_model(rules: Sequence[RateRule]) -> type[RateLimits]:
    """The ``rates:`` model: a field per rate rule, a share from 0 to 1 (None: not checked), its default the
    rule's."""
    fields: dict[str, Any] = {r.key: (float | None, Field(default=r.default, ge=0, le=1)) for r in rules}
    model = create_model("RatesPolicy", __base__=RateLimits, __doc__=RateLimits.__doc__, __module__=__name__, **fields)
    model.rules = tuple(rules)
    return model


if TYPE_CHECKING:  # the rule fields are built from the catalogue; code reads them through judged() / limits()
    SpeedPolicy = SpeedLimits
    RatesPolicy = RateLimits
else:
    SpeedPolicy = speed_policy_model(GATED_SPEEDS)
    RatesPolicy = rates_policy_model(RATE_RULES)


class ExpectedScore(_Strict):
    """A published score the candidate must not be significantly below (``max_drop`` below it is allowed)."""

    task: str
    metric: str
    value: float = Field(ge=0, le=1)
    max_drop: float = Field(default=0.0, ge=0, le=1)
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    mode: Mode = "regression"


class BootstrapSettings(_Strict):
    """Replicates and seed of the bootstrap tests (a seeded generator: the same runs give the same verdict)."""

    resamples: int = Field(default=5000, ge=200, le=MAX_RESAMPLES)
    seed: int = Field(default=0, ge=0, lt=SEED_LIMIT)


class NumericsPolicy(_Strict):
    """Budgets of the numerics rules (a task whose runs hold teacher-forced positions, the ``numerics`` task):
    the candidate's divergence from the baseline over the texts both scored (:mod:`evalkit.scoring.numerics`).
    A figure's budget set to None turns its rule off. Each figure's interval (``1 - 2*alpha``, over texts) decides:
    fail when even its better end is beyond the budget, pass when its worse end is within, cannot decide
    otherwise, and cannot decide when the baseline's own noise floor is beyond the budget. ``judge_speed``: judge
    the speed rules on such a task too (its answers are not streamed, so by default they are not)."""

    min_top1_agreement: float | None = Field(default=0.995, ge=0, le=1)
    max_mean_kl: float | None = Field(default=5e-4, ge=0)
    max_p99_kl: float | None = Field(default=5e-3, ge=0)
    max_mean_abs_dlp: float | None = Field(default=0.01, ge=0)
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    judge_speed: bool = False

    def budget(self, figure: str) -> float | None:
        """The budget of one of :data:`evalkit.scoring.numerics.FIGURES` (None: its rule is off)."""
        return {
            "top1": self.min_top1_agreement,
            "mean_kl": self.max_mean_kl,
            "p99_kl": self.max_p99_kl,
            "mean_abs_dlp": self.max_mean_abs_dlp,
        }[figure]


class Policy(_Strict):
    accuracy: AccuracyPolicy = Field(default_factory=AccuracyPolicy)
    speed: SpeedPolicy = Field(default_factory=SpeedPolicy)
    rates: RatesPolicy = Field(default_factory=RatesPolicy)
    numerics: NumericsPolicy = Field(default_factory=NumericsPolicy)
    expected: list[ExpectedScore] = Field(default_factory=list)
    require_matched_load: bool = False
    # the smallest share of the documents both runs were asked for that each must have scored (a sample that
    # is not api_error) for the gate to decide; below it the gate cannot decide (unless a rule already failed)
    min_coverage: float = Field(default=0.95, ge=0, le=1)
    bootstrap: BootstrapSettings = Field(default_factory=BootstrapSettings)


def default_policy() -> Policy:
    """The policy that applies without a policy file."""
    return Policy()


def policy_from_dict(data: dict[str, Any], source: str = "policy") -> Policy:
    """Validate a policy given as a dict; raises PolicyError with one line naming the bad key or value."""
    try:
        return Policy.model_validate(data)
    except ValidationError as e:
        raise PolicyError(_one_line(e, source)) from None


def load_policy(path: str | Path | None) -> Policy:
    """The policy in the YAML file ``path`` (the default policy when ``path`` is None or the file is empty); the
    file is read by :func:`evalkit.config.settings_files.read_settings_file` (size, encoding, aliases and nesting
    checked)."""
    if path is None:
        return default_policy()
    p = Path(path)
    data = read_settings_file(p, "policy file", PolicyError)
    return policy_from_dict(data, f"policy file {p}")


def _one_line(e: ValidationError, source: str) -> str:
    err = e.errors()[0]
    loc = [str(x) for x in err["loc"]]
    where = ".".join(loc)
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(err["loc"][:-1])
        hint = f" (allowed here: {', '.join(allowed)})" if allowed else ""
        return f"{source}: unknown key '{where}'{hint}; remove it or fix its spelling"
    value = err.get("input")
    shown = f" (got {value!r:.40})" if not isinstance(value, dict | list) else ""
    return f"{source}: '{where}': {err['msg']}{shown}; fix this value"


def _allowed_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model found by following ``loc`` from :class:`Policy` (through dict values and
    list items)."""
    tp: Any = Policy
    for part in loc:
        if typing.get_origin(tp) in (dict, list):
            tp = typing.get_args(tp)[-1]  # part is a dict key or list index
            continue
        model = _inner_model(tp)
        field = model.model_fields.get(str(part)) if model is not None else None
        if field is None:
            return []
        tp = field.annotation
    model = _inner_model(tp)
    return list(model.model_fields) if model is not None else []


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside an annotation like ``X | None``; dict/list values are not followed."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None
