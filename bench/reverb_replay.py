"""DeepMind Reverb 0.14 replay throughput and latency over loopback gRPC: the Reverb side of
fleetrl's replay benchmark.

Runs a Reverb server in its own process and clients in a few worker processes (threads inside
them: Reverb's C++ client releases the GIL while it waits), and prints one JSON line per case on
stdout; progress goes to stderr.

  bash bench/setup_reverb.sh   # once: bench/.venv-reverb with dm-reverb 0.14.0 + TF 2.15.1
  bench/.venv-reverb/bin/python bench/reverb_replay.py [--seconds 5] [--items cartpole,atari] \
      [--writers 1,8,64] [--samplers 1,8]

Items (random payloads: Reverb's chunk compression gains nothing; real Atari frames would shrink):
  cartpole: obs f32[4], action i64[], reward f32[], next_obs f32[4], done bool[]  (45 bytes)
  atari:    obs u8[4,84,84], action i64[], reward f32[]                         (28,236 bytes)
Table: uniform sampler, FIFO remover, MinSize(1), max_size 1,000,000 (cartpole) / 20,000 (atari),
with a signature (each field [1, ...]: an item is a 1-step trajectory). MB/s counts payload
bytes (1 MB = 1e6 bytes).

insert (default method `writer`): each writer thread owns one `Client.writer(1, chunk_length=1,
  max_in_flight_items=M)` stream and inserts each item with `append` + `create_item` (one item =
  one single-step chunk, sent at once; the call blocks while M items await the server's
  confirmation). Latency = that per-item call as the client sees it (so waits for the in-flight
  window count). The window ends with `flush()`, which waits for every item to be confirmed, and
  the case's time includes it. `--insert-method sync` adds `flush()` after every item (latency =
  a confirmed round trip); `trajectory` uses `Client.trajectory_writer` the way Acme's adders do
  (append, create_item, flush(M)). `--insert-chunk K` packs K steps per chunk: faster, but items
  share chunks and travel only when a chunk fills, so it is not the default.
sample (default method `dataset`): each sampler thread iterates its own
  `reverb.TrajectoryDataset(..., max_in_flight_samples_per_worker=--in-flight).batch(256)
  .as_numpy_iterator()` (no prefetch): one stream kept open, batching in TF's C++, a batch is one
  [256, ...] numpy array per field. Latency = one `next()`, i.e. one batch. `sampler` keeps the
  C++ `Sampler` behind `Client.sample` open (`Client._client.NewSampler`, same in-flight window)
  and builds the batch in Python from 256 `GetNextTrajectory` calls: 1.1-1.5x slower here.
  `client` is the public `Client.sample(table, 256)`, which opens a new stream with 1 sample in
  flight per call: about 7x slower.
The table is pre-filled to max_size (--prefill) before sampling. Each insert case starts from an
emptied table (cartpole never fills in a 5 s case; atari's FIFO remover evicts within ~1 s).
"""

import argparse
import json
import multiprocessing as mp
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ITEMS = {
    # name: (columns [(name, dtype, shape)], max_size)
    "cartpole": ([("obs", "float32", (4,)), ("action", "int64", ()), ("reward", "float32", ()),
                  ("next_obs", "float32", (4,)), ("done", "bool", ())], 1_000_000),
    "atari": ([("obs", "uint8", (4, 84, 84)), ("action", "int64", ()),
               ("reward", "float32", ())], 20_000),
}
BATCH = 256


def item_bytes(item):
    return sum(np.dtype(d).itemsize * int(np.prod(s)) for _, d, s in ITEMS[item][0])


