"""RuntimeOptions: the few switches a user or a debugger needs, in one object passed explicitly.

    llm = weaver.LLM("smollm2", options=weaver.RuntimeOptions(kernels="torch"))   # the torch references
    weaver generate "..." --kernels torch --cuda-graphs off                         # the same from the CLI
    WEAVER_KERNELS=torch weaver generate "..."                                      # and from the environment

This module is the only one in `weaver` that reads the environment (besides `WEAVER_HOME`, resolved by
`weaver.models.registry.weaver_home`): `RuntimeOptions.from_env()` maps the variables below onto the fields,
`weaver.LLM` uses it when no `options=` is given, and the CLI flags override it. Everything below the API
(engine, round, builders, adapter, fast paths, kernels) receives the object, never the environment.

    field        variable               values
    kernels      WEAVER_KERNELS         auto | torch | triton
    compile      WEAVER_COMPILE         1 | 0
    cuda_graphs  WEAVER_CUDA_GRAPHS     round | stages | off
    pdl          WEAVER_PDL             1 | 0
    tuning       WEAVER_TRITON_TUNING   a verify_sweep.py JSON | none
    blas         WEAVER_BLAS            auto | cublas | cublaslt
    gemv         WEAVER_GEMV            auto | triton | tma | blas
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from weaver.errors import GenerationConfigError

__all__ = [
    "BLAS", "BLAS_LT_MIN_HIDDEN", "CUDA_GRAPHS", "DEFAULT_OPTIONS", "GEMV", "KERNELS", "RuntimeOptions",
    "add_runtime_arguments", "runtime_options", "triton_interpreting",
]

KERNELS = ("auto", "torch", "triton")
CUDA_GRAPHS = ("round", "stages", "off")
BLAS = ("auto", "cublas", "cublaslt")
GEMV = ("auto", "triton", "tma", "blas")
# From this hidden size `blas="auto"` takes cuBLASLt (`weaver.kernels.launch_config` applies it). H100, 27B shape
# (hidden 5120): chain-16 round 23.914 / 23.855 -> 23.689 / 23.675 ms, weaver-64 27.655 -> 27.187 / 27.236 (the down
# projection and the drafter's fc read faster); 135M shape (hidden 576): chain-16 0.984 / 0.983 / 0.983 -> 0.998 /
# 0.987 / 0.992, weaver-64 level (benchmarks/results/scale/h100_session53_blas). Sizes in between are untimed.
BLAS_LT_MIN_HIDDEN = 4096
_BOOLS = {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}


@dataclass(frozen=True)
class RuntimeOptions:
    """How weaver runs (never what it computes: every setting gives the same tokens)."""

    # auto: the Triton kernels wherever they apply (CUDA with triton installed), torch elsewhere;
    # torch: the torch references everywhere (debugging, and the reference a kernel is compared with);
    # triton: the Triton kernels even on CPU tensors (under TRITON_INTERPRET=1: how the CPU tests run them)
    kernels: Literal["auto", "torch", "triton"] = "auto"
    # torch.compile the round's stages and the torch decode step before capture (CUDA only)
    compile: bool = True
    # CUDA-graph capture (CUDA only): one graph per round (the fast path), one per stage (a device time for
    # each stage, four launches more a round), or none (eager)
    cuda_graphs: Literal["round", "stages", "off"] = "round"
    # programmatic dependent launch on Hopper and later, for weaver's Triton kernels and inductor's (the compiled
    # stages but commit: capture.NO_INDUCTOR_PDL): each kernel may start while its predecessor ends
    pdl: bool = True
    # launch configurations measured by scripts/gpu/verify_sweep.py: a JSON path, "none" for the built-in
    # configurations, or None for the packaged table of this GPU (H200) when there is one
    tuning: str | None = None
    # torch's preferred BLAS library for the GEMMs of several rows (verify, draft, commit; CUDA only; process-wide,
    # set when an engine is built): auto takes cuBLASLt for targets of hidden size >= BLAS_LT_MIN_HIDDEN
    # (on an H100 it read the 27B shape's wide GEMMs faster, the 135M ones a little slower) and torch's default
    # (cuBLAS) below
    blas: Literal["auto", "cublas", "cublaslt"] = "auto"
    # one input row of a large 16-bit weight (a 27B target's AR step; `weaver.kernels.gemv`): weaver's Triton GEMV,
    # its TMA variant (Hopper; `kernels.triton.gemv_tma`, which also takes the layer norms and residual adds),
    # torch's BLAS (F.linear), or auto: the one measured faster on this GPU (`gemv.GEMV_BLAS_GPUS`: BLAS on an
    # H200; `gemv.GEMV_TMA_GPUS`: the TMA variant on an H100; the Triton GEMV elsewhere)
    gemv: Literal["auto", "triton", "tma", "blas"] = "auto"

    def __post_init__(self) -> None:
        if self.kernels not in KERNELS:
            raise GenerationConfigError(f"kernels must be one of {', '.join(KERNELS)}, got {self.kernels!r}")
        if self.cuda_graphs not in CUDA_GRAPHS:
            raise GenerationConfigError(
                f"cuda_graphs must be one of {', '.join(CUDA_GRAPHS)}, got {self.cuda_graphs!r}"
            )
        if self.blas not in BLAS:
            raise GenerationConfigError(f"blas must be one of {', '.join(BLAS)}, got {self.blas!r}")
        if self.gemv not in GEMV:
            raise GenerationConfigError(f"gemv must be one of {', '.join(GEMV)}, got {self.gemv!r}")
        if not isinstance(self.compile, bool) or not isinstance(self.pdl, bool):
            raise GenerationConfigError(f"compile and pdl are booleans, got {self.compile!r} and {self.pdl!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> RuntimeOptions:
        """The options the environment asks for (module docstring), then `overrides` (None values ignored)."""
        env = os.environ if env is None else env
        fields: dict[str, object] = {}
        if "WEAVER_KERNELS" in env:
            fields["kernels"] = env["WEAVER_KERNELS"]
        for name, var in (("compile", "WEAVER_COMPILE"), ("pdl", "WEAVER_PDL")):
            if var in env:
                value = env[var].strip().lower()
                if value not in _BOOLS:
                    raise GenerationConfigError(f"{var} must be 1 or 0, got {env[var]!r}")
                fields[name] = _BOOLS[value]
        if "WEAVER_CUDA_GRAPHS" in env:
            fields["cuda_graphs"] = env["WEAVER_CUDA_GRAPHS"]
        if env.get("WEAVER_TRITON_TUNING"):
            fields["tuning"] = env["WEAVER_TRITON_TUNING"]
        if "WEAVER_BLAS" in env:
            fields["blas"] = env["WEAVER_BLAS"]
        if "WEAVER_GEMV" in env:
            fields["gemv"] = env["WEAVER_GEMV"]
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**fields)

    def replace(self, **changes: object) -> RuntimeOptions:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def torch_only(self) -> bool:
        """True when every op must run its torch reference."""
        return self.kernels == "torch"

    @property
    def force_triton(self) -> bool:
        """True when the Triton kernels run even on CPU tensors (the interpreter)."""
        return self.kernels == "triton"


DEFAULT_OPTIONS = RuntimeOptions()  # the default `options=` of functions below the API (frozen: one shared instance)


def triton_interpreting() -> bool:
    """True when triton runs kernels in its interpreter (TRITON_INTERPRET=1, which triton itself reads)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """The RuntimeOptions flags (each overrides its WEAVER_* environment variable)."""
    g = parser.add_argument_group("runtime options (how it runs, never what it computes)")
    g.add_argument("--kernels", choices=KERNELS, default=None,
                   help="auto: Triton kernels where they apply (CUDA); torch: the torch references everywhere; "
                        "triton: the kernels even on CPU (interpreter)")  # fmt: skip
    g.add_argument("--no-compile", dest="compile", action="store_false", default=None,
                   help="do not torch.compile the round stages (CUDA)")
    g.add_argument("--cuda-graphs", choices=CUDA_GRAPHS, default=None,
                   help="round: one graph per round (default); stages: one per stage; off: eager")
    g.add_argument("--no-pdl", dest="pdl", action="store_false", default=None,
                   help="launch kernels without programmatic dependent launch (Hopper)")
    g.add_argument("--tuning", default=None, help="launch-config table from scripts/gpu/verify_sweep.py, or 'none'")
    g.add_argument("--blas", choices=BLAS, default=None,
                   help="torch's BLAS library for the GEMMs of several rows (CUDA): auto (default) takes cublaslt for "
                        f"targets of hidden size >= {BLAS_LT_MIN_HIDDEN}, cublas below")  # fmt: skip
    g.add_argument("--gemv", choices=GEMV, default=None,
                   help="one row of a large weight (a 27B AR step, CUDA): triton: weaver's GEMV; tma: its TMA "
                        "variant (Hopper); blas: torch's BLAS; auto (default): the one measured faster on this GPU "
                        "(blas on an H200)")  # fmt: skip


def runtime_options(args: argparse.Namespace) -> RuntimeOptions:
    """The environment's RuntimeOptions with the command line's flags on top."""
    return RuntimeOptions.from_env(kernels=args.kernels, compile=args.compile, cuda_graphs=args.cuda_graphs,
                                   pdl=args.pdl, tuning=args.tuning, blas=args.blas, gemv=args.gemv)  # fmt: skip


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a torchrun launch."""

    rank: int
    world: int
    local_rank: int


def distributed_env() -> DistEnv | None:
    """The torchrun process layout (WORLD_SIZE / RANK / LOCAL_RANK), or None for a plain single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    return DistEnv(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
