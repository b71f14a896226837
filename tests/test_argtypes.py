"""Counts below one given to a CLI command: argparse's one-line usage error (exit 2), before anything runs."""

from __future__ import annotations

import argparse

import pytest

from weaver.argtypes import positive_int
from weaver.cli import main


@pytest.mark.parametrize(
    "argv",
    [["bench", "ar", "--runs", "0"], ["bench", "ar", "--new-tokens", "-3"],
     ["bench", "rounds", "--budgets", "16", "0"], ["bench", "rounds", "--new-tokens", "0"],
     ["bench", "scale", "--prefill", "0"], ["bench", "scale", "--verify-nodes", "-1"],
     ["bench", "scale", "--budgets", "0"], ["bench", "load", "--shards", "0"], ["bench", "acceptance", "--limit", "0"],
     ["bench", "acceptance", "--max-new-tokens", "0"], ["bench", "serve", "--clients", "0"],
     ["train", "drafter", "--data", "d", "--out", "o", "--steps", "0"],
     ["train", "weaver", "--data", "d", "--drafter", "x", "--out", "o", "--batch-size", "0"],
     ["data", "build", "--out", "o", "--max-prompts", "0"], ["data", "regenerate", "--prompts", "p", "--out", "o",
     "--max-new-tokens", "0"], ["data", "token-map", "--data", "d", "--size", "0"], ["serve", "--max-queue", "0"],
     ["serve", "--budgets", "8", "0"], ["serve", "--retry-after", "-1"]],
)  # fmt: skip
def test_counts_below_one_are_usage_errors(argv, capsys):
    """`bench ar --runs 0` and `train drafter --steps 0` were tracebacks, `data build --max-prompts 0` an empty set."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def test_positive_int():
    assert positive_int("7") == 7
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)
