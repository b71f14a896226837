"""One training loop for both trainers (drafter, adapter): one device or torchrun + DDP, bf16 autocast,
cosine / WSD schedules, atomic checkpoints with exact resume, a progress bar with the acceptance proxy, a history
file and a plot per run.

A task (`TrainTask`) owns the models and the data: `batch(step, micro, rank, world)` must be a pure function of
its arguments (resume and DDP equivalence rest on it), `loss(model, batch)` returns the mean loss of the local
batch and metrics (`top1`: per-depth top-1 agreement, `count`: predictions per depth). The acceptance proxy is
the expected chain acceptance length `tau = 1 + sum_k prod_{j<=k} a_j` for per-depth agreements a_j: the bonus
token plus the accepted run when depth j is right with probability a_j given the earlier ones (DESIGN §5).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from weaver.argtypes import positive_int
from weaver.options import DistEnv, distributed_env

TRAIN_CONFIG = "train_config.json"  # beside the weights (whose own config.json the loaders read)

__all__ = ["DistEnv", "TrainConfig", "TrainResult", "TrainTask", "acceptance_tau", "add_train_arguments",
           "distributed_env", "lr_at", "train", "train_config"]


@dataclass
class TrainConfig:
    """How long and how to optimise; a task's own knobs live in the task."""

    out_dir: str
    steps: int
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    schedule: str = "cosine"  # "cosine" | "wsd" (warmup, stable, then linear decay over decay_fraction)
    decay_fraction: float = 0.2
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    grad_accum: int = 1
    save_every: int = 0  # 0: only at the end
    log_every: int = 10
    seed: int = 0
    bf16: bool = True  # autocast on CUDA (ignored on the CPU)
    resume: bool = True
    keep_checkpoints: int = 2
    max_seconds: float | None = None  # stop early (and save) after this long: a bounded GPU lease

    def __post_init__(self) -> None:
        if self.steps < 1 or self.grad_accum < 1 or self.log_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("steps, grad_accum, log_every and keep_checkpoints must be >= 1")
        if self.lr <= 0 or not 0 <= self.min_lr_ratio <= 1 or self.warmup_steps < 0 or self.save_every < 0:
            raise ValueError("lr must be > 0, min_lr_ratio in [0, 1], warmup_steps and save_every >= 0")
        if self.schedule not in ("cosine", "wsd"):
            raise ValueError(f"schedule must be 'cosine' or 'wsd', got {self.schedule!r}")
        if not 0 < self.decay_fraction <= 1:
            raise ValueError(f"decay_fraction must lie in (0, 1], got {self.decay_fraction}")
        self.betas = tuple(self.betas)


@dataclass
class TrainResult:
    step: int
    loss: float
    history: list[dict] = field(default_factory=list)
    out_dir: str = ""


