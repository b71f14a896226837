"""`weaver bench acceptance` times warm runs only: a generation that captured or compiled a round is repeated."""

from __future__ import annotations

from types import SimpleNamespace

from weaver.bench.acceptance import warm_generate


class FakeLLM:
    """Counts generate calls; the first call of each method 'captures' (as a CUDA engine does)."""

    def __init__(self) -> None:
        self.engine = SimpleNamespace(captured_count=0)
        self.calls: list[str] = []
        self.seen: set[str] = set()

    def generate(self, prompt, method="ar", **kwargs):
        self.calls.append(method)
        if method not in self.seen:
            self.seen.add(method)
            self.engine.captured_count += 1
        return SimpleNamespace(method=method, call=len(self.calls))


def test_a_capturing_generation_is_timed_again_and_a_warm_one_is_not() -> None:
    llm = FakeLLM()
    first = warm_generate(llm, "p", method="weaver", budget=64)
    assert llm.calls == ["weaver", "weaver"] and first.call == 2  # the returned run is the warm repeat
    again = warm_generate(llm, "p", method="weaver", budget=64)
    assert llm.calls == ["weaver"] * 3 and again.call == 3
    warm_generate(llm, "p", method="ar")
    assert llm.calls[-2:] == ["ar", "ar"]
