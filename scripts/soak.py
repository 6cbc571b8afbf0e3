#!/usr/bin/env python3
"""The chaos soak (scripts/soak.sh SECONDS): `inflight serve` on loopback with a KV cache small enough to
force preemption, driven for SECONDS by `inflight bench` and by well-formed requests of every kind (n > 1,
beam search, streams, chat), while a fault injector cuts streams mid-way, cancels requests, and sends
garbage bytes, headers one byte a second, pipelined keep-alive requests, oversize bodies and a burst of
more connections than --max-connections.

Afterwards it checks: /health answers 200; nothing is running or waiting; no KV block is held (free
prefix-cache blocks do not count as held); the resident memory is within 10 % of its level after the
warm-up; every well-formed request that was not cut got a 200 with the right token counts (bench's
requests included). Prints the figures; exit status 0 only when every check holds.

Python 3 standard library only. Bounded: every socket has a timeout, the server is killed at the end.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PROMPTS = [
    "Once upon a time",
    "Lily and Tom went to the park",
    "The cat sat on the mat and",
    "One day, a little girl named Sue found a big red ball in the garden. She",
    "Tom had a dog",
    "The sun was shining and the birds were singing. Ben wanted to go outside and play with his friends",
]
SOCKET_TIMEOUT = 60.0  # seconds; a request that hangs this long is an error


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def error(self, what):
        with self.lock:
            self.counts["errors"] = self.counts.get("errors", 0) + 1
            if len(self.errors) < 50:
                self.errors.append(what)


# ------------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 client over raw sockets: whole requests, and streams that can be cut anywhere.

def connect(port, timeout=SOCKET_TIMEOUT):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def format_request(method, target, body=b"", headers=""):
    req = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
    if body or method == "POST":
        req += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return req.encode() + b"\r\n" + body


class Reader:
    """Reads responses off one socket (keep-alive: several in a row)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _more(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the server")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, headers, body bytes); the body de-chunked."""
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    self._line()
                    break
                body += self._exact(size)
                self._line()
        elif "content-length" in headers:
            body = self._exact(int(headers["content-length"]))
        else:
            body = self.buf
            self.buf = b""
            try:
                while True:
                    self._more()
                    body += self.buf
                    self.buf = b""
            except ConnectionError:
                pass
        return status, headers, body


def request(port, method, target, body=None, headers=""):
    raw = json.dumps(body).encode() if body is not None else b""
    with connect(port) as s:
        s.sendall(format_request(method, target, raw, headers))
        return Reader(s).response()


def sse_events(body):
    out = []
    for frame in body.decode("utf-8", "replace").split("\n\n"):
        if frame.startswith("data: "):
            out.append(frame[6:])
    return out


def metrics(port):
    _, _, body = request(port, "GET", "/metrics")
    values = {}
    for line in body.decode().splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name] = float(value)
        except ValueError:
            pass
    return values