def log(msg):
    print(f"[reverb_replay {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def quiet_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


# ---------------------------------------------------------------------------------------------
# server process


def serve(port, item):
    quiet_tf()
    import reverb
    import tensorflow as tf

    cols, max_size = ITEMS[item]
    # an item is a 1-step trajectory, so each column is [1, ...] (the shape writers send)
    signature = {n: tf.TensorSpec((1,) + s, tf.dtypes.as_dtype(d), name=n) for n, d, s in cols}
    table = reverb.Table(name=item, sampler=reverb.selectors.Uniform(),
                         remover=reverb.selectors.Fifo(), max_size=max_size,
                         rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
    # Reverb's default checkpointer makes a temp dir it never removes: give it one we remove
    with tempfile.TemporaryDirectory(prefix="reverb_replay_ckpt_") as ckpt:
        server = reverb.Server(tables=[table], port=port,
                               checkpointer=reverb.checkpointers.DefaultCheckpointer(ckpt))
        print("ready", flush=True)
        sys.stdin.read()  # the benchmark holds our stdin open: EOF means it is gone, so stop too
        server.stop()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(item):
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_serve", str(port),
                             item], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise RuntimeError(f"reverb server did not start (got {line!r})")
    return proc, f"127.0.0.1:{port}"


# ---------------------------------------------------------------------------------------------
# worker processes: each runs a command loop; a case runs T threads inside it


def make_steps(item, n, seed):
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(n):
        step = {}
        for name, dtype, shape in ITEMS[item][0]:
            if dtype == "uint8":
                v = rng.integers(0, 256, size=shape, dtype=np.uint8)
            elif dtype == "int64":
                v = np.int64(rng.integers(0, 2))
            elif dtype == "bool":
                v = np.bool_(rng.random() < 0.05)
            else:
                v = rng.standard_normal(size=shape).astype(np.float32)
                v = np.float32(v) if shape == () else v
            step[name] = np.asarray(v)
        steps.append(step)
    return steps


class Inserter:
    def __init__(self, client, item, method, in_flight, seed, chunk=1):
        self.item, self.method, self.in_flight = item, method, in_flight
        self.names = sorted(c[0] for c in ITEMS[item][0])  # the signature's flat (sorted) order
        self.steps = make_steps(item, 64, seed)
        self.flat = [[s[n] for n in self.names] for s in self.steps]
        if method == "trajectory":
            self.w = client.trajectory_writer(num_keep_alive_refs=1)
        else:
            self.w = client.writer(max_sequence_length=chunk, chunk_length=chunk,
                                   max_in_flight_items=in_flight)
        self.i = 0

    def one(self):
        i, self.i = self.i, self.i + 1
        w = self.w
        if self.method == "trajectory":
            w.append(self.steps[i & 63])
            w.create_item(self.item, 1.0, {n: w.history[n][-1:] for n in self.names})
            w.flush(self.in_flight)
        else:
            w.append(self.flat[i & 63])
            w.create_item(self.item, 1, 1.0)
            if self.method == "sync":
                w.flush()

    def finish(self):
        self.w.flush()

    def close(self):
        self.w.close()


class BatchSampler:
    def __init__(self, client, address, item, method, in_flight):
        self.item, self.method = item, method
        cols = ITEMS[item][0]
        self.ncols, self.checked = len(cols), False
        if method == "sampler":
            from reverb import pybind
            self.skip = pybind.Sampler.NUM_INFO_TENSORS
            self.s = client._client.NewSampler(item, -1, in_flight)
        elif method == "dataset":
            import reverb
            import tensorflow as tf
            ds = reverb.TrajectoryDataset(
                server_address=address, table=item,
                dtypes={n: tf.dtypes.as_dtype(d) for n, d, _ in cols},
                # writer items are 1-step trajectories: each column comes back as [1, ...]
                shapes={n: tf.TensorShape((1,) + s) for n, _, s in cols},
                max_in_flight_samples_per_worker=in_flight)
            self.it = ds.batch(BATCH, drop_remainder=True).as_numpy_iterator()
        else:
            self.client = client

    def one(self):
        batch = self.batch()
        if not self.checked:  # the first batch: every field is [256, ...] of its dtype
            got = sorted((str(v.dtype), v.shape) for v in
                         (batch.values() if isinstance(batch, dict) else batch))
            want = sorted((d, (BATCH,) + s) for _, d, s in ITEMS[self.item][0])
            if got != want:
                raise RuntimeError(f"sampled batch is {got}, expected {want}")
            self.checked = True
        return batch

    def batch(self):
        if self.method == "sampler":
            get, skip = self.s.GetNextTrajectory, self.skip
            rows = [get() for _ in range(BATCH)]
            # each column of a row is [1, ...]: concatenating gives the [256, ...] batch
            return [np.concatenate([r[skip + c] for r in rows]) for c in range(self.ncols)]
        if self.method == "dataset":
            data = next(self.it).data
            return {k: v.reshape(v.shape[:1] + v.shape[2:]) for k, v in data.items()}
        rows = list(self.client.sample(self.item, BATCH, emit_timesteps=False))
        return [np.concatenate([r.data[c] for r in rows]) for c in range(self.ncols)]

    def close(self):
        if self.method == "sampler":
            del self.s
        elif self.method == "dataset":
            del self.it


def timed_loop(worker, op, t0, warmup, seconds):
    """Warm up until t0 + warmup, then time each call until t0 + warmup + seconds.

    Returns (calls in the window, seconds incl. the final flush, latencies, calls incl. warm-up,
    final flush seconds)."""
    t_measure, t_end = t0 + warmup, t0 + warmup + seconds
    nwarm = 0
    while time.time() < t_measure:
        worker.one()
        nwarm += 1
    lat, pc = [], time.perf_counter
    while True:
        a = pc()
        worker.one()
        lat.append(pc() - a)
        if time.time() >= t_end:
            break
    tail = 0.0
    if op == "insert":
        a = pc()
        worker.finish()  # returns once the server has confirmed every item this writer sent
        tail = pc() - a
    return len(lat), time.time() - t_measure, np.asarray(lat), len(lat) + nwarm, tail


def fill_loop(worker, count):
    for _ in range(count):
        worker.one()
    worker.finish()
    return count, 0.0, np.zeros(0), count, 0.0


def cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_threads(conn, address, cmd):
    """One case inside one worker process: cmd['threads'] threads, each with its own client.

    Replies ('ready', setup errors) once every thread is set up, waits for ('go', t0) or
    ('stop',), and replies ('done', ...) or ('error', message)."""
    import reverb

    op, nthreads = cmd["op"], cmd["threads"]
    ready, go = threading.Barrier(nthreads + 1), threading.Event()
    shared = {"t0": None}
    results, errors = [None] * nthreads, []

    def body(k):
        try:
            client = reverb.Client(address)
            if op in ("insert", "fill"):
                worker = Inserter(client, cmd["item"], cmd["method"], cmd["in_flight"],
                                  seed=cmd["seed"] * 1000 + k, chunk=cmd.get("chunk", 1))
            else:
                worker = BatchSampler(client, address, cmd["item"], cmd["method"],
                                      cmd["in_flight"])
        except Exception as e:  # noqa: BLE001  (reported to the main process)
            errors.append(f"{type(e).__name__}: {e}")
            ready.wait()
            return
        ready.wait()
        go.wait()
        if shared["t0"] is None:
            return
        try:
            if op == "fill":
                results[k] = fill_loop(worker, cmd["count"][k])
            else:
                results[k] = timed_loop(worker, op, shared["t0"], cmd["warmup"], cmd["seconds"])
            worker.close()
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(nthreads)]
    for t in threads:
        t.start()
    ready.wait()
    conn.send(("ready", errors[:1]))
    msg = conn.recv()
    if msg[0] == "go":
        shared["t0"] = msg[1]
    cpu0 = cpu_s()
    go.set()
    for t in threads:
        t.join()
    if msg[0] != "go":
        return
    if errors:
        conn.send(("error", errors[0]))
        return
    conn.send(("done", sum(r[0] for r in results), max(r[1] for r in results),
               np.concatenate([r[2] for r in results]), sum(r[3] for r in results),
               max(r[4] for r in results), cpu_s() - cpu0))


