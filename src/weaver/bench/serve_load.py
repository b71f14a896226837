"""`weaver bench serve`: a bounded load test of `weaver serve` on loopback.

C concurrent clients each send R requests one after another: a mix of chat and completions, greedy and sampled,
streamed and not. Every response is checked whole (status, JSON shape, one finish_reason, `data: [DONE]`, usage
arithmetic, the `weaver` statistics), and every greedy answer to one prompt must be the same text whether
streamed or not. Reports p50/p90/p99 of time to first token (streams), inter-token latency (streams: the gap
between content chunks, and per token), end-to-end latency, and throughput; JSON + markdown.

    weaver bench serve --clients 32 --requests 4 -- --model smollm2        # spawns the server (args after --)
    weaver bench serve --url http://127.0.0.1:8000 --clients 8 --requests 2
Only loopback addresses are accepted; the run is bounded by --time-limit and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from weaver.argtypes import positive_int

PROMPTS = [
    "Explain how a hash map works.",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "What is the capital of France?",
    "Describe a cat in one sentence.",
    "Why do leaves change colour in autumn?",
    "Give me a tip for learning to code.",
    "What is 12 times 12?",
]


@dataclass
class Result:
    """One request's outcome and timings (seconds from its send)."""

    client: int
    index: int
    endpoint: str
    stream: bool
    greedy: bool
    prompt: int
    ok: bool = False
    error: str = ""
    status: int = 0
    text: str = ""
    completion_tokens: int = 0
    e2e: float = 0.0
    ttft: float | None = None
    chunk_gaps: list[float] = field(default_factory=list)
    tau: float | None = None
    retries: int = 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None, help="a running server on loopback (default: spawn one with the args "
                   "after `--`)")  # fmt: skip
    p.add_argument("--clients", type=positive_int, default=32, help="concurrent clients (default 32)")
    p.add_argument("--requests", type=positive_int, default=4,
                   help="requests per client, sent one after another (default 4)")
    p.add_argument("--max-tokens", type=positive_int, default=32, help="max_tokens of every request (default 32)")
    p.add_argument("--time-limit", type=float, default=900.0, help="the whole run stops after this (default 900 s)")
    p.add_argument("--startup-timeout", type=float, default=600.0, help="seconds to wait for a spawned server's "
                   "/health (default 600)")  # fmt: skip
    p.add_argument("--out", default=None, help="directory for serve_bench.json and serve_bench.md")
    p.add_argument("server_args", nargs=argparse.REMAINDER, help="after `--`: `weaver serve` flags for the spawned "
                   "server (--host/--port are set here)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.clients < 1 or args.requests < 1 or args.max_tokens < 1:
        from weaver.errors import GenerationConfigError

        raise GenerationConfigError("--clients, --requests and --max-tokens must be >= 1")
    server = None
    url = args.url
    if url is None:
        server_args = [a for a in args.server_args if a != "--"]
        server, url = spawn_server(server_args, max_queue=args.clients, log_path=_log_path(args.out))
    else:
        host = urlparse(url).hostname or ""
        if not (host in ("localhost", "::1") or host.startswith("127.")):
            from weaver.errors import GenerationConfigError

            raise GenerationConfigError(f"--url must be a loopback address (127.0.0.1, localhost, ::1), got {host!r}")
    try:
        if server is not None:
            wait_ready(url, args.startup_timeout, server)
        report = asyncio.run(load(url, args.clients, args.requests, args.max_tokens, args.time_limit))
    finally:
        exit_code = stop_server(server) if server is not None else None
    report["server_exit_code"] = exit_code
    report["server_args"] = None if server is None else server.args[3:]
    report["machine"] = {"platform": platform.platform(), "python": platform.python_version(),
                         "cpus": os.cpu_count()}  # fmt: skip
    print(markdown(report))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "serve_bench.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "serve_bench.md").write_text(markdown(report) + "\n")
    bad = report["lost"] + report["malformed"] + (exit_code not in (None, 0))
    return 1 if bad else 0


# -- the server -------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_path(out: str | None) -> Path | None:
    if out is None:
        return None
    Path(out).mkdir(parents=True, exist_ok=True)
    return Path(out) / "server.log"


def spawn_server(server_args: list[str], max_queue: int, log_path: Path | None) -> tuple[subprocess.Popen, str]:
    """`weaver serve` on a free loopback port, with a queue that holds every client."""
    port = free_port()
    cmd = [sys.executable, "-m", "weaver.cli", "serve", *server_args, "--host", "127.0.0.1", "--port", str(port)]
    if "--max-queue" not in server_args:
        cmd += ["--max-queue", str(max_queue)]
    log = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} before it was ready")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{url}/health was not 200 within {timeout:g} s")


