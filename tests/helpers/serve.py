"""A real `weaver serve` subprocess on a free loopback port, for the server tests.

The model is tiny-llama with random weights and a 320-token vocabulary (the byte tokenizer needs >= 256) and no
EOS, so every generation runs to max_tokens or a stop string: lengths, and so timings, are predictable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from weaver.bench.serve_load import free_port, wait_ready
from weaver.models.presets import preset_config

ROOT = Path(__file__).resolve().parents[2]


def tiny_config(directory: Path) -> Path:
    """tiny-llama with a byte vocabulary and no EOS, as config.json (the server's --model)."""
    path = directory / "config.json"
    path.write_text(json.dumps(preset_config("tiny-llama", vocab_size=320, eos_token_id=[])))
    return path


class Server:
    """`weaver serve <args>` started on 127.0.0.1:<free port>; `stop()` sends SIGTERM and returns the exit code."""

    def __init__(self, args: list[str], log: Path, startup_timeout: float = 90.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
        cmd = [sys.executable, "-m", "weaver.cli", "serve", *args, "--host", "127.0.0.1", "--port", str(self.port)]
        if "--device" not in args:  # the tests compare with in-process CPU runs, also on a GPU machine
            cmd += ["--device", "cpu"]
        self.log = log
        self._log_file = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT, env=env)
        self._wait_ready(startup_timeout)

    def _wait_ready(self, timeout: float) -> None:
        try:
            wait_ready(self.url, timeout, self.proc)
        except (RuntimeError, TimeoutError) as exc:
            if self.proc.poll() is None:
                self.stop()
            raise type(exc)(f"{exc}:\n{self.log.read_text()}") from None

    def metric(self, name: str, labels: str = "") -> float:
        """One sample of /metrics (0 when absent), e.g. metric("weaver_errors_total", 'type="queue_full"')."""
        key = f"{name}{{{labels}}}" if labels else name
        for line in httpx.get(f"{self.url}/metrics", timeout=5.0).text.splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        return 0.0

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log_file.close()
        return code
