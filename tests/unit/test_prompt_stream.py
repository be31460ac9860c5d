"""With a cold prompt cache, lm-eval builds the prompts in a worker process and evalkit sends each request as it
comes: the first request reaches the server before lm-eval has built the later prompts, the requests streamed are
exactly lm-eval's own (and the cached ones), a resumed run skips what was answered, and a builder that dies is a
clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.contracts import Request
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings
from tests.parity import lm_eval_gsm8k_config


@pytest.fixture
def cold_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(cache))
    return cache / "prompts"


@pytest.mark.slow
def test_streamed_prompts_are_lm_evals_own(cold_cache: Path):
    from lm_eval.api.task import ConfigurableTask

    task = Registry().get("gsm8k")
    settings = TaskSettings(limit=None)
    assert not task.quick_to_build(settings)
    assert task.count_requests(settings) == 1319 and task.count_requests(TaskSettings(limit=5)) == 5
    streamed: list[Request] = []
    task.stream_requests(settings, streamed.append)
    assert task.quick_to_build(settings)  # the build wrote the cache
    assert streamed == task.build_requests(settings)  # what is streamed is what the cache gives later runs
    # lm-eval's own task (its own loader, the data as json files) builds the same 5-shot prompts
    theirs = ConfigurableTask(config=lm_eval_gsm8k_config())
    theirs.set_fewshot_seed(seed=1234)
    theirs.build_all_requests(limit=40, rank=0, world_size=1)
    assert [(r.doc_id, r.prompt) for r in streamed[:40]] == [(i.doc_id, i.args[0]) for i in theirs.instances]
    assert all(r.gen.stop == tuple(i.args[1]["until"]) for r, i in zip(streamed, theirs.instances, strict=False))