def stop_server(proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """SIGTERM and the exit code (0 after a graceful shutdown)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


# -- the load -----------------------------------------------------------------------------------------------
async def load(url: str, clients: int, per_client: int, max_tokens: int, time_limit: float) -> dict:
    import httpx

    model = httpx.get(f"{url}/v1/models", timeout=10.0).json()["data"][0]["id"]
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    results: list[Result] = []
    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(time_limit), limits=limits) as http:

        async def client(c: int) -> None:
            for i in range(per_client):
                k = c * per_client + i
                r = Result(client=c, index=i, endpoint="chat" if k % 3 else "completions", stream=(k // 2) % 2 == 0,
                           greedy=k % 2 == 0, prompt=k % len(PROMPTS))  # fmt: skip
                results.append(r)
                await one_request(http, model, r, max_tokens)

        try:
            await asyncio.wait_for(asyncio.gather(*(client(c) for c in range(clients))), time_limit)
        except TimeoutError:
            pass
    wall = time.perf_counter() - t0
    return summarize(results, clients * per_client, wall, max_tokens)


def _body(model: str, r: Result, max_tokens: int) -> dict:
    body: dict = {"model": model, "max_tokens": max_tokens, "stream": r.stream}
    body.update({"temperature": 0.0} if r.greedy else {"temperature": 0.8, "top_p": 0.95, "seed": 1000 + r.client})
    if r.stream:
        body["stream_options"] = {"include_usage": True}
    if r.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": PROMPTS[r.prompt]}]
    else:
        body["prompt"] = PROMPTS[r.prompt]
    return body


async def one_request(http, model: str, r: Result, max_tokens: int, retries: int = 20) -> None:
    """Send, read and check one request (a 429 is retried after its Retry-After)."""
    path = "/v1/chat/completions" if r.endpoint == "chat" else "/v1/completions"
    body = _body(model, r, max_tokens)
    t0 = time.perf_counter()
    try:
        for _ in range(retries + 1):
            if r.stream:
                async with http.stream("POST", path, json=body) as resp:
                    r.status = resp.status_code
                    if resp.status_code == 200:  # each line with its arrival time
                        lines = [(time.perf_counter() - t0, line) async for line in resp.aiter_lines()]
                        check_stream(r, lines, max_tokens)
                    else:
                        await resp.aread()
            else:
                resp = await http.post(path, json=body)
                r.status = resp.status_code
                if resp.status_code == 200:
                    check_whole(r, resp.json(), max_tokens)
            if r.status != 429:
                break
            r.retries += 1
            await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
        if r.status != 200 and not r.error:
            r.error = f"HTTP {r.status}"
    except Exception as exc:  # a dropped connection, a broken body: the request is lost
        r.error = f"{type(exc).__name__}: {exc}"
    r.e2e = time.perf_counter() - t0
    r.ok = r.status == 200 and not r.error


def _check_usage(r: Result, use: dict, max_tokens: int) -> None:
    p, c, t = use.get("prompt_tokens"), use.get("completion_tokens"), use.get("total_tokens")
    if not all(isinstance(v, int) for v in (p, c, t)) or p < 1 or not 1 <= c <= max_tokens or t != p + c:
        r.error = f"bad usage {use}"
    r.completion_tokens = c if isinstance(c, int) else 0


def check_whole(r: Result, body: dict, max_tokens: int) -> None:
    choices = body.get("choices") or []
    if len(choices) != 1:
        r.error = f"{len(choices)} choices"
        return
    choice = choices[0]
    text = choice.get("message", {}).get("content") if r.endpoint == "chat" else choice.get("text")
    if not isinstance(text, str) or choice.get("finish_reason") not in ("stop", "length"):
        r.error = f"bad choice {choice}"
        return
    r.text = text
    _check_usage(r, body.get("usage") or {}, max_tokens)
    stats = body.get("weaver") or {}
    r.tau = stats.get("tau")
    # tau >= 1 once a round ran; a reply whose first token (the prefill's) ended it has no round and tau 0
    if not isinstance(r.tau, (int, float)) or not (r.tau >= 1 or stats.get("rounds") == 0):
        r.error = r.error or f"bad weaver stats {stats}"


def check_stream(r: Result, lines: list[tuple[float, str]], max_tokens: int) -> None:
    """The SSE lines of one stream: JSON chunks of one id, text deltas, one finish_reason, usage, [DONE] last;
    TTFT and the gaps come from the arrival times of the chunks that carry text."""
    events = [(t, line[len("data: "):]) for t, line in lines if line.startswith("data: ")]
    if not events or events[-1][1] != "[DONE]":
        r.error = "no data: [DONE] at the end"
        return
    ids, text, times, finishes, use = set(), [], [], [], None
    for t, payload in events[:-1]:
        chunk = json.loads(payload)
        if "error" in chunk:
            r.error = f"error event {chunk['error']}"
            return
        ids.add(chunk.get("id"))
        if chunk.get("usage"):
            use = chunk["usage"]
        for choice in chunk.get("choices", []):
            piece = choice.get("delta", {}).get("content") if r.endpoint == "chat" else choice.get("text")
            if piece:
                text.append(piece)
                times.append(t)
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
                r.tau = (chunk.get("weaver") or {}).get("tau")
    if len(ids) != 1 or finishes not in (["stop"], ["length"]) or use is None:
        r.error = f"malformed stream: ids {len(ids)}, finishes {finishes}, usage {use}"
        return
    r.text = "".join(text)
    r.ttft = times[0] if times else None
    r.chunk_gaps = [b - a for a, b in zip(times, times[1:])]
    _check_usage(r, use, max_tokens)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def summarize(results: list[Result], expected: int, wall: float, max_tokens: int) -> dict:
    done = [r for r in results if r.ok]
    greedy_texts: dict[tuple[str, int], set[str]] = {}
    for r in done:
        if r.greedy:
            greedy_texts.setdefault((r.endpoint, r.prompt), set()).add(r.text)
    inconsistent = sorted(f"{e}:{p}" for (e, p), texts in greedy_texts.items() if len(texts) > 1)
    malformed = [r for r in results if r.status == 200 and r.error]
    lost = expected - len(done) - len(malformed)
    streams = [r for r in done if r.stream]
    ttft = [r.ttft for r in streams if r.ttft is not None]
    gaps = [g for r in streams for g in r.chunk_gaps]
    per_token = [(r.e2e - r.ttft) / (r.completion_tokens - 1) for r in streams
                 if r.ttft is not None and r.completion_tokens > 1]  # fmt: skip
    e2e = [r.e2e for r in done]
    tokens = sum(r.completion_tokens for r in done)

    def stats(values: list[float]) -> dict:
        return {f"p{q}": _pct(values, q) for q in (50, 90, 99)} | {"n": len(values),
                                                                   "mean": statistics.fmean(values) if values else None}

    return {
        "expected": expected, "completed": len(done), "lost": lost, "malformed": len(malformed),
        "greedy_inconsistent": inconsistent, "retries_429": sum(r.retries for r in results),
        "errors": sorted({r.error for r in results if r.error})[:20],
        "max_tokens": max_tokens, "wall_s": wall, "completion_tokens": tokens,
        "throughput_tok_s": tokens / wall if wall > 0 else 0.0, "requests_per_s": len(done) / wall if wall else 0.0,
        "ttft_s": stats(ttft), "itl_chunk_s": stats(gaps), "itl_token_s": stats(per_token), "e2e_s": stats(e2e),
        "tau_mean": statistics.fmean(taus) if (taus := [r.tau for r in done if r.tau]) else None,
        "requests": [asdict(r) | {"text": r.text[:80]} for r in results],
    }  # fmt: skip


def markdown(report: dict) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:.1f}"

    rows = ["| metric | p50 (ms) | p90 (ms) | p99 (ms) | n |", "|---|---:|---:|---:|---:|"]
    for key, name in (("ttft_s", "time to first token (streams)"), ("itl_chunk_s", "inter-chunk latency (streams)"),
                      ("itl_token_s", "inter-token latency (streams, per token)"), ("e2e_s", "end-to-end latency")):
        s = report[key]
        rows.append(f"| {name} | {ms(s['p50'])} | {ms(s['p90'])} | {ms(s['p99'])} | {s['n']} |")
    head = (f"**{report['completed']}/{report['expected']} complete**, {report['lost']} lost, "
            f"{report['malformed']} malformed, greedy inconsistent: {report['greedy_inconsistent'] or 'none'}, "
            f"429 retries {report['retries_429']}; {report['completion_tokens']} tokens in {report['wall_s']:.1f} s = "
            f"**{report['throughput_tok_s']:.1f} tok/s**, {report['requests_per_s']:.2f} req/s; mean tau "
            f"{report['tau_mean'] if report['tau_mean'] is None else round(report['tau_mean'], 3)}; "
            f"server exit code {report.get('server_exit_code')}")  # fmt: skip
    return head + "\n\n" + "\n".join(rows)
