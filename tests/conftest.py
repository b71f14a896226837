import sys
from pathlib import Path

# Test helper modules (e.g. tests/models/hf_reference.py) import by bare name.
for sub in ("models", "spec", "ops"):
    sys.path.insert(0, str(Path(__file__).parent / sub))


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need CUDA; on a CPU machine (where `make test` deselects them anyway) say so."""
    import pytest
    import torch

    if torch.cuda.is_available():
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (run by scripts/gpu/)"))