def sanitizer_of(pid):
    """The sanitizer runtime the server links ("asan", "tsan"), or None. Under one, resident memory is
    shadow memory and quarantine, so the RSS check says nothing and is skipped."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
    except OSError:
        return None
    for name in ("asan", "tsan", "msan"):
        if f"lib{name}" in maps or f"clang_rt.{name}" in maps:
            return name
    return None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------------------------------------
# Well-formed requests, each checked: 200 and the right token counts. A connection refused at the door
# (503 too_many_connections, during the burst) is retried, as a client honouring Retry-After would.

def well_formed_body(rng):
    kind = rng.choice(["completion", "completion", "completion", "chat", "chat", "stream", "chat_stream", "beam", "n"])
    max_tokens = rng.randint(4, 48)
    body = {"max_tokens": max_tokens, "ignore_eos": True, "temperature": rng.choice([0.0, 0.8])}
    if kind.startswith("chat"):
        body["messages"] = [{"role": "user", "content": rng.choice(PROMPTS)}]
    else:
        body["prompt"] = rng.choice(PROMPTS)
    n = 1
    if kind == "n":
        n = rng.randint(2, 4)
        body["n"] = n
    if kind == "beam":
        n = rng.randint(2, 3)
        body.update({"use_beam_search": True, "n": n, "temperature": 0.0})
    if kind in ("stream", "chat_stream") or (kind == "n" and rng.random() < 0.5):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    target = "/v1/chat/completions" if kind.startswith("chat") else "/v1/completions"
    return kind, target, body, n, max_tokens


def check_well_formed(stats, kind, body, n, max_tokens, status, payload):
    tag = f"{kind} {json.dumps(body)[:160]}"
    if status != 200:
        stats.error(f"{tag}: status {status}: {payload[:200]!r}")
        return
    if body.get("stream"):
        events = sse_events(payload)
        if not events or events[-1] != "[DONE]":
            stats.error(f"{tag}: the stream did not end with [DONE]")
            return
        chunks = [json.loads(e) for e in events[:-1]]
        if any("error" in c for c in chunks):
            stats.error(f"{tag}: an error chunk: {events[-2][:200]}")
            return
        usage = chunks[-1].get("usage") if chunks else None
        finishes = [c2.get("finish_reason") for c in chunks for c2 in c.get("choices", []) if c2.get("finish_reason")]
    else:
        j = json.loads(payload)
        usage = j.get("usage")
        finishes = [c.get("finish_reason") for c in j.get("choices", [])]
        if len(j.get("choices", [])) != n:
            stats.error(f"{tag}: {len(j.get('choices', []))} choices, expected {n}")
            return
    if not usage:
        stats.error(f"{tag}: no usage")
        return
    # ignore_eos: every choice runs to max_tokens.
    if usage["completion_tokens"] != n * max_tokens:
        stats.error(f"{tag}: completion_tokens {usage['completion_tokens']}, expected {n * max_tokens}")
        return
    if len(finishes) != n or any(f != "length" for f in finishes):
        stats.error(f"{tag}: finish reasons {finishes}, expected {n} x length")
        return
    stats.add("well_formed_ok")


def well_formed_worker(port, deadline, seed, stats):
    rng = random.Random(seed)
    while time.time() < deadline:
        kind, target, body, n, max_tokens = well_formed_body(rng)
        with stats.lock:
            streams, cut = stats.counts.get("streams", 0), stats.counts.get("streams_cut", 0)
        if body.get("stream") and cut < 0.4 * (streams + 1):
            # Keeps the cut share of all streams above 30 % whatever the relative speed of the workers.
            body.pop("stream")
            body.pop("stream_options")
        for _ in range(100):
            try:
                status, headers, payload = request(port, "POST", target, body)
            except (OSError, ConnectionError) as e:
                stats.error(f"{kind}: {type(e).__name__}: {e}")
                break
            if status == 503 and b"too_many_connections" in payload:
                stats.add("refused_at_door_retried")
                time.sleep(0.05)
                continue
            stats.add("well_formed")
            if body.get("stream"):
                stats.add("streams")
            check_well_formed(stats, kind, body, n, max_tokens, status, payload)
            break


# ------------------------------------------------------------------------------------------------
# Faults.

def cut_worker(port, deadline, seed, stats):
    """Streams cut at a random point (>= 30 % of all streams), and non-streamed requests cancelled."""
    rng = random.Random(seed)
    while time.time() < deadline:
        stream = rng.random() < 0.75
        body = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(32, 200), "ignore_eos": True,
                "temperature": 0.8, "n": rng.choice([1, 1, 2, 4]), "stream": stream}
        if rng.random() < 0.2:
            body = {"prompt": body["prompt"], "max_tokens": body["max_tokens"], "use_beam_search": True,
                    "n": 2, "ignore_eos": True, "stream": stream}
        try:
            with connect(port, timeout=10) as s:
                s.sendall(format_request("POST", "/v1/completions", json.dumps(body).encode()))
                if stream:
                    want = rng.randint(0, 2000)
                    got = 0
                    while got <= want:
                        data = s.recv(min(4096, want - got + 1))
                        if not data:
                            break
                        got += len(data)
                    stats.add("streams")
                    stats.add("streams_cut")
                else:
                    time.sleep(rng.random() * 0.3)
                    stats.add("cancelled")
                if rng.random() < 0.5:  # a reset instead of an orderly close
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            stats.add("cut_connect_failed")


def hostile_worker(port, deadline, seed, stats, max_body):
    rng = random.Random(seed)
    while time.time() < deadline:
        what = rng.choice(["garbage", "garbage_request", "oversize", "pipelined", "truncated"])
        try:
            if what == "garbage":
                with connect(port, timeout=10) as s:
                    s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000))) + b"\r\n\r\n")
                    try:
                        status, _, _ = Reader(s).response()
                        if status not in (400, 503):  # 503: refused at the door during a burst
                            stats.error(f"garbage bytes: status {status}")
                    except (ConnectionError, ValueError, IndexError, socket.timeout):
                        pass  # closed without an answer is fine too
            elif what == "garbage_request":
                junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2000)))
                with connect(port, timeout=10) as s:
                    s.sendall(format_request("POST", "/v1/completions", junk))
                    status, _, _ = Reader(s).response()
                if status not in (400, 503):
                    stats.error(f"garbage body: status {status}")
            elif what == "oversize":
                with connect(port, timeout=10) as s:
                    size = max_body + rng.randint(1, 1 << 20)
                    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {size}\r\n\r\n".encode() + b"{\"prompt\": \"" + b"a" * 8192)
                    status, _, _ = Reader(s).response()
                    if status not in (413, 503):
                        stats.error(f"oversize body: status {status}")
            elif what == "pipelined":
                mt = rng.randint(2, 8)
                body = json.dumps({"prompt": rng.choice(PROMPTS), "max_tokens": mt, "ignore_eos": True}).encode()
                with connect(port) as s:
                    s.sendall(format_request("GET", "/health") + format_request("POST", "/v1/completions", body) +
                              format_request("GET", "/v1/models"))
                    r = Reader(s)
                    statuses = []
                    for _ in range(3):
                        status, _, payload = r.response()
                        statuses.append(status)
                        if status == 200 and b"\"usage\"" in payload:
                            u = json.loads(payload)["usage"]
                            if u["completion_tokens"] != mt:
                                stats.error(f"pipelined: completion_tokens {u['completion_tokens']} != {mt}")
                    if statuses == [503, 503, 503] or (statuses and statuses[0] == 503):
                        stats.add("refused_at_door")
                    elif statuses != [200, 200, 200]:
                        stats.error(f"pipelined keep-alive: statuses {statuses}")
                    else:
                        stats.add("pipelined_ok")
            elif what == "truncated":
                with connect(port, timeout=10) as s:
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"prompt\"")
                    s.shutdown(socket.SHUT_WR)
                    try:
                        Reader(s).response()
                    except ConnectionError:
                        pass
            stats.add("hostile_" + what)
        except (OSError, ConnectionError, ValueError, IndexError) as e:
            if "refused" in str(e).lower():
                stats.error(f"hostile {what}: {e}")
            else:
                stats.add("hostile_closed_early")
        time.sleep(rng.random() * 0.05)


def slowloris_worker(port, deadline, stats, timeout_s):
    """Headers one byte a second; the server must cut them off after request_timeout_seconds."""
    while time.time() < deadline:
        try:
            with connect(port, timeout=timeout_s + 10) as s:
                header = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 1000
                start = time.time()
                cut = False
                for byte in header:
                    try:
                        s.send(bytes([byte]))
                    except OSError:
                        cut = True
                        break
                    time.sleep(1.0)
                    if time.time() - start > timeout_s + 5:
                        break
                    s.setblocking(False)
                    try:
                        if s.recv(1) == b"":
                            cut = True
                            break
                    except BlockingIOError:
                        pass
                    except ConnectionResetError:  # the server closed with our bytes unread: a reset, still a cut
                        cut = True
                        break
                    finally:
                        s.setblocking(True)
                elapsed = time.time() - start
                if not cut:
                    stats.error(f"slowloris: not cut off after {elapsed:.0f} s")
                elif elapsed > timeout_s + 3:
                    stats.error(f"slowloris: cut off after {elapsed:.0f} s, the limit is {timeout_s}")
                else:
                    stats.add("slowloris_cut")
        except OSError as e:
            stats.error(f"slowloris: {e}")
        if time.time() + timeout_s + 2 > deadline:
            break


def burst(port, count, stats):
    """More connections at once than --max-connections: the excess answered 503 and closed."""
    socks = []
    for _ in range(count):
        try:
            socks.append(connect(port, timeout=15))
        except OSError:
            stats.add("burst_connect_failed")
    # Every connection open before any request: answered ones then stay open (keep-alive) while the server
    # is still accepting the rest, however slowly it accepts.
    for s in socks:
        try:
            s.sendall(format_request("GET", "/health"))
        except OSError:
            pass
    # Answers are read newest connection first. The server accepts in arrival order, so the newest answer
    # comes only after every older connection was accepted; none is closed by this client before then, and
    # the count of open connections the server saw cannot fall below the burst while it accepts.
    statuses = {}
    for s in reversed(socks):
        try:
            status, _, body = Reader(s).response()
            statuses[status] = statuses.get(status, 0) + 1
            if status == 503 and b"too_many_connections" not in body:
                stats.error(f"burst: a 503 without too_many_connections: {body[:100]!r}")
        except (OSError, ConnectionError):
            statuses["closed"] = statuses.get("closed", 0) + 1
        s.close()
    stats.add("burst_refused_503", statuses.get(503, 0))
    stats.add("burst_served_200", statuses.get(200, 0))
    if statuses.get(503, 0) == 0:
        stats.error(f"burst of {count}: no connection refused ({statuses})")


# ------------------------------------------------------------------------------------------------

def run_bench(inflight, port, seconds, seed, out_json, stats):
    rate = 6
    num = max(10, int(rate * seconds))
    cmd = [inflight, "bench", "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", str(num),
           "--request-rate", str(rate), "--max-concurrency", "6", "--input-len", "24", "--output-len", "24",
           "--seed", str(seed), "--result-file", out_json, "--no-progress", "--request-timeout", "60"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=seconds + 300)
    try:
        with open(out_json) as f:
            r = json.load(f)
    except (OSError, ValueError):
        stats.error(f"bench: no result file (exit {p.returncode}): {p.stdout[-500:]!r}")
        return
    errors = [e for e in r.get("errors", []) if e]
    ok = sum(1 for e in r.get("errors", []) if not e)
    refused = sum(1 for e in errors if "too_many_connections" in e or "503" in e and "connections" in e)
    stats.add("bench_requests", len(r.get("errors", [])))
    stats.add("bench_ok", ok)
    stats.add("bench_refused_at_door", refused)
    for e in errors:
        if not ("too_many_connections" in e or ("503" in e and "connections" in e)):
            stats.error(f"bench: {e[:200]}")
    for i, (out, e) in enumerate(zip(r.get("output_lens", []), r.get("errors", []))):
        if not e and out != 24:
            stats.error(f"bench request {i}: {out} output tokens, expected 24")


def run_phase(args, port, seconds, bench_json, stats, request_timeout, max_body, seed):
    """Every driver and fault at once for `seconds`, with two bursts over --max-connections."""
    start = time.time()
    deadline = start + seconds
    workers = []
    if bench_json:
        workers.append(threading.Thread(target=run_bench, args=(args.inflight, port, seconds * 0.9, seed, bench_json, stats)))
    workers += [threading.Thread(target=well_formed_worker, args=(port, deadline, seed + 10 + i, stats)) for i in range(3)]
    workers += [threading.Thread(target=cut_worker, args=(port, deadline, seed + 20 + i, stats)) for i in range(8)]
    workers += [threading.Thread(target=hostile_worker, args=(port, deadline, seed + 30, stats, max_body))]
    workers += [threading.Thread(target=slowloris_worker, args=(port, deadline, stats, request_timeout)) for _ in range(2)]
    for t in workers:
        t.start()
    for frac in (1 / 3, 2 / 3):
        time.sleep(max(0.0, start + seconds * frac - time.time()))
        burst(port, args.max_connections + 24, stats)
    for t in workers:
        t.join(timeout=seconds + 400)
        if t.is_alive():
            stats.error("a driver thread did not finish (a hang)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("seconds", type=float)
    ap.add_argument("--inflight", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report", help="write the figures as JSON here")
    ap.add_argument("--max-connections", type=int, default=48)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="inflight-soak-")
    request_timeout = 5
    max_body = 65536
    config = {"request_timeout_seconds": request_timeout, "max_body_bytes": max_body, "log_level": "warn",
              "max_connections": args.max_connections, "max_num_seqs": 16, "kv_cache_memory": "700K",
              "http_threads": 2}
    with open(os.path.join(work, "server.json"), "w") as f:
        json.dump(config, f)
    log_path = os.path.join(work, "server.log")
    log = open(log_path, "w")
    server = subprocess.Popen([args.inflight, "serve", "--config", os.path.join(work, "server.json"), "--model",
                               args.model, "--host", "127.0.0.1", "--port", "0", "--log-level", "info"],
                              stdout=log, stderr=subprocess.STDOUT)
    stats = Stats()
    figures = {}
    ok = True
    try:
        port = None
        t_end = time.time() + 60
        while time.time() < t_end and port is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
            if m:
                port = int(m.group(1))
            elif server.poll() is not None:
                raise RuntimeError("inflight serve exited at start-up:\n" + open(log_path).read())
            time.sleep(0.05)
        while time.time() < t_end:
            try:
                if request(port, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("the server did not become ready")

        # Warm-up: the same mix (bench aside) for a while, so that allocators, buffers and caches reach
        # their working size; the resident memory after it is the baseline.
        warm = max(10.0, args.seconds * 0.15)
        run_phase(args, port, warm, None, stats, request_timeout, max_body, seed=args.seed)
        time.sleep(1.0)
        rss_warm = rss_kib(server.pid)
        drive = args.seconds - warm
        run_phase(args, port, drive, os.path.join(work, "bench.json"), stats, request_timeout, max_body,
                  seed=args.seed + 1000)

        # Afterwards. The gauges are a snapshot after each engine step: give cancelled work a moment.
        settle = time.time() + 20
        while True:
            m = metrics(port)
            idle = (m.get("inflight_num_requests_running") == 0 and m.get("inflight_num_requests_waiting") == 0 and
                    m.get("inflight_kv_cache_blocks_used") == 0)
            if idle or time.time() > settle:
                break
            time.sleep(0.2)
        health = request(port, "GET", "/health")[0]
        rss_end = rss_kib(server.pid)
        sanitizer = sanitizer_of(server.pid)
        c = stats.counts
        streams = c.get("streams", 0)
        figures = {
            "seconds": args.seconds,
            "requests_well_formed_checked": c.get("well_formed", 0),
            "requests_well_formed_ok": c.get("well_formed_ok", 0),
            "bench_requests": c.get("bench_requests", 0),
            "bench_ok": c.get("bench_ok", 0),
            "streams": streams,
            "streams_cut": c.get("streams_cut", 0),
            "cut_share": round(c.get("streams_cut", 0) / streams, 3) if streams else 0,
            "cancelled_non_stream": c.get("cancelled", 0),
            "hostile": {k[8:]: v for k, v in c.items() if k.startswith("hostile_")},
            "slowloris_cut": c.get("slowloris_cut", 0),
            "burst_refused_503": c.get("burst_refused_503", 0),
            "refused_at_door_retried": c.get("refused_at_door_retried", 0) + c.get("bench_refused_at_door", 0),
            "preemptions": m.get("inflight_preemptions_total"),
            "finished_by_reason": {k.split('"')[1]: v for k, v in m.items() if k.startswith("inflight_requests_total{")},
            "engine_steps": m.get("inflight_engine_steps_total"),
            "errors": c.get("errors", 0),
            "rss_after_warmup_kib": rss_warm,
            "rss_end_kib": rss_end,
            "rss_growth": round(rss_end / rss_warm - 1, 4) if rss_warm else None,
            "health": health,
            "running": m.get("inflight_num_requests_running"),
            "waiting": m.get("inflight_num_requests_waiting"),
            "kv_blocks_used": m.get("inflight_kv_cache_blocks_used"),
        }
        checks = [
            ("/health answers 200", health == 200),
            ("nothing running or waiting", figures["running"] == 0 and figures["waiting"] == 0),
            ("no KV block held (free prefix-cache blocks aside)", figures["kv_blocks_used"] == 0),
            ("RSS within 10 % of after warm-up" + (f" (skipped: {sanitizer} build)" if sanitizer else ""),
             sanitizer is not None or (rss_warm > 0 and abs(rss_end - rss_warm) <= 0.10 * rss_warm)),
            ("every well-formed uncut request: 200, right token counts", c.get("errors", 0) == 0),
            (">= 30 % of streams cut", streams > 0 and c.get("streams_cut", 0) >= 0.3 * streams),
            ("preemption happened", (figures["preemptions"] or 0) > 0),
            ("the burst over --max-connections was refused", c.get("burst_refused_503", 0) > 0),
            ("the server process is alive", server.poll() is None),
        ]
        print(json.dumps(figures, indent=2))
        for name, held in checks:
            print(f"{'ok  ' if held else 'FAIL'} {name}")
            ok &= held
        for e in stats.errors:
            print("error:", e)
        figures["checks"] = {name: held for name, held in checks}
    except Exception as e:  # noqa: BLE001 -- report and fail, never hang
        print(f"soak: {type(e).__name__}: {e}", file=sys.stderr)
        ok = False
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(timeout=30)
                if rc != 0:
                    print(f"FAIL inflight serve exited {rc} on SIGTERM", file=sys.stderr)
                    ok = False
            except subprocess.TimeoutExpired:
                server.kill()
                print("FAIL inflight serve did not exit within 30 s of SIGTERM", file=sys.stderr)
                ok = False
        else:
            print(f"FAIL inflight serve died (exit {server.returncode}); its log:", file=sys.stderr)
            print(open(log_path).read()[-4000:], file=sys.stderr)
            ok = False
        log.close()
        if args.report:
            with open(args.report, "w") as f:
                json.dump(figures, f, indent=2)
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"soak: the server log and files are kept in {work}", file=sys.stderr)
    print("soak: PASS" if ok else "soak: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
