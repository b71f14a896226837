"""The training loop: schedules, the acceptance proxy, resume == uninterrupted, and DDP on two CPU processes
(gloo) == one process on the same global batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from weaver.train.loop import TrainConfig, acceptance_tau, lr_at, train


class ToyTask:
    """Regression of a fixed random map; batches are a pure function of (step, micro, rank, world)."""

    name = "toy"

    def __init__(self, batch_size: int = 4, seed: int = 0, crash_at: int | None = None) -> None:
        torch.manual_seed(seed)
        self.crash_at = crash_at
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
        self.teacher = torch.randn(6, 3)
        self.batch_size = batch_size

    def model(self) -> nn.Module:
        return self.net

    def batch(self, step: int, micro: int, rank: int, world: int) -> torch.Tensor:
        if step == self.crash_at:
            raise KeyboardInterrupt  # the run is killed here
        g = torch.Generator().manual_seed(1000 * step + 10 * micro)
        full = torch.randn(self.batch_size * world, 6, generator=g)  # the global batch; each rank its slice
        return full[rank * self.batch_size : (rank + 1) * self.batch_size]

    def loss(self, model: nn.Module, x: torch.Tensor):
        err = model(x) - x @ self.teacher
        hits = (err.abs() < 0.5).float().mean(0)  # a stand-in for per-depth agreement
        return err.square().mean(), {"top1": hits, "count": torch.full((3,), float(x.shape[0]))}

    def save(self, model: nn.Module, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        torch.save(getattr(model, "module", model).state_dict(), path / "weights.pt")

    def config(self) -> dict:
        return {"batch_size": self.batch_size}


def _cfg(tmp: Path, **kw) -> TrainConfig:
    base = dict(out_dir=str(tmp), steps=12, lr=1e-2, warmup_steps=3, log_every=2, bf16=False)
    return TrainConfig(**{**base, **kw})


def test_schedules() -> None:
    cfg = TrainConfig(out_dir="x", steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    lrs = [lr_at(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] == pytest.approx(0.1, abs=1e-3)
    wsd = TrainConfig(out_dir="x", steps=100, lr=1.0, warmup_steps=10, schedule="wsd", decay_fraction=0.2)
    w = [lr_at(s, wsd) for s in range(101)]
    assert w[50] == 1.0 and w[81] == 1.0 and w[100] == pytest.approx(0.1) and w[90] < 1.0
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(out_dir="x", steps=1, schedule="linear")


def test_acceptance_tau() -> None:
    assert acceptance_tau([]) == 1.0
    assert acceptance_tau([1.0, 1.0, 1.0]) == 4.0
    assert acceptance_tau([0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25)


def test_resume_equals_uninterrupted_and_writes_the_run(tmp_path) -> None:
    whole = ToyTask()
    train(whole, _cfg(tmp_path / "a"))
    with pytest.raises(KeyboardInterrupt):  # killed at step 8, after the checkpoint of step 6
        train(ToyTask(crash_at=8), _cfg(tmp_path / "b", save_every=6))
    resumed = ToyTask()  # a fresh process: weights reloaded from the checkpoint
    train(resumed, _cfg(tmp_path / "b", save_every=6))
    for a, b in zip(whole.net.state_dict().values(), resumed.net.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    # resuming restores the optimizer's moments too: with fresh moments the weights differ
    state = torch.load(next((tmp_path / "b" / "checkpoints").glob("step_0000006")) / "state.pt", weights_only=False)
    assert state["step"] == 6 and state["optimizer"]["state"]
    run = tmp_path / "a"
    rows = [json.loads(x) for x in (run / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6, 8, 10, 12] and len(rows[0]["top1"]) == 3 and "tau" in rows[0]
    assert (run / "plot.png").stat().st_size > 1000 and (run / "final" / "weights.pt").exists()
    assert json.loads((run / "final" / "train_config.json").read_text())["task"] == {"batch_size": 4}
    assert len(list((run / "checkpoints").glob("step_*"))) == 1


DDP_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from train.test_loop import ToyTask, _cfg
from pathlib import Path
from weaver.train.loop import train
torch.set_num_threads(1)
task = ToyTask()
train(task, _cfg(Path({out!r}), steps=5))
rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else int(__import__("os").environ["RANK"])
torch.save(task.net.state_dict(), Path({out!r}) / f"rank{{rank}}.pt")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_processes_equal_one_process_on_the_global_batch(tmp_path) -> None:
    tests = str(Path(__file__).resolve().parent.parent)
    script = DDP_SCRIPT.format(tests=tests, out=str(tmp_path / "ddp"))
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "PYTHONPATH": os.pathsep.join([str(Path(tests).parent / "src"), os.environ.get("PYTHONPATH", "")])}
        procs.append(subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=180)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    r0 = torch.load(tmp_path / "ddp" / "rank0.pt")
    r1 = torch.load(tmp_path / "ddp" / "rank1.pt")
    single = ToyTask(batch_size=8)  # one process, the whole global batch (2 x 4) at once
    train(single, _cfg(tmp_path / "one", steps=5))
    for k, v in r0.items():
        assert torch.equal(v, r1[k])
        torch.testing.assert_close(v, single.net.state_dict()[k], rtol=1e-5, atol=1e-6)
