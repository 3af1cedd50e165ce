"""The in-process onnxruntime row of bench/serve.sh: a policy exported with
`fleetrl export --format onnx`, run by onnxruntime in this process by N concurrent callers
(threads sharing one session, onnxruntime on one intra-op thread, one observation a call, back
to back, as serve_bench's callers send one-observation requests). One JSON line per case, in
serve_bench's schema.

    python bench/serve_onnx.py POLICY.onnx --clients 1,16,64 --seconds 5
"""

import argparse
import json
import threading
import time

import numpy as np
import onnxruntime as ort


def run_case(session, dim, clients, seconds):
    deadline = time.perf_counter() + seconds
    latencies = [[] for _ in range(clients)]
    start = threading.Barrier(clients + 1)

    def caller(k):
        rng = np.random.default_rng(k)
        obs = rng.normal(0.0, 0.5, size=(1024, 1, dim)).astype(np.float32)
        out = latencies[k]
        start.wait()
        i = 0
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            session.run(None, {"obs": obs[i % 1024]})
            out.append((time.perf_counter() - sent) * 1e3)
            i += 1

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    began = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    ms = np.concatenate([np.asarray(l) for l in latencies])
    print(json.dumps({
        "case": "in-process onnxruntime (Python threads)",
        "clients": clients,
        "requests": int(ms.size),
        "requests_per_s": ms.size / elapsed,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_batch": 1.0,
    }), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("policy")
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(args.policy, options, providers=["CPUExecutionProvider"])
    dim = session.get_inputs()[0].shape[1]
    for clients in (int(c) for c in args.clients.split(",")):
        run_case(session, dim, clients, args.seconds)


if __name__ == "__main__":
    main()
