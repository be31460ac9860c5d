#!/bin/bash
# On the lent H200 after receive.sh printed READY (../shared/gpu/README.md). `start`: two independent vLLM
# servers of SmolLM2-135M on the one GPU (ports 8001, 8002; 0.3 of its memory each), in their own sessions, the
# second started once the first is healthy (started together, their memory profiling overlaps and one of them
# is left with a KV cache of ~33k tokens instead of ~1.9M). `measure`: GSM8K (1,319 documents, 5-shot, greedy)
# at a total concurrency of 256, two rounds of: 8001 alone, 8002 alone, both (--endpoint twice). Prints each
# run's output tok/s and TTFT/TPOT p50 from summary.json and the ratio of the medians (sharded over single); the
# run dirs come back in $OUT/shard.tgz.
set -uo pipefail
. benchmarks/gpu/device_env.sh
W=/root/work/shard; mkdir -p $W
case "$1" in
start)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  for port in 8001 8002; do
    up $port
    grep "KV cache size" /root/srv-$port.log | tail -1
  done
  ;;
measure)
  for port in 8001 8002; do
    wait_healthy $port || exit 3
  done
  echo "both servers healthy after ${SECONDS} s of this call"
  A=(--endpoint http://127.0.0.1:8001/v1); B=(--endpoint http://127.0.0.1:8002/v1)
  run() { python3 -m evalkit.cli run gsm8k "$@" --concurrency 256 --fresh -q > /dev/null 2>&1; }
  run "${A[@]}" "${B[@]}" --limit 300 -o $W/warmup  # prompt cache and both servers' first batches
  for round in 1 2; do
    run "${A[@]}" -o $W/single8001-$round
    run "${B[@]}" -o $W/single8002-$round
    run "${A[@]}" "${B[@]}" -o $W/sharded-$round
  done
  python3 - "$W" <<'PY'
import json, statistics, sys
from pathlib import Path
w = Path(sys.argv[1])
tok = {"single": [], "sharded": []}
for d in sorted(p for p in w.iterdir() if p.is_dir() and p.name != "warmup"):
    kind = "sharded" if d.name.startswith("sharded") else "single"
    t = json.loads((d / "summary.json").read_text())["tasks"]["gsm8k"]
    s = t["speed"]
    tok[kind].append(s['output_tokens_per_s'])
    print(d.name, f"output tok/s {s['output_tokens_per_s']:.0f}", f"req/s {s['requests_per_s']:.2f}",
          f"TTFT p50 {s['ttft_ms']['p50']:.1f} ms", f"TPOT p50 {s['tpot_ms']['p50']:.2f} ms",
          "per endpoint:", [(e["endpoint"], e["counts"]["total"], round(e['speed']['output_tokens_per_s']))
                            for e in t.get("endpoints", [])])
print("ratio sharded/single (medians):", round(statistics.median(tok["sharded"]) / statistics.median(tok["single"]), 3))
PY
  cp /root/srv-8001.log /root/srv-8002.log $W/
  tar czf $OUT/shard.tgz -C $W --exclude warmup .
  ;;
esac
