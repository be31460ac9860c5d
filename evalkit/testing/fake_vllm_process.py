"""A tiny stand-in for the vLLM server process, for lifecycle tests of :mod:`evalkit.server.vllm_process` (stdlib
only, starts fast; run as a script, e.g. ``python evalkit/testing/fake_vllm_process.py --model m``).

Accepts the flags evalkit's ``build_argv`` produces (and rejects unknown ones, as vLLM's argparse does) plus
``--fake-*`` flags that make it misbehave:

  --fake-startup-delay S     sleep S seconds before listening
  --fake-exit-code N         print a traceback-like message and exit with N (after the delay)
  --fake-ignore-sigterm      ignore SIGTERM (so the stopper must escalate to SIGKILL)
  --fake-child               spawn a child process (a grandchild of evalkit) in the same process group
  --fake-child-ignore-sigterm  ... which ignores SIGTERM too
  --fake-record PATH         write {"argv", "pid", "child_pid", "env"} as JSON at once (before any delay)
  --fake-models A,B          ids listed by /v1/models (default: the served model name)
  --fake-metrics FILE        serve FILE as /metrics (default: generated, with a KV-cache gauge that rises)
  --fake-no-metrics          /metrics answers 404

Endpoints: /health, /version, /v1/models (401 without the right bearer token when VLLM_API_KEY is set),
/metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORDED_ENV = ("VLLM_", "FAKE_", "CUDA_", "HF_", "NCCL_", "TORCH_", "NVSHMEM_")
CHILD = "import signal, sys, time\nif sys.argv[1] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + (
    "while True: time.sleep(1)\n"
)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_vllm")
    p.add_argument("model_positional", nargs="?")
    p.add_argument("--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name")
    for flag in (
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size-local",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-backend",
        "--distributed-executor-backend",
        "--api-server-count",
        "--nnodes",
        "--master-addr",
        "--master-port",
        "--max-num-seqs",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--dtype",
        "--tokenizer-mode",
        "--reasoning-parser",
        "--tool-call-parser",
    ):
        p.add_argument(flag)
    p.add_argument("--enable-expert-parallel", action="store_true")
    p.add_argument("--enable-auto-tool-choice", action="store_true")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--fake-startup-delay", type=float, default=0.0)
    p.add_argument("--fake-exit-code", type=int)
    p.add_argument("--fake-ignore-sigterm", action="store_true")
    p.add_argument("--fake-child", action="store_true")
    p.add_argument("--fake-child-ignore-sigterm", action="store_true")
    p.add_argument("--fake-record")
    p.add_argument("--fake-models")
    p.add_argument("--fake-metrics")
    p.add_argument("--fake-no-metrics", action="store_true")
    return p.parse_args(argv)


def metrics_text(name: str, n: int) -> str:
    kv = min(1.0, n / 10)
    return (
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="{name}"}} {kv}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="{name}"}} {n % 4}\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="{name}"}} 0.0\n'
        "# TYPE vllm:prompt_tokens counter\n"
        f'vllm:prompt_tokens_total{{engine="0",model_name="{name}"}} {100.0 * n}\n'
    )


def make_handler(args: argparse.Namespace, name: str) -> type[BaseHTTPRequestHandler]:
    api_key = os.environ.get("VLLM_API_KEY")
    models = args.fake_models.split(",") if args.fake_models else [name]
    scrapes = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *a: object) -> None:
            print("INFO fake_vllm:", fmt % a, flush=True)

        def send(self, code: int, body: str, ctype: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send(200, "")
            elif self.path == "/version":
                self.send(200, json.dumps({"version": "0.0.0+fake"}))
            elif self.path == "/v1/models":
                if api_key and self.headers.get("Authorization") != f"Bearer {api_key}":
                    self.send(401, json.dumps({"error": "Unauthorized"}))
                    return
                self.send(
                    200,
                    json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in models]}),
                )
            elif self.path == "/metrics" and not args.fake_no_metrics:
                scrapes[0] += 1
                if args.fake_metrics:
                    with open(args.fake_metrics) as fh:
                        text = fh.read()
                else:
                    text = metrics_text(name, scrapes[0])
                self.send(200, text, "text/plain; version=0.0.4")
            else:
                self.send(404, json.dumps({"detail": "Not Found"}))

    return Handler


def main() -> int:
    args = parse(sys.argv[1:])
    model = args.model or args.model_positional
    if model is None:
        print("error: no model given", file=sys.stderr)
        return 2
    name = args.served_model_name or model
    print(f"INFO fake_vllm: args={sys.argv[1:]}", flush=True)
    if args.fake_ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = None
    if args.fake_child:
        flag = "1" if args.fake_child_ignore_sigterm else "0"
        child = subprocess.Popen([sys.executable, "-c", CHILD, flag])
    if args.fake_record:
        env = {k: v for k, v in os.environ.items() if k.startswith(RECORDED_ENV)}
        record = {"argv": sys.argv, "pid": os.getpid(), "child_pid": child and child.pid, "env": env}
        with open(args.fake_record + ".tmp", "w") as fh:
            json.dump(record, fh)
        os.replace(args.fake_record + ".tmp", args.fake_record)
    time.sleep(args.fake_startup_delay)
    if args.fake_exit_code is not None:
        for i in range(40):
            print(f"DEBUG fake_vllm: loading shard {i}", flush=True)
        print("Traceback (most recent call last):\nRuntimeError: fake engine core failed to start", flush=True)
        return args.fake_exit_code
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args, name))
    print(f"INFO fake_vllm: Starting vLLM API server on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