class TrainTask(Protocol):
    name: str

    def model(self) -> nn.Module: ...
    def batch(self, step: int, micro: int, rank: int, world: int) -> Any: ...
    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...
    def save(self, model: nn.Module, path: Path) -> None: ...
    def config(self) -> dict: ...


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warmup, then cosine or WSD down to min_lr."""
    lo = cfg.lr * cfg.min_lr_ratio
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    if cfg.schedule == "cosine":
        return lo + (cfg.lr - lo) * 0.5 * (1 + math.cos(math.pi * progress))
    decay_start = 1 - cfg.decay_fraction
    if progress < decay_start:
        return cfg.lr
    return cfg.lr - (cfg.lr - lo) * (progress - decay_start) / cfg.decay_fraction


def acceptance_tau(top1: list[float]) -> float:
    """Expected tokens per chain round, 1 + sum_k prod_{j<=k} a_j (module docstring)."""
    tau, run = 1.0, 1.0
    for a in top1:
        run *= a
        tau += run
    return tau


def _checkpoints(out: Path) -> list[Path]:
    return sorted((out / "checkpoints").glob("step_*"))


def _save_checkpoint(out: Path, step: int, model: nn.Module, opt, task: TrainTask, cfg: TrainConfig) -> Path:
    """Atomically write checkpoints/step_N (state.pt, config.json, weights/) and keep the newest few."""
    final = out / "checkpoints" / f"step_{step:07d}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
               tmp / "state.pt")
    _write_config(tmp, task, cfg)
    task.save(model, tmp / "weights")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in _checkpoints(out)[: -cfg.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_config(path: Path, task: TrainTask, cfg: TrainConfig) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / TRAIN_CONFIG).write_text(json.dumps({"train": asdict(cfg), "task": task.config()}, indent=2) + "\n")


def train(task: TrainTask, cfg: TrainConfig) -> TrainResult:
    """Run (or resume) the training of `task`; under torchrun every rank calls this."""
    from tqdm.auto import tqdm

    env = distributed_env()
    rank, world = (env.rank, env.world) if env else (0, 1)
    model = task.model()
    device = next(model.parameters()).device
    if env:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False)
    inner = getattr(model, "module", model)
    params = [p for p in inner.parameters() if p.requires_grad]
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **fused)
    out = Path(cfg.out_dir)
    start = 0
    if cfg.resume and _checkpoints(out):
        ckpt = _checkpoints(out)[-1]
        state = torch.load(ckpt / "state.pt", map_location=device, weights_only=False)
        inner.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"].cpu())
        random.setstate(state["python_rng"])
        start = state["step"]
    if rank == 0:
        _write_config(out, task, cfg)
    torch.manual_seed(cfg.seed + start)
    history = []
    hist_path = out / "history.jsonl"
    if rank == 0 and start == 0 and hist_path.exists():
        hist_path.unlink()
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if cfg.bf16 and device.type == "cuda"
                else contextlib.nullcontext())
    bar = tqdm(total=cfg.steps, initial=start, disable=rank != 0, desc=f"train {task.name}", unit="step")
    t0 = time.perf_counter()
    sums: dict[str, torch.Tensor] = {}
    loss_value, done = float("nan"), start
    for step in range(start, cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        for micro in range(cfg.grad_accum):
            sync = micro == cfg.grad_accum - 1 or not env
            with (contextlib.nullcontext() if sync else model.no_sync()), autocast:
                loss, metrics = task.loss(model, task.batch(step, micro, rank, world))
            (loss / cfg.grad_accum).backward()
            _accumulate(sums, loss.detach(), metrics)
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        over = cfg.max_seconds is not None and time.perf_counter() - t0 > cfg.max_seconds
        if done % cfg.log_every == 0 or done == cfg.steps or over:
            row = _log_row(sums, done, lr_at(step, cfg), time.perf_counter() - t0, env)
            sums = {}
            loss_value = row["loss"]
            history.append(row)
            if rank == 0:
                with hist_path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                bar.set_postfix(loss=f"{row['loss']:.3f}", tau=f"{row.get('tau', 0):.2f}", lr=f"{row['lr']:.1e}")
        bar.update(1)
        if rank == 0 and cfg.save_every and done % cfg.save_every == 0 and done < cfg.steps and not over:
            _save_checkpoint(out, done, inner, opt, task, cfg)
        if env and cfg.save_every and done % cfg.save_every == 0:
            torch.distributed.barrier()
        if over:
            break
    step = done
    bar.close()
    if rank == 0:
        _save_checkpoint(out, step, inner, opt, task, cfg)
        task.save(inner, out / "final")
        _write_config(out / "final", task, cfg)
        from weaver.train.plot import plot_history

        plot_history(hist_path, out / "plot.png", title=f"{task.name}: {out.name}")
    if env:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return TrainResult(step=step, loss=loss_value, history=history, out_dir=str(out))


def _accumulate(sums: dict[str, torch.Tensor], loss: torch.Tensor, metrics: dict[str, torch.Tensor]) -> None:
    """Running sums on the device (no host sync): loss and micro-steps, and count-weighted top-1 hits."""
    add = {"loss": loss.float(), "n": torch.ones((), device=loss.device)}
    count = metrics.get("count")
    for key, value in metrics.items():
        if key == "count":
            add["count"] = value.float()
        elif count is not None and value.dim() == 1 and value.shape == count.shape:
            add[key] = value.float() * count.float()  # rates -> hits, so micro-steps and ranks weigh by count
        else:
            add[key] = value.float()
    for key, value in add.items():
        sums[key] = sums[key] + value if key in sums else value.clone()


def _log_row(sums: dict[str, torch.Tensor], step: int, lr: float, elapsed: float, env: DistEnv | None) -> dict:
    """One history line; sums all-reduced across ranks first."""
    if env:
        for value in sums.values():
            torch.distributed.all_reduce(value)
    row: dict[str, Any] = {"step": step, "lr": lr, "elapsed_s": round(elapsed, 2)}
    n = sums.pop("n").item()
    row["loss"] = sums.pop("loss").item() / n
    count = sums.pop("count", None)
    for key, value in sums.items():
        if count is not None and value.shape == count.shape:
            rates = (value / count.clamp(min=1)).tolist()
            row[key] = [round(r, 4) for r in rates]
        else:
            row[key] = value.item() / n if value.dim() == 0 else value.tolist()
    if "top1" in row:
        row["tau"] = round(acceptance_tau(row["top1"]), 4)
    if "drafter_top1" in row:
        row["drafter_tau"] = round(acceptance_tau(row["drafter_top1"]), 4)
    return row


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The flags both trainers share (TrainConfig's fields)."""
    p.add_argument("--out", required=True, help="run directory (checkpoints/, final/, history.jsonl, plot.png)")
    p.add_argument("--steps", type=positive_int, default=2000)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup-steps", type=int, default=50)
    p.add_argument("--schedule", default="cosine", choices=["cosine", "wsd"])
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--grad-accum", type=positive_int, default=1)
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps (0: at the end only)")
    p.add_argument("--log-every", type=positive_int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-seconds", type=float, default=None, help="stop (and save) after this long")
    p.add_argument("--no-bf16", action="store_true", help="no bf16 autocast on CUDA")
    p.add_argument("--no-resume", action="store_true", help="start over even if the run has checkpoints")


def train_config(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(out_dir=args.out, steps=args.steps, lr=args.lr, warmup_steps=args.warmup_steps,
                       schedule=args.schedule, weight_decay=args.weight_decay, grad_clip=args.grad_clip,
                       grad_accum=args.grad_accum, save_every=args.save_every, log_every=args.log_every,
                       seed=args.seed, max_seconds=args.max_seconds, bf16=not args.no_bf16,
                       resume=not args.no_resume)
