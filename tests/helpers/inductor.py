"""Reading what inductor generated: tests that pin a compiled graph's launches and buffers read its `call`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._inductor.utils import run_and_get_code


def compiled_call(fn: Callable, *args: Any) -> tuple[Any, str]:
    """Run an already torch.compile'd fn on args; its result and the text of inductor's `call` functions (the
    launches, in order), from each compiled graph's `def call(` on."""
    result, codes = run_and_get_code(fn, *args)
    return result, "\n".join(code[code.index("def call(") :] for code in codes if "def call(" in code)
