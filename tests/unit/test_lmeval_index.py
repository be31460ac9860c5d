"""The kept index of lm-eval's own tasks (evalkit/tasks/lmeval_source.py ``bundled_task_index``): the TaskManager
evalkit builds from it holds what lm-eval's own constructor builds (on a small task tree standing in for lm-eval's,
and on lm-eval's real one), an ``--include-path`` task still takes precedence, the file is read instead of
re-indexing, and an edited task file or a damaged index file is indexed again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalkit.tasks import lmeval_source

TASK = "task: {name}\ndataset_path: json\ntest_split: test\noutput_type: generate_until\ndoc_to_text: '{{{{q}}}}'\n"


def _tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "alpha.yaml").write_text(TASK.format(name="alpha") + "tag: letters\n")
    (root / "sub" / "beta.yaml").write_text(TASK.format(name="beta") + "tag: [letters, second]\n")
    (root / "sub" / "pair.yaml").write_text("group: pair\ntask: [alpha, beta]\n")
    return root


def _view(tm: Any) -> tuple[Any, ...]:
    index = {k: (e.kind, e.yaml_path, e.tags, e.cfg) for k, e in tm.task_index.items()}
    return index, tm.all_tasks, tm.all_subtasks, tm.all_groups, tm.all_tags


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small task tree in place of lm-eval's bundled one, and a fresh evalkit cache."""
    root = _tree(tmp_path / "bundled")
    monkeypatch.setattr(lmeval_source, "lm_eval_tasks_dir", lambda: root)
    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path / "cache"))
    lmeval_source.task_manager.cache_clear()
    yield root
    lmeval_source.task_manager.cache_clear()


def _lm_evals_own(*paths: Path) -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=[str(p) for p in paths], include_defaults=False)


def test_the_kept_index_gives_lm_evals_own_task_manager_and_is_read_not_rebuilt(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _view(lmeval_source.task_manager(())) == _view(_lm_evals_own(tree))
    kept = lmeval_source.bundled_index_path()
    assert kept.is_file() and kept.parent.parent == Path(lmeval_source.generated_dir()).parent

    from lm_eval.tasks._index import TaskIndex

    def no_indexing(*_: Any, **__: Any) -> None:
        raise AssertionError("indexed again although the kept index is there")

    lmeval_source.task_manager.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(TaskIndex, "build", staticmethod(no_indexing))
        again = lmeval_source.bundled_task_index()
    assert sorted(again) == ["alpha", "beta", "letters", "pair", "second"]


def test_an_include_path_task_overrides_a_bundled_one_of_the_same_name(tree: Path, tmp_path: Path) -> None:
    extra = tmp_path / "mine"
    extra.mkdir()
    (extra / "alpha.yaml").write_text(TASK.format(name="alpha") + "num_fewshot: 3\n")
    (extra / "gamma.yaml").write_text(TASK.format(name="gamma"))
    tm = lmeval_source.task_manager((str(extra),))
    assert _view(tm) == _view(_lm_evals_own(tree, extra))
    assert tm.task_index["alpha"].yaml_path == extra / "alpha.yaml"
    assert "gamma" in tm.all_subtasks and "beta" in tm.all_subtasks


def test_an_edited_task_file_or_a_damaged_index_is_indexed_again(tree: Path) -> None:
    first = lmeval_source.bundled_index_path()
    lmeval_source.bundled_task_index()
    (tree / "sub" / "beta.yaml").write_text(TASK.format(name="beta") + "tag: renamed\n")
    second = lmeval_source.bundled_index_path()
    assert second != first
    index = lmeval_source.bundled_task_index()
    assert "renamed" in index and "second" not in index
    assert not first.exists() and second.is_file()  # the stale file is gone

    second.write_bytes(b"not a pickle")
    assert "renamed" in lmeval_source.bundled_task_index()
    assert second.read_bytes() != b"not a pickle"


def test_on_lm_evals_own_tasks_the_index_is_the_one_its_constructor_builds() -> None:
    from lm_eval.tasks import TaskManager

    lmeval_source.task_manager.cache_clear()
    try:
        assert _view(lmeval_source.task_manager(())) == _view(TaskManager())
    finally:
        lmeval_source.task_manager.cache_clear()
