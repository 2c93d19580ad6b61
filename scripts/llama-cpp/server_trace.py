#!/usr/bin/env python3
"""Records a real llama-server trace under context shift: starts `llama-server` (built by
`scripts/llama-cpp/build.sh`) on 127.0.0.1 with a small context, `--keep N` and context shift on,
generates from a book prompt with per-token logprobs, and saves the server's `/completion` response
exactly as it wrote it, with the prompt's token ids (from its own `/tokenize`). The server is
stopped whatever happens (and after --timeout seconds at the latest).

    server_trace.py --server $CACHE/build/bin/llama-server --model M.gguf --text book.txt \
        --ctx 256 --keep 4 --n-predict 640 --response r.json --prompt-ids p.json --log server.log

`sinkscope watch r.json` and `sinkscope verify r.json --prompt-ids p.json -m M.gguf --policy keep
--sinks N --cache CTX-1` read the result (N: --keep, plus 1 when the model adds BOS).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def fail(msg):
    print(f"server_trace.py: {msg}", file=sys.stderr)
    sys.exit(2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body, timeout):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def write_atomic(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".server_trace.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True, help="the prompt's source (a UTF-8 book)")
    ap.add_argument("--start-char", type=int, default=2000)
    ap.add_argument("--prompt-tokens", type=int, default=96)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--keep", type=int, default=4)
    ap.add_argument("--n-predict", type=int, default=640)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--response", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()

    with open(a.text, encoding="utf-8") as f:
        text = f.read()[a.start_char : a.start_char + 8 * a.prompt_tokens]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [a.server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-c", str(a.ctx), "-np", "1",
            "--keep", str(a.keep), "--context-shift", "-t", str(a.threads), "--no-webui", "--no-warmup"]
    deadline = time.time() + a.timeout
    with open(a.log, "wb") as log:
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                if server.poll() is not None:
                    fail(f"llama-server exited with {server.returncode} before it was ready; see {a.log}")
                if time.time() > deadline:
                    fail(f"llama-server not ready after {a.timeout} s; see {a.log}")
                try:
                    with urllib.request.urlopen(base + "/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(0.25)
            tokens = json.loads(post(base, "/tokenize", {"content": text, "add_special": True}, 60))["tokens"]
            prompt = tokens[: a.prompt_tokens]
            if len(prompt) < a.prompt_tokens:
                fail(f"{a.text}: only {len(prompt)} prompt tokens from character {a.start_char}")
            body = {
                "prompt": prompt,
                "n_predict": a.n_predict,
                "n_probs": 1,
                "return_tokens": True,
                "temperature": a.temperature,
                "seed": a.seed,
                "ignore_eos": True,
                "cache_prompt": False,
            }
            response = post(base, "/completion", body, max(1.0, deadline - time.time()))
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    write_atomic(a.prompt_ids, json.dumps(prompt).encode())
    write_atomic(a.response, response)
    r = json.loads(response)
    print(json.dumps({"port": port, "prompt_tokens": len(prompt), "generated": len(r.get("completion_probabilities", [])),
                      "truncated": r.get("truncated"), "timings": r.get("timings")}))


if __name__ == "__main__":
    main()
