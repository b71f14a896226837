import sys
from pathlib import Path

# Test helper modules (e.g. tests/models/hf_reference.py) import by bare name.
for sub in ("models", "spec", "ops"):
    sys.path.insert(0, str(Path(__file__).parent / sub))
