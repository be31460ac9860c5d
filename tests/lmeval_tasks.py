"""Small lm-eval tasks the tests write into a folder (lm-eval YAMLs reading JSONL files beside them through
``datasets``' ``json`` builder), passed to evalkit and to lm-eval by ``--include-path``: two generation tasks
(``tiny_gen``; ``tiny_chat``, two-shot with a description, for chat prompts), one multiple-choice (``tiny_mc``),
one loglikelihood_rolling (``tiny_roll``) task and a group of the last two (``tiny_group``). The texts are
written here for the tests (no licence beyond this repository's)."""

from __future__ import annotations

import json
from pathlib import Path

QA = [
    ("What is the capital of France?", "Paris", ["Paris", "London", "Berlin", "Rome"]),
    ("Which animal barks?", "dog", ["cat", "dog", "cow", "fish"]),
    ("What is 2 + 2?", "4", ["3", "5", "4", "22"]),
    ("Where does the sun rise?", "east", ["west", "north", "south", "east"]),
    ("At what temperature does water freeze?", "0 degrees", ["0 degrees", "50 degrees", "100 degrees", "-4 degrees"]),
    ("What color is the sky on a clear day?", "blue", ["green", "blue", "red", "black"]),
]
PAGES = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Paris is the capital and most populous city of France. It lies on the Seine river in the north of the country.",
    "Once upon a time there was a little girl who lived in a village near the forest. " * 2,
    "A language model assigns a probability to every sequence of words.",
]

METRICS_MC = """metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


def write_tasks(folder: Path, version: str = "1.0", gen_prompt: str = "Question: {{question}}\\nAnswer:") -> Path:
    """The five task files and their data under ``folder`` (returned); ``version`` and ``gen_prompt`` change
    tiny_gen's metadata version and prompt."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    rows = [{"question": q, "answer": a, "choices": c, "label": c.index(a)} for q, a, c in QA]
    (data / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "pages.jsonl").write_text("".join(json.dumps({"page": p}) + "\n" for p in PAGES))
    common = "dataset_path: json\ntest_split: test\n"
    qa = f"dataset_kwargs:\n  data_files:\n    test: {data / 'qa.jsonl'}\n"
    pages = f"dataset_kwargs:\n  data_files:\n    test: {data / 'pages.jsonl'}\n"
    (folder / "tiny_gen.yaml").write_text(
        f'task: tiny_gen\n{common}{qa}output_type: generate_until\ndoc_to_text: "{gen_prompt}"\n'
        'doc_to_target: " {{answer}}"\ngeneration_kwargs:\n  until: ["\\n", "."]\n  max_gen_toks: 12\n'
        "  do_sample: false\n  temperature: 0.0\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n"
        "    higher_is_better: true\n    ignore_case: true\n    ignore_punctuation: true\n"
        f"metadata:\n  version: {version}\n"
    )
    (folder / "tiny_mc.yaml").write_text(
        f"task: tiny_mc\n{common}{qa}output_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\n'
        f'doc_to_target: label\ndoc_to_choice: "{{{{choices}}}}"\n{METRICS_MC}metadata:\n  version: 1.0\n'
    )
    (folder / "tiny_roll.yaml").write_text(
        f'task: tiny_roll\n{common}{pages}output_type: loglikelihood_rolling\ndoc_to_text: ""\n'
        'doc_to_target: "{{page}}"\nmetric_list:\n  - metric: word_perplexity\n  - metric: byte_perplexity\n'
        "  - metric: bits_per_byte\nmetadata:\n  version: 1.0\n"
    )
    (folder / "tiny_chat.yaml").write_text(  # few-shot from its own documents, five stop strings
        f"task: tiny_chat\n{common}fewshot_split: test\n{qa}output_type: generate_until\nnum_fewshot: 2\n"
        'description: "Answer with one word."\ndoc_to_text: "Question: {{question}}"\ndoc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n\\n", ".", "Question:", "<|im_end|>", "</s>"]\n  max_gen_toks: 6\n'
        "  do_sample: false\n  temperature: 0.0\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n"
        "    higher_is_better: true\n    ignore_case: true\n    ignore_punctuation: true\nmetadata:\n  version: 1.0\n"
    )
    (folder / "tiny_group.yaml").write_text(
        "group: tiny_group\ntask:\n  - tiny_mc\n  - tiny_roll\nmetadata:\n  version: 1.0\n"
    )
    return folder