def worker_main(conn, address):
    quiet_tf()
    import reverb

    ctl = reverb.Client(address)
    conn.send(("up",))
    while True:
        cmd = conn.recv()
        if cmd["op"] == "quit":
            return
        if cmd["op"] == "reset":
            ctl.reset(cmd["item"])
            conn.send(("ok",))
        elif cmd["op"] == "info":
            info = ctl.server_info()[cmd["item"]]
            conn.send(("info", info.current_size))
        else:
            run_threads(conn, address, cmd)


def proc_cpu_s(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pool:
    def __init__(self, address, procs, server_pid):
        self.server_pid = server_pid
        self.cpu = None
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for _ in range(procs):
            a, b = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(b, address), daemon=True)
            p.start()
            self.conns.append(a)
            self.procs.append(p)
        for c in self.conns:
            if c.recv()[0] != "up":
                raise RuntimeError("worker failed to start")

    def ask(self, i, cmd):
        self.conns[i].send(cmd)
        return self.recv(i, 120)

    def recv(self, i, timeout_s):
        if not self.conns[i].poll(timeout_s):
            raise RuntimeError(f"client process {i} gave no answer in {timeout_s:.0f}s")
        return self.conns[i].recv()

    def table_size(self, item):
        return self.ask(0, {"op": "info", "item": item})[1]

    def run(self, cmd, nclients, warmup=0.0, counts=None):
        """Spread nclients threads over the processes.

        Returns (items in the window, its seconds, latencies, items incl. warm-up, longest final
        flush)."""
        nproc = min(nclients, len(self.conns))
        per = [nclients // nproc + (1 if i < nclients % nproc else 0) for i in range(nproc)]
        start = 0
        for i in range(nproc):
            c = dict(cmd, threads=per[i], seed=i)
            if counts is not None:
                c["count"] = counts[start:start + per[i]]
            start += per[i]
            self.conns[i].send(c)
        replies = [self.recv(i, 300) for i in range(nproc)]
        errs = [r[1][0] for r in replies if r[1]]
        t0 = time.time() + 0.1
        server_cpu0 = proc_cpu_s(self.server_pid)
        for i in range(nproc):
            self.conns[i].send(("go", t0) if not errs else ("stop",))
        if errs:
            raise RuntimeError(f"client setup failed: {errs[0]}")
        limit = 900 if cmd["op"] == "fill" else cmd["warmup"] + cmd["seconds"] + 120
        done = [self.recv(i, limit) for i in range(nproc)]
        wall = time.time() - t0
        # CPU seconds the server and the clients used for the whole case (warm-up included), and
        # the wall time: per item, they say what the load on a shared machine hides
        self.cpu = (proc_cpu_s(self.server_pid) - server_cpu0,
                    sum(d[6] for d in done if d[0] == "done"), wall)
        bad = [d for d in done if d[0] != "done"]
        if bad:
            raise RuntimeError(f"client failed: {bad[0][1]}")
        n = sum(d[1] for d in done)
        elapsed = max(d[2] for d in done)
        lat = np.concatenate([d[3] for d in done])
        return n, elapsed, lat, sum(d[4] for d in done), max(d[5] for d in done)

    def close(self):
        for c in self.conns:
            try:
                c.send({"op": "quit"})
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()


# ---------------------------------------------------------------------------------------------


def emit(op, method, item, clients, n, elapsed, lat):
    per_s = n / elapsed if elapsed > 0 else 0.0
    row = {"system": "reverb", "op": op, "method": method, "item": item, "clients": clients,
           "items_per_s": round(per_s, 1), "mb_per_s": round(per_s * item_bytes(item) / 1e6, 2),
           "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 4),
           "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 4)}
    print(json.dumps(row), flush=True)


def cpu_note(cpu, items):
    server, clients, wall = cpu
    return (f"  cpu per item: server {server / items * 1e6:.1f} us, clients "
            f"{clients / items * 1e6:.1f} us; this case got {(server + clients) / wall:.2f} of "
            f"{os.cpu_count()} cores")


def rss_gb(pid):
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1e6


def csv_ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="measured time per case")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured time before each case")
    ap.add_argument("--items", default="cartpole,atari")
    ap.add_argument("--writers", default="1,8,64", help="concurrent writers per insert case")
    ap.add_argument("--samplers", default="1,8", help="concurrent samplers per sample case")
    ap.add_argument("--procs", type=int, default=4,
                    help="client processes the writer/sampler threads are spread over")
    ap.add_argument("--insert-method", choices=["writer", "sync", "trajectory"], default="writer")
    ap.add_argument("--sample-method", choices=["dataset", "sampler", "client"],
                    default="dataset")
    ap.add_argument("--insert-in-flight", type=int, default=100,
                    help="max items a writer has awaiting confirmation (Reverb's default: 25)")
    ap.add_argument("--insert-chunk", type=int, default=1,
                    help="steps per chunk for --insert-method writer: >1 is faster, but items "
                    "then share chunks, are sent only when a chunk fills, and a sample ships "
                    "its whole chunk (so sampling starts from a refilled table)")
    ap.add_argument("--in-flight", type=int, default=2 * BATCH,
                    help="samples each sampler stream keeps requested ahead")
    ap.add_argument("--prefill", type=int, default=0,
                    help="items in the table before sampling (0: the table's max_size)")
    ap.add_argument("--_serve", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.items = [x for x in args.items.split(",") if x]
    for it in args.items:
        if it not in ITEMS:
            ap.error(f"unknown item {it!r} (cartpole, atari)")
    args.writers, args.samplers = csv_ints(args.writers), csv_ints(args.samplers)
    return args


def insert_case(pool, args, item, writers):
    pool.ask(0, {"op": "reset", "item": item})
    n, el, lat, total, tail = pool.run(
        {"op": "insert", "item": item, "method": args.insert_method, "chunk": args.insert_chunk,
         "in_flight": args.insert_in_flight, "warmup": args.warmup, "seconds": args.seconds},
        writers)
    size = pool.table_size(item)
    ok = size == min(total, ITEMS[item][1])
    log(f"insert {item} x{writers}: {n} items in {el:.3f}s (final flush {tail * 1e3:.1f} ms); "
        f"{total} with warm-up, table holds {size}: {'ok' if ok else 'MISMATCH'}")
    log(cpu_note(pool.cpu, total))
    if not ok:
        raise RuntimeError(f"table holds {size} items, but clients inserted {total}")
    emit("insert", args.insert_method, item, writers, n, el, lat)


def prefill(pool, item, target, server_pid, idle_gb):
    have = pool.table_size(item)
    if have < target:
        need, nw = target - have, min(8, 2 * len(pool.conns))
        counts = [need // nw + (1 if i < need % nw else 0) for i in range(nw)]
        a = time.time()
        pool.run({"op": "fill", "item": item, "method": "writer", "in_flight": 100}, nw,
                 counts=counts)
        log(f"pre-filled {item} with {need} items in {time.time() - a:.1f}s")
    full_gb = rss_gb(server_pid)
    log(f"{item}: table holds {pool.table_size(item)} items before sampling; server resident "
        f"{full_gb:.2f} GB")
    payload_mb = item_bytes(item) * target / 1e6
    over_mb = (full_gb - idle_gb) * 1e3
    print(json.dumps({"system": "reverb", "op": "memory", "item": item, "clients": 0,
                      "items": target, "payload_mb": payload_mb, "rss_idle_mb": idle_gb * 1e3,
                      "rss_full_mb": full_gb * 1e3, "mb_over_idle": over_mb,
                      "per_payload": over_mb / payload_mb}), flush=True)


def sample_case(pool, args, item, samplers):
    n, el, lat, total, _ = pool.run(
        {"op": "sample", "item": item, "method": args.sample_method,
         "in_flight": args.in_flight, "warmup": args.warmup, "seconds": args.seconds}, samplers)
    log(f"sample {item} x{samplers}: {n} batches of {BATCH} in {el:.2f}s")
    log(cpu_note(pool.cpu, total * BATCH))
    emit("sample", args.sample_method, item, samplers, n * BATCH, el, lat)


def main():
    args = parse_args()
    if args._serve:
        serve(int(args._serve[0]), args._serve[1])
        return
    log(f"insert method {args.insert_method} (in flight {args.insert_in_flight}), sample method "
        f"{args.sample_method} (in flight {args.in_flight}), up to {args.procs} client "
        f"processes, {args.seconds}s per case after {args.warmup}s warm-up, "
        f"{os.cpu_count()} cores")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops the server
    nprocs = max(1, min(args.procs, max(args.writers + args.samplers + [1])))
    for item in args.items:
        server, address = start_server(item)
        pool = None
        try:
            pool = Pool(address, nprocs, server.pid)
            idle_gb = rss_gb(server.pid)
            log(f"{item}: server at {address} (pid {server.pid}), {nprocs} client processes, "
                f"{item_bytes(item)} bytes per item")
            for w in args.writers:
                insert_case(pool, args, item, w)
            if args.samplers:
                if args.insert_chunk > 1:
                    pool.ask(0, {"op": "reset", "item": item})
                prefill(pool, item, args.prefill or ITEMS[item][1], server.pid, idle_gb)
            for s in args.samplers:
                sample_case(pool, args, item, s)
        finally:
            if pool is not None:
                pool.close()
            server.stdin.close()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
