"""One streamed request to a vLLM server; prints the time to the first chunk with text and the total.

Usage: python probe_first_token.py URL chat|completions TEMPERATURE [TOP_P]   (stdlib only, runs anywhere)
"""

import json
import sys
import time
import urllib.request


def main() -> None:
    url, kind, temp = sys.argv[1], sys.argv[2], float(sys.argv[3])
    top_p = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    body = {"model": "smollm2-135m", "max_tokens": 16, "temperature": temp, "top_p": top_p, "stream": True}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": "What is 2 + 3? Answer briefly."}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "Question: What is 2 + 3?\nAnswer:"
        path = "/v1/completions"
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    st = time.perf_counter()
    first = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            c = json.loads(line[5:])["choices"][0]
            text = c.get("text") if kind != "chat" else (c.get("delta") or {}).get("content")
            if text and first is None:
                first = time.perf_counter() - st
    end = time.perf_counter() - st
    first_ms = first * 1000 if first else -1
    print(f"probe {kind} temperature={temp} top_p={top_p}: first text {first_ms:.0f} ms, total {end * 1000:.0f} ms")


if __name__ == "__main__":
    main()
