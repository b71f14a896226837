"""RuntimeOptions: the one reader of the environment, mapped from the environment and the CLI flags."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import torch

import weaver
from weaver.errors import GenerationConfigError
from weaver.options import RuntimeOptions, add_runtime_arguments, runtime_options

SRC = Path(weaver.__file__).parent


def test_only_the_options_module_reads_the_environment() -> None:
    """No module but options.py reads os.environ / os.getenv; registry.py only in weaver_home, for WEAVER_HOME."""
    readers = {}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        hits = [i + 1 for i, line in enumerate(lines) if re.search(r"os\.environ|os\.getenv|getenv\(", line)]
        if hits:
            readers[str(path.relative_to(SRC))] = hits
    assert set(readers) <= {"options.py", "models/registry.py"}, readers
    registry = (SRC / "models" / "registry.py").read_text().splitlines()
    for line_no in readers.get("models/registry.py", []):
        line = registry[line_no - 1]
        assert '"WEAVER_HOME"' in line, line
    assert len(readers.get("models/registry.py", [])) <= 1


def test_importing_weaver_sets_no_environment_variable() -> None:
    """Nothing of ours: torch._dynamo itself sets TORCHINDUCTOR_CACHE_DIR when it loads (a bare
    `import torch._dynamo` does too), so the check starts after that import."""
    import os
    import subprocess
    import sys

    code = ("import os, json, torch._dynamo; before = dict(os.environ); import weaver, weaver.llm, weaver.kernels.gdn, "
            "weaver.speculative.engine; print(json.dumps(sorted(set(os.environ.items()) ^ set(before.items()))))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_from_env_maps_every_variable() -> None:
    env = {"WEAVER_KERNELS": "torch", "WEAVER_COMPILE": "0", "WEAVER_CUDA_GRAPHS": "stages", "WEAVER_PDL": "off",
           "WEAVER_TRITON_TUNING": "/tmp/t.json", "WEAVER_BLAS": "cublaslt", "WEAVER_GEMV": "blas"}
    assert RuntimeOptions.from_env(env) == RuntimeOptions(kernels="torch", compile=False, cuda_graphs="stages",
                                                          pdl=False, tuning="/tmp/t.json", blas="cublaslt",
                                                          gemv="blas")  # fmt: skip
    assert RuntimeOptions.from_env({}) == RuntimeOptions()
    assert RuntimeOptions.from_env({"WEAVER_COMPILE": "0"}, compile=True).compile  # explicit values win


@pytest.mark.parametrize(
    "env, message",
    [({"WEAVER_KERNELS": "cuda"}, "kernels must be one of"), ({"WEAVER_COMPILE": "maybe"}, "WEAVER_COMPILE must be"),
     ({"WEAVER_CUDA_GRAPHS": "all"}, "cuda_graphs must be one of"), ({"WEAVER_BLAS": "mkl"}, "blas must be one of"),
     ({"WEAVER_GEMV": "cublas"}, "gemv must be one of")],
)
def test_bad_values_are_clear_errors(env: dict, message: str) -> None:
    with pytest.raises(GenerationConfigError, match=message):
        RuntimeOptions.from_env(env)


def test_cli_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    add_runtime_arguments(parser)
    monkeypatch.setenv("WEAVER_KERNELS", "torch")
    monkeypatch.setenv("WEAVER_PDL", "1")
    args = parser.parse_args(["--no-pdl", "--cuda-graphs", "off"])
    assert runtime_options(args) == RuntimeOptions(kernels="torch", pdl=False, cuda_graphs="off")
    args = parser.parse_args(["--kernels", "auto"])
    assert runtime_options(args).kernels == "auto"
    monkeypatch.setenv("WEAVER_BLAS", "cublas")
    assert runtime_options(parser.parse_args(["--blas", "cublaslt"])).blas == "cublaslt"
    assert runtime_options(parser.parse_args([])).blas == "cublas"


def test_blas_library_resolves_auto_by_the_targets_width() -> None:
    """auto: cuBLASLt from BLAS_LT_MIN_HIDDEN (the 27B shape), cuBLAS below (the 135M one); an explicit choice wins;
    without a size torch's own default stays. Off CUDA nothing is set (a CPU build has no cuBLASLt to select)."""
    from weaver.kernels import launch_config

    auto, wide = RuntimeOptions(), launch_config.BLAS_LT_MIN_HIDDEN
    assert launch_config.blas_library(auto, 5120) == "cublaslt" and launch_config.blas_library(auto, wide) == "cublaslt"
    assert launch_config.blas_library(auto, 576) == "cublas" and launch_config.blas_library(auto, wide - 1) == "cublas"
    assert launch_config.blas_library(auto, None) is None
    assert launch_config.blas_library(RuntimeOptions(blas="cublas"), 5120) == "cublas"
    assert launch_config.blas_library(RuntimeOptions(blas="cublaslt"), 576) == "cublaslt"
    before = torch.backends.cuda.preferred_blas_library()
    launch_config.configure(RuntimeOptions(blas="cublaslt"), 5120, cuda=False)
    assert torch.backends.cuda.preferred_blas_library() == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch without cuBLASLt (the CPU build)")
def test_a_blas_library_torch_lacks() -> None:
    """The CPU build of torch refuses cuBLASLt: auto keeps torch's library, naming it is a clear error."""
    from weaver.kernels import launch_config

    before = torch.backends.cuda.preferred_blas_library()
    launch_config.configure(RuntimeOptions(), 5120, cuda=True)
    assert torch.backends.cuda.preferred_blas_library() == before
    with pytest.raises(GenerationConfigError, match="blas='cublaslt'"):
        launch_config.configure(RuntimeOptions(blas="cublaslt"), 576, cuda=True)


def test_llm_passes_its_options_to_the_engine_and_the_model() -> None:
    options = RuntimeOptions(kernels="torch", cuda_graphs="off")
    llm = weaver.LLM.from_config("tiny-qwen3_5", random_weights=True, seed=0, options=options, dtype="fp32",
                                 device="cpu")  # fmt: skip
    assert llm.engine.options is options and llm.model.options is options
    assert llm.engine.fast_decode is None
