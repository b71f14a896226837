"""`weaver serve` end to end: one real server subprocess (tiny random model) driven by the official openai client
for the happy paths, raw httpx for bad input, a dropped stream, a dropped plain request and a full queue."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from helpers.serve import Server, tiny_config

import weaver

BUDGET = 8
MAX_QUEUE = 2
BODY_LIMIT = 32 * 1024
LONG = 400  # tokens of a generation the tests cut short (weaver: about 10 ms a token here)


@pytest.fixture(scope="module")
def cfg_path(tmp_path_factory):
    return tiny_config(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(cfg_path, tmp_path_factory):
    srv = Server([
        "--model", str(cfg_path), "--random-weights", "--served-model-name", "tiny", "--drafter", "random",
        "--adapter", "random", "--method", "ar", "--budget", str(BUDGET), "--max-queue", str(MAX_QUEUE),
        "--max-body-bytes", str(BODY_LIMIT), "--max-tokens-limit", "450", "--default-max-tokens", "16",
    ], log=tmp_path_factory.mktemp("serve-log") / "server.log")  # fmt: skip
    yield srv
    assert srv.stop() == 0, srv.log.read_text()


@pytest.fixture(scope="module")
def llm(cfg_path):
    """The same model in process: what the server's answers must equal."""
    return weaver.LLM.from_config(str(cfg_path), random_weights=True, seed=0, drafter="random", adapter="random",
                                  device="cpu")  # fmt: skip


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)


