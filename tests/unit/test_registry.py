import textwrap
from pathlib import Path

import pytest

from evalkit.errors import TaskError
from evalkit.tasks.catalogue import builtin_tasks_dir
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings

REPO = Path(__file__).resolve().parents[2]


def test_builtin_tasks_listed():
    names = Registry().names()
    assert "gsm8k" in names and "aime25" in names


def test_unknown_task_did_you_mean():
    with pytest.raises(TaskError, match="did you mean 'gsm8k'"):
        Registry().get("gsm8kk")


def test_gsm8k_is_lm_evals_own_task_on_vendored_data():
    task = Registry().get("gsm8k")
    reqs = task.build_requests(TaskSettings(limit=3))
    assert len(reqs) == 3
    assert reqs[0].prompt.endswith("Question: " + _first_test_question() + "\nAnswer:")
    assert reqs[0].prompt.count("Question:") == 6  # 5-shot
    assert reqs[0].gen.stop == ("Question:", "</s>", "<|im_end|>")
    assert reqs[0].gen.max_tokens == 256 and reqs[0].gen.temperature == 0.0
    assert task.data_sha256["test"] == "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
    assert task.metric_names() == ["exact_match,strict-match", "exact_match,flexible-extract"]


def _first_test_question() -> str:
    import json

    with open(builtin_tasks_dir() / "data/gsm8k/test.jsonl") as f:
        return json.loads(f.readline())["question"]


def test_new_lm_eval_task_by_one_yaml_file(tmp_path):
    """A GSM8K variant (zero-shot, different prompt) added by one YAML file in --tasks-dir."""
    data = builtin_tasks_dir() / "data/gsm8k"
    (tmp_path / "gsm8k_zs.yaml").write_text(
        textwrap.dedent(f"""
        name: gsm8k-zeroshot-q
        kind: lm-eval
        version: "1"
        lm_eval:
          base: gsm8k/gsm8k.yaml
          overrides:
            num_fewshot: 0
            doc_to_text: "Q: {{{{question}}}}\\nA:"
        data:
          train: {data}/train.jsonl
          test: {data}/test.jsonl
    """)
    )
    reg = Registry([tmp_path])
    task = reg.get("gsm8k-zeroshot-q")
    req = task.build_requests(TaskSettings(limit=1, num_fewshot=0))[0]
    assert req.prompt == "Q: " + _first_test_question() + "\nA:"
    assert task.version == "1"


def test_task_without_version_is_refused(tmp_path):
    (tmp_path / "x.yaml").write_text("name: x\nkind: lm-eval\n")
    with pytest.raises(TaskError, match="no 'version'"):
        Registry([tmp_path])


def test_missing_tasks_dir(tmp_path):
    with pytest.raises(TaskError, match="tasks dir not found"):
        Registry([tmp_path / "nope"])
