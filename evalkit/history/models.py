"""The history's tables as SQLAlchemy 2 models. One :class:`RunRow` per run dir (its identity: model, server
config and its hash, vLLM version; ``run_dir`` points at the samples, which stay there), one :class:`TaskRow` per
task of a run (version, data hashes, sampling), its :class:`MetricRow` (value with CI) and :class:`SpeedRow`
(one figure of ``contracts.SPEED_METRICS`` each); one :class:`GateRow` per gate decision with its
:class:`GateRunRow` (which runs on which side) and :class:`RuleRow`; one :class:`TickRow` per watch tick.
The migrations in ``migrations/versions`` create exactly these tables (tests/unit/test_history.py compares them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_dir: Mapped[str] = mapped_column(String(1024), unique=True)  # absolute path: the samples stay there
    label: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime | None] = mapped_column(index=True)  # the manifest's, UTC
    finished_at: Mapped[datetime | None]
    recorded_at: Mapped[datetime]
    source: Mapped[str] = mapped_column(String(16))  # run, sweep, watch, gate or add
    kind: Mapped[str | None] = mapped_column(String(16))  # run, sweep point or watch tick (record.run_kind)
    model: Mapped[str | None] = mapped_column(String(255), index=True)
    config: Mapped[str | None] = mapped_column(String(255), index=True)  # the sweep's config name, else the hash
    config_hash: Mapped[str | None] = mapped_column(String(64), index=True)  # of record.identity
    server_argv: Mapped[list[Any] | None]
    server_env: Mapped[dict[str, Any] | None]
    vllm_version: Mapped[str | None] = mapped_column(String(64))
    evalkit_version: Mapped[str | None] = mapped_column(String(64))
    endpoint: Mapped[str | None] = mapped_column(String(1024))  # credentials redacted, as in the manifest
    concurrency: Mapped[str | None] = mapped_column(String(16))
    versions: Mapped[dict[str, Any] | None]

    tasks: Mapped[list[TaskRow]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="TaskRow.id"
    )


class TaskRow(Base):
    __tablename__ = "run_tasks"
    __table_args__ = (UniqueConstraint("run_id", "task"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    task: Mapped[str] = mapped_column(String(255), index=True)
    version: Mapped[str | None] = mapped_column(String(64))
    data_sha256: Mapped[dict[str, Any] | None]
    settings: Mapped[dict[str, Any] | None]  # the task's settings after defaults (limit, few-shot, sampling)
    temperature: Mapped[float | None] = mapped_column(Float)
    top_p: Mapped[float | None] = mapped_column(Float)
    seed: Mapped[int | None]
    max_tokens: Mapped[int | None]
    num_samples: Mapped[int | None]
    requests: Mapped[int | None]
    counts: Mapped[dict[str, Any] | None]

    run: Mapped[RunRow] = relationship(back_populates="tasks")
    metrics: Mapped[list[MetricRow]] = relationship(cascade="all, delete-orphan", order_by="MetricRow.id")
    speed: Mapped[list[SpeedRow]] = relationship(cascade="all, delete-orphan", order_by="SpeedRow.id")


class MetricRow(Base):
    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("run_task_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_task_id: Mapped[int] = mapped_column(ForeignKey("run_tasks.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    value: Mapped[float | None] = mapped_column(Float)
    stderr: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    n: Mapped[int | None]


class SpeedRow(Base):
    __tablename__ = "speed"
    __table_args__ = (UniqueConstraint("run_task_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_task_id: Mapped[int] = mapped_column(ForeignKey("run_tasks.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(64))  # a contracts.SPEED_METRICS key: ttft_p99_ms, output_tokens_per_s
    value: Mapped[float | None] = mapped_column(Float)


class GateRow(Base):
    __tablename__ = "gates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    decided_at: Mapped[datetime] = mapped_column(index=True)
    verdict: Mapped[str] = mapped_column(String(16), index=True)  # pass, fail, cannot_decide
    baseline: Mapped[str | None] = mapped_column(String(1024))  # the result's labels
    candidate: Mapped[str] = mapped_column(String(1024))
    out_dir: Mapped[str | None] = mapped_column(String(1024))
    reasons: Mapped[list[Any] | None]
    policy: Mapped[dict[str, Any] | None]

    runs: Mapped[list[GateRunRow]] = relationship(cascade="all, delete-orphan")
    rules: Mapped[list[RuleRow]] = relationship(cascade="all, delete-orphan")


class GateRunRow(Base):
    __tablename__ = "gate_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gate_id: Mapped[int] = mapped_column(ForeignKey("gates.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # baseline or candidate


class RuleRow(Base):
    __tablename__ = "gate_rules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gate_id: Mapped[int] = mapped_column(ForeignKey("gates.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    task: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    verdict: Mapped[str] = mapped_column(String(16))
    observed: Mapped[float | None] = mapped_column(Float)
    baseline: Mapped[float | None] = mapped_column(Float)
    candidate: Mapped[float | None] = mapped_column(Float)
    budget: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    note: Mapped[str | None] = mapped_column(Text)


class TickRow(Base):
    __tablename__ = "watch_ticks"
    __table_args__ = (UniqueConstraint("watch_dir", "tick"), Index("ix_watch_ticks_task", "task"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    watch_dir: Mapped[str] = mapped_column(String(1024))
    task: Mapped[str] = mapped_column(String(255))
    tick: Mapped[int]
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    started_at: Mapped[str | None] = mapped_column(String(40))
    finished_at: Mapped[str | None] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(16))
    verdict: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    p_value: Mapped[float | None] = mapped_column(Float)
    failed_rules: Mapped[list[Any] | None]
    rules: Mapped[list[Any] | None]
    window: Mapped[dict[str, Any] | None]