def _idle(server: Server, timeout: float = 10.0) -> None:
    """Wait until nothing runs or waits (a test that cut a generation short leaves it to stop at a round)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.metric("weaver_requests_running") == 0 and server.metric("weaver_queue_depth") == 0:
            return
        time.sleep(0.02)
    raise AssertionError("the engine is still busy")


# -- the happy paths, through the official client -----------------------------------------------------------
def test_models_health_and_metrics(server, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    text = httpx.get(server.url + "/metrics").text
    for name in ("weaver_requests_total", "weaver_request_tau", "weaver_time_to_first_token_seconds",
                 "weaver_inter_token_latency_seconds", "weaver_queue_depth", "weaver_errors_total",
                 "weaver_prompt_tokens_total", "weaver_generation_tokens_total"):  # fmt: skip
        assert name in text, name
    assert server.metric("weaver_ready") == 1


@pytest.mark.parametrize("method", ["ar", "weaver"])
def test_greedy_chat_equals_generate(client, llm, method):
    prompt = "Tell me about trees."
    ref = llm.generate(prompt, method=method, budget=BUDGET, max_new_tokens=24, chat=True)
    resp = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompt}],
                                          max_tokens=24, temperature=0,
                                          extra_body={"weaver": {"method": method, "budget": BUDGET}})  # fmt: skip
    assert resp.choices[0].message.content == ref.text
    assert resp.choices[0].finish_reason == "length"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (ref.stats.prompt_tokens, 24)
    assert resp.usage.total_tokens == ref.stats.prompt_tokens + 24
    stats = resp.model_extra["weaver"]
    assert stats["method"] == method and stats["rounds"] == ref.stats.rounds and stats["tau"] >= 1
    assert stats["rounds_by_accepted"] == ref.stats.accepted_per_depth
    assert stats["accepted_tokens"] == sum(k * n for k, n in enumerate(stats["rounds_by_accepted"]))
    assert stats["accepted_tokens"] == sum(stats["accepted_per_depth"])


def test_completion_stream_concatenates_to_whole(client, llm):
    kw = dict(model="tiny", prompt="Once upon a time", max_tokens=20, temperature=0,
              extra_body={"weaver": {"method": "ddtree"}})  # fmt: skip
    whole = client.completions.create(**kw)
    ref = llm.generate("Once upon a time", method="ddtree", budget=BUDGET, max_new_tokens=20, chat=False)
    assert whole.choices[0].text == ref.text
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens == ref.stats.prompt_tokens
    assert len({c.id for c in chunks}) == 1


def test_chat_stream_stop_string_held_back(client, llm):
    messages = [{"role": "user", "content": "Say something."}]
    full = llm.generate("Say something.", max_new_tokens=40, chat=True).text
    stop = full[6:9]
    ref = llm.generate("Say something.", max_new_tokens=40, chat=True, stop=[stop])
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=40, temperature=0,
                                            stop=[stop], stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == ref.text == full[: full.find(stop)]
    assert not any(stop in p for p in pieces)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].usage.completion_tokens == ref.stats.new_tokens < 40


def test_sampling_parameters_are_honoured(client):
    def ask(**kw):
        return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Pick a word."}],
                                              max_tokens=12, **kw).choices[0].message.content  # fmt: skip

    greedy = ask(temperature=0)
    assert ask(temperature=1.5, seed=3) == ask(temperature=1.5, seed=3)  # the seed reaches the sampler
    assert ask(temperature=1.5, seed=3) != ask(temperature=1.5, seed=4)
    assert ask(temperature=1.5, seed=5, extra_body={"top_k": 1}) == greedy  # top_k=1 is argmax: top_k is applied
    assert ask(temperature=1.5, top_p=1e-6, seed=6) == greedy  # so is top_p
    assert ask(temperature=1e-300, seed=8) == greedy  # a vanishing temperature is greedy, not a NaN and a 500
    assert ask(temperature=1.5, seed=7, extra_body={"top_k": 1, "weaver": {"method": "weaver"}}) == greedy


def test_multi_turn_chat_and_template_kwargs(client, llm):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]  # fmt: skip
    resp = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                          extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    fallback = "system: Be brief.\nuser: Hi\nassistant: Hello\nuser: Bye\nassistant: "  # byte tokenizer: no template
    assert resp.choices[0].message.content == llm.generate(fallback, max_new_tokens=8, chat=False).text
    assert resp.usage.prompt_tokens == len(fallback.encode())


# -- bad input: raw httpx, only 4xx with an OpenAI-style body ------------------------------------------------
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
BAD = [
    ("malformed-json", b'{"model": "tiny", "messages": [', 400, None),
    ("empty-body", b"", 400, None),
    ("not-an-object", [1, 2], 400, None),
    ("missing-messages", {"model": "tiny"}, 400, "messages"),
    ("messages-string", {**CHAT, "messages": "hi"}, 400, "messages"),
    ("messages-empty", {**CHAT, "messages": []}, 400, "messages"),
    ("message-no-role", {**CHAT, "messages": [{"content": "hi"}]}, 400, "messages.0.role"),
    ("unknown-role", {**CHAT, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role"),
    ("content-int", {**CHAT, "messages": [{"role": "user", "content": 5}]}, 400, "messages.0.content"),
    ("tool-role", {**CHAT, "messages": [{"role": "tool", "content": "x"}]}, 400, "messages.0.role"),
    ("unknown-model", {**CHAT, "model": "gpt-4"}, 404, "model"),
    ("missing-model", {"messages": CHAT["messages"]}, 400, "model"),
    ("negative-max-tokens", {**CHAT, "max_tokens": -1}, 400, "max_tokens"),
    ("zero-max-tokens", {**CHAT, "max_tokens": 0}, 400, "max_tokens"),
    ("huge-max-tokens", {**CHAT, "max_tokens": 10**12}, 400, "max_tokens"),
    ("max-tokens-over-cap", {**CHAT, "max_tokens": 451}, 400, "max_tokens"),
    ("max-tokens-string", {**CHAT, "max_tokens": "ten"}, 400, "max_tokens"),
    ("max-tokens-float", {**CHAT, "max_tokens": 4.5}, 400, "max_tokens"),
    ("prompt-over-context", {**CHAT, "messages": [{"role": "user", "content": "x" * 600}]}, 400, "messages"),
    ("prompt-plus-max-tokens-over-context", {**CHAT, "messages": [{"role": "user", "content": "x" * 300}],
                                             "max_tokens": 300}, 400, "max_tokens"),  # fmt: skip
    ("n-2", {**CHAT, "n": 2}, 400, "n"),
    ("logprobs", {**CHAT, "logprobs": True}, 400, "logprobs"),
    ("temperature-negative", {**CHAT, "temperature": -0.5}, 400, "temperature"),
    ("temperature-string", {**CHAT, "temperature": "hot"}, 400, "temperature"),
    ("top-p-zero", {**CHAT, "top_p": 0}, 400, "top_p"),
    ("stream-string", {**CHAT, "stream": "yes"}, 400, "stream"),
    ("stop-too-many", {**CHAT, "stop": [str(i) for i in range(9)]}, 400, "stop"),
    ("penalty", {**CHAT, "presence_penalty": 0.5}, 400, "presence_penalty"),
    ("tools", {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    ("unknown-parameter", {**CHAT, "frobnicate": 1}, 400, "frobnicate"),
    ("unknown-method", {**CHAT, "weaver": {"method": "medusa"}}, 400, "weaver.method"),
    ("budget-zero", {**CHAT, "weaver": {"method": "weaver", "budget": 0}}, 400, "weaver.budget"),
    ("budget-not-served", {**CHAT, "weaver": {"method": "weaver", "budget": 9}}, 400, "weaver.budget"),
    ("budget-string", {**CHAT, "weaver": {"budget": "big"}}, 400, "weaver.budget"),
    ("weaver-unknown-key", {**CHAT, "weaver": {"speed": "max"}}, 400, "weaver.speed"),
    ("verify-greedy-sampled", {**CHAT, "temperature": 0.5, "weaver": {"verify": "greedy"}}, 400, "weaver.verify"),
    ("verify-unknown", {**CHAT, "weaver": {"verify": "best"}}, 400, "weaver.verify"),
    ("oversized-body", {**CHAT, "messages": [{"role": "user", "content": "x" * BODY_LIMIT}]}, 413, None),
]


@pytest.mark.parametrize("name,body,status,param", BAD, ids=[b[0] for b in BAD])
def test_bad_chat_input(server, name, body, status, param):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(server.url + "/v1/chat/completions", content=content,
                   headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param, err


BAD_COMPLETIONS = [
    ({"model": "tiny", "prompt": "hi", "logprobs": 2}, "logprobs"),
    ({"model": "tiny", "prompt": "hi", "echo": True}, "echo"),
    ({"model": "tiny", "prompt": ["a", "b"]}, "prompt"),
    ({"model": "tiny", "prompt": [5, 400]}, "prompt"),  # a token id outside the vocabulary
    ({"model": "tiny", "prompt": "   "}, "prompt"),
    ({"model": "tiny", "prompt": {"text": "hi"}}, "prompt"),
    ({"model": "tiny", "prompt": "y" * 600}, "prompt"),  # over the 512-token context
]


@pytest.mark.parametrize("body,param", BAD_COMPLETIONS, ids=[p for _, p in BAD_COMPLETIONS])
def test_bad_completion_input(server, body, param):
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_bad_routes_and_streamed_oversized_body(server):
    too_large = server.metric("weaver_errors_total", 'type="body_too_large"')
    r = httpx.get(server.url + "/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["message"]
    r = httpx.get(server.url + "/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"

    def chunks():  # no Content-Length: the limit is enforced while the body streams in
        yield b'{"model": "tiny", "messages": [{"role": "user", "content": "'
        for _ in range(BODY_LIMIT // 1024 + 2):
            yield b"x" * 1024
        yield b'"}]}'

    r = httpx.post(server.url + "/v1/chat/completions", content=chunks(), timeout=10)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 3,
                                                         "temperature": 0})  # fmt: skip
    assert r.status_code == 200 and r.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 3,
                                                          "total_tokens": 6}  # fmt: skip
    assert server.metric("weaver_errors_total", 'type="body_too_large"') == too_large + 1
    assert server.metric("weaver_requests_total", 'endpoint="/v1/chat/completions",status="413"') >= 1


# -- cancellation and the queue ----------------------------------------------------------------------------
def _long_stream(server: Server, first_text: threading.Event, close: threading.Event, method: str = "weaver"):
    """Stream a LONG-token request, signal its first text, then drop the connection when told."""
    body = {**CHAT, "max_tokens": LONG, "temperature": 0, "stream": True, "weaver": {"method": method}}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                first_text.set()
                close.wait(30)
                return


def test_disconnect_mid_stream_frees_engine_within_a_round(server):
    _idle(server)
    tokens_before = server.metric("weaver_generation_tokens_total")
    cancelled_before = server.metric("weaver_errors_total", 'type="cancelled"')
    first, close = threading.Event(), threading.Event()
    close.set()
    _long_stream(server, first, close)  # returns (and closes the connection) right after the first text
    assert first.is_set()
    t0 = time.perf_counter()
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2,
                                                         "temperature": 0}, timeout=30)  # fmt: skip
    waited = time.perf_counter() - t0
    assert r.status_code == 200
    assert waited < 2.0, f"the next request waited {waited:.2f} s: the dropped stream was not cancelled"
    _idle(server)
    generated = server.metric("weaver_generation_tokens_total") - tokens_before - 2
    assert generated < LONG / 2, generated
    assert server.metric("weaver_errors_total", 'type="cancelled"') == cancelled_before + 1


def test_disconnect_of_plain_request_cancels(server):
    _idle(server)
    tokens_before = server.metric("weaver_generation_tokens_total")
    body = {**CHAT, "max_tokens": LONG, "temperature": 0, "weaver": {"method": "weaver"}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/chat/completions", json=body, timeout=0.5)
    _idle(server, timeout=3.0)
    assert server.metric("weaver_generation_tokens_total") - tokens_before < LONG / 2
    assert server.metric("weaver_errors_total", 'type="cancelled"') >= 1


def test_full_queue_gets_429_and_the_queue_is_fifo(server):
    _idle(server)
    first, close = threading.Event(), threading.Event()
    running = threading.Thread(target=_long_stream, args=(server, first, close))
    running.start()
    assert first.wait(20)  # the long stream runs: what comes next waits in the queue
    done: list[tuple[int, int]] = []
    ids: dict[int, str] = {}

    def queued(i: int) -> None:
        r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": f"q{i}", "max_tokens": 3,
                                                             "temperature": 0}, timeout=30)  # fmt: skip
        done.append((i, r.status_code))
        ids[i] = r.json()["id"]

    waiting = []
    for i in range(MAX_QUEUE):
        waiting.append(threading.Thread(target=queued, args=(i,)))
        waiting[-1].start()
        deadline = time.monotonic() + 5
        while server.metric("weaver_queue_depth") < i + 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert server.metric("weaver_queue_depth") == MAX_QUEUE
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 3})
    assert r.status_code == 429, r.text
    assert r.headers["Retry-After"] == "1" and r.json()["error"]["code"] == "queue_full"
    assert done == []  # nothing queued ran while the long stream held the engine
    close.set()  # drop the long stream: the queued requests run, in order
    running.join(10)
    for t in waiting:
        t.join(10)
    assert sorted(done) == [(0, 200), (1, 200)]
    # the order they ran in is the server's (the clients' threads may see their answers in either order)
    started = [line.split("request ")[1].split()[0] for line in server.log.read_text().splitlines()
               if " started after " in line]  # fmt: skip
    assert [rid for rid in started if rid in ids.values()] == [ids[0], ids[1]]
