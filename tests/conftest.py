import os
import sys
from pathlib import Path

import torch

# Without CUDA the Triton kernels run under the interpreter; triton reads TRITON_INTERPRET when a kernel is
# decorated, so it is set here, before any test module imports weaver.kernels.triton (a preset value wins).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, str(Path(__file__).parent))  # `helpers` (shared fixtures) imports by name

# The tensors of the tests are tiny (most time goes to Python: the Triton interpreter, hypothesis, the engine
# loop): one intra-op thread per process is fastest, and `make test` runs two processes (pytest-xdist -n 2) on
# two cores. With two OpenMP threads, a busy second core slows small ops tenfold and more (spin-waits).
# WEAVER_TEST_THREADS overrides it (e.g. a GPU run of the compiled kernels that wants the host's cores).
torch.set_num_threads(int(os.environ.get("WEAVER_TEST_THREADS", "1")))


def pytest_addoption(parser):
    parser.addoption(
        "--triton-full",
        action="store_true",
        default=False,
        help="run the Triton kernel tests compiled on CUDA at full size (default: interpreted on the CPU, small sizes)",
    )


def pytest_configure(config):
    """Hand --triton-full to helpers.triton_env before any test module imports its FULL / DEVICE."""
    from helpers import triton_env

    triton_env.configure(config.getoption("--triton-full"))


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need CUDA; on a CPU machine (where `make test` deselects them anyway) say so."""
    import pytest

    if torch.cuda.is_available():
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (run by scripts/gpu/)"))
