"""`weaver serve` start and stop: CLI mistakes, /health before the warm-up, chat templates, SIGTERM mid-request,
and (slow) the default model end to end."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from helpers.serve import Server, tiny_config

import weaver
from weaver.cli import main
from weaver.serve.app import create_app
from weaver.serve.config import ServeConfig
from weaver.serve.prompts import chat_ids


@pytest.mark.parametrize("argv,message", [
    (["--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--model", "tiny-llama", "--random-weights"], "has no tokenizer"),
    (["--model", "{cfg}", "--random-weights", "--method", "weaver"], "needs a drafter and an adapter"),
    (["--model", "{cfg}", "--random-weights", "--drafter", "random", "--draft-vocab", "missing.safetensors"],
     "no such token map"),
])  # fmt: skip
def test_cli_mistakes_are_one_line(argv, message, tmp_path, capsys):
    cfg = tiny_config(tmp_path)
    code = main(["serve", *[a.format(cfg=cfg) for a in argv], "--port", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_health_is_503_until_warm(tmp_path):
    """Without its lifespan the app never warms up: /health says so, and requests are not dropped on the floor."""
    import asyncio

    llm = weaver.LLM.from_config(str(tiny_config(tmp_path)), random_weights=True, device="cpu")
    cfg = ServeConfig(model_id="tiny", context_len=llm.context_len, method="ar", budget=8, methods=("ar",),
                      budgets=(8,))  # fmt: skip
    app = create_app(llm, cfg)

    async def probe() -> tuple[int, int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            health = await c.get("/health")
            models = await c.get("/v1/models")
            return health.status_code, models.status_code

    assert asyncio.run(probe()) == (503, 200)


class _TemplateTokenizer:
    """A tokenizer with a chat template that records what it was given."""

    has_chat_template = True

    def __init__(self) -> None:
        self.calls: list[tuple[list, dict]] = []

    def apply_chat_template(self, messages, **kwargs):
        if kwargs.get("explode"):
            raise ValueError("template says no")
        self.calls.append((messages, kwargs))
        return [1, 2, 3]


def test_chat_template_gets_messages_and_its_switches():
    tok = _TemplateTokenizer()
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert chat_ids(tok, msgs, {"enable_thinking": False}) == [1, 2, 3]
    assert tok.calls == [(msgs, {"enable_thinking": False})]
    with pytest.raises(Exception) as info:  # a template's own error is the request's fault: a 400
        chat_ids(tok, msgs, {"explode": True})
    assert info.value.status == 400 and "template says no" in info.value.message


def _wait_until_b_is_in(srv: Server, a_lines: list[str], timeout: float = 15.0) -> None:
    """Until the server holds B: queued behind A, or running once A is done (a fixed 0.1 s sleep lost the race on a
    loaded 2-core box: B's connection came after the server stopped accepting)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.metric("weaver_queue_depth") == 1 or (a_lines[-1:] == ["data: [DONE]"] and
                                                     srv.metric("weaver_requests_running") == 1):  # fmt: skip
            return
        time.sleep(0.02)
    raise AssertionError(f"request B never reached the server in {timeout} s")


def test_sigterm_finishes_in_flight_cancels_the_rest_and_exits_0(tmp_path):
    srv = Server(["--model", str(tiny_config(tmp_path)), "--random-weights", "--served-model-name", "tiny",
                  "--drafter", "random", "--adapter", "random", "--method", "weaver", "--budget", "8",
                  "--shutdown-timeout", "2.5"], log=tmp_path / "server.log")  # fmt: skip
    first = threading.Event()
    a_lines: list[str] = []
    b_result: list[object] = []

    def stream_a() -> None:  # in flight at SIGTERM: finishes whole
        body = {"model": "tiny", "prompt": "a", "max_tokens": 40, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=30) as r:
            for line in filter(None, r.iter_lines()):
                a_lines.append(line)
                if '"text":"' in line and '"text":""' not in line:
                    first.set()

    def plain_b() -> None:  # queued behind A, then cut by the shutdown timeout
        try:
            r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "b", "max_tokens": 450,
                                                              "temperature": 0}, timeout=30)  # fmt: skip
            b_result.append(r.status_code)
            assert r.json()["error"]["code"] == "shutting_down"
        except httpx.HTTPError as exc:
            b_result.append(type(exc).__name__)

    a = threading.Thread(target=stream_a)
    a.start()
    assert first.wait(20)
    b = threading.Thread(target=plain_b)
    b.start()
    _wait_until_b_is_in(srv, a_lines)
    t0 = time.monotonic()
    code = srv.stop(timeout=20)
    took = time.monotonic() - t0
    a.join(5)
    b.join(5)
    assert code == 0, srv.log.read_text()
    assert took < 10, took
    assert a_lines[-1] == "data: [DONE]" and '"completion_tokens":40' in "".join(a_lines)
    assert b_result == [503], b_result  # 450 tokens take ~4.5 s: the 2.5 s grace period cut it, with a 503
    log = srv.log.read_text()
    assert "cancelled 1 request(s)" in log and "Traceback" not in log, log


@pytest.mark.slow
def test_default_model_serves_greedy_equal_to_generate(tmp_path):
    """SmolLM2 with its chat template, through the openai client, equals LLM("smollm2").generate."""
    srv = Server(["--model", "smollm2", "--method", "ar", "--default-max-tokens", "24"], log=tmp_path / "server.log",
                 startup_timeout=600)  # fmt: skip
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)
        question = "What is the capital of France?"
        resp = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": question}],
                                              temperature=0, max_tokens=24)  # fmt: skip
        ref = weaver.LLM("smollm2", device="cpu").generate(question, max_new_tokens=24)
        assert resp.choices[0].message.content == ref.text
        assert resp.usage.prompt_tokens == ref.stats.prompt_tokens
        assert resp.usage.completion_tokens == ref.stats.new_tokens
        chunks = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": question}],
                                                temperature=0, max_tokens=24, stream=True)  # fmt: skip
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.text
    finally:
        assert srv.stop() == 0
