"""OpenAIChatModel over real HTTP on 127.0.0.1: our server, fault injection, balancing, key hygiene."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter

import pytest
from fastapi.responses import JSONResponse
from llm_helpers import completion, dead_url, raw_app

from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.llm import ChatError, ChatModelConfig, OpenAIChatModel, SamplingParams, build_chat_model
from executor_sft.llm.parsing import tool_call_error
from executor_sft.llm.server import BackgroundServer, create_app
from tests.support.doubles import ScriptedChatModel, assistant, tool_call
from tests.support.http_faults import FaultInjector

USER = [{"role": "user", "content": "Who directed Jaws?"}]
FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}


def run(coro):
    return asyncio.run(coro)


async def gather(model, n, **kw):
    """`n` concurrent calls, each its own request (a numbered question), as a rollout makes them."""
    asks = [[{**USER[0], "content": f"{USER[0]['content']} ({i})"}] for i in range(n)]
    return await asyncio.gather(*(model.chat(ask, **kw) for ask in asks))


@pytest.mark.slow
def test_real_model_over_http(smollm2_server, smollm2_chat):
    model = OpenAIChatModel("smollm2", smollm2_server.base_url, timeout_s=120)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    result = run(model.chat(question, sampling=SamplingParams(max_tokens=16)))
    assert "Paris" in result.message["content"]
    assert result.usage.counted_by == "backend" and result.model == "smollm2"
    prompt = smollm2_chat.tokenizer.apply_chat_template(question, add_generation_prompt=True, tokenize=False)
    assert result.usage.prompt_tokens == len(
        smollm2_chat.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    )
    # With tools offered: the schema reaches the real template, any tool call comes back in OpenAI shape.
    with_tools = run(model.chat(USER, tools=[SEARCH_TOOL], sampling=SamplingParams(max_tokens=24)))
    assert with_tools.usage.prompt_tokens > result.usage.prompt_tokens + 50
    for call in with_tools.message.get("tool_calls", []):
        assert set(call) == {"id", "type", "function"} and isinstance(call["function"]["arguments"], str)


def test_max_tokens_field_is_configurable():
    app = raw_app(lambda body, request: completion({"content": "ok"}))
    with BackgroundServer(app) as server:
        for field in ("max_tokens", "max_completion_tokens"):
            model = build_chat_model(
                ChatModelConfig(model="raw", base_urls=server.base_url, max_tokens_field=field, max_tokens=17)
            )
            assert run(model.chat(USER)).message["content"] == "ok"
    sent = app.state.bodies
    assert sent[0]["max_tokens"] == 17 and "max_completion_tokens" not in sent[0]
    assert sent[1]["max_completion_tokens"] == 17 and "max_tokens" not in sent[1]
    with pytest.raises(ValueError, match="max_tokens_field"):
        OpenAIChatModel("raw", "http://127.0.0.1:9/v1", max_tokens_field="max_new_tokens")  # type: ignore[arg-type]


def test_tool_calls_and_settings_round_trip():
    scripted = ScriptedChatModel(
        [assistant("", [tool_call("search", {"query": "Jaws director"})], reasoning="I should search.")],
        default=assistant("<answer>Spielberg</answer>"),
    )
    with BackgroundServer(create_app(scripted, "scripted")) as server:
        model = OpenAIChatModel("scripted", server.base_url, extra_body={"user": "test-suite"})
        sampling = SamplingParams(
            temperature=0.7, top_p=0.9, max_tokens=33, seed=3, stop=["</x>"], enable_thinking=True
        )
        first = run(model.chat(USER, tools=[SEARCH_TOOL], sampling=sampling))
        second = run(model.chat(USER))
    call = first.message["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "search"
    assert (
        json.loads(call["function"]["arguments"]) == {"query": "Jaws director"}
        and tool_call_error(call) is None
    )
    assert first.message["reasoning_content"] == "I should search."
    assert first.finish_reason == "tool_calls" and second.finish_reason == "stop"
    assert second.message == {"role": "assistant", "content": "<answer>Spielberg</answer>"}
    seen = scripted.requests[0]
    assert seen["tools"] == [SEARCH_TOOL] and seen["messages"] == USER
    s = seen["sampling"]
    assert (s.temperature, s.top_p, s.max_tokens, s.seed, s.stop, s.enable_thinking) == (
        0.7,
        0.9,
        33,
        3,
        ["</x>"],
        True,
    )
    assert scripted.requests[1]["sampling"].enable_thinking is False


def test_raw_endpoint_fields_usage_and_text_fallback(smollm2_chat):
    replies = iter(
        [
            completion({"content": "A", "reasoning": "r1"}, {"prompt_tokens": 7, "completion_tokens": 2}),
            completion({"content": "B", "reasoning_content": "r2"}),
            completion(
                {
                    "content": '<think>hm</think>ok <tool_call>{"name": "search", "arguments": {"query": "q"</tool_call>'
                }
            ),
            completion({"content": "C"}),
        ]
    )
    app = raw_app(lambda body, request: next(replies))
    with BackgroundServer(app) as server:
        model = OpenAIChatModel("raw", server.base_url)
        a = run(model.chat(USER, sampling=SamplingParams(enable_thinking=False)))
        b = run(model.chat(USER))
        c = run(model.chat(USER, tools=[SEARCH_TOOL]))
        counted = OpenAIChatModel("raw", server.base_url, tokenizer=smollm2_chat.tokenizer)
        d = run(counted.chat(USER))
    assert app.state.bodies[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert a.message["reasoning_content"] == "r1" and a.usage.model_dump() == {
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "counted_by": "backend",
    }
    assert b.message["reasoning_content"] == "r2" and b.usage.counted_by == "estimate"
    assert b.usage.prompt_tokens > 0 and b.usage.completion_tokens >= 1
    # A server without reasoning/tool parsers: we parse the text, and the bad call is surfaced.
    assert c.message["reasoning_content"] == "hm" and c.message["content"] == "ok"
    (bad,) = c.message["tool_calls"]
    assert bad["function"]["name"] == "search" and tool_call_error(bad) is not None
    prompt = smollm2_chat.tokenizer.apply_chat_template(USER, add_generation_prompt=True, tokenize=True)
    assert d.usage.counted_by == "tokenizer" and d.usage.prompt_tokens == len(prompt["input_ids"])
    assert d.usage.completion_tokens == 1


def test_fault_injection_retries_survive():
    faults = FaultInjector(p429=0.2, p500=0.2, p_delay=0.15, delay_s=2.0, seed=1, per_call=5)
    scripted = ScriptedChatModel(default=assistant("ok"))
    with BackgroundServer(faults.install(create_app(scripted, "m"))) as server:
        model = OpenAIChatModel("m", server.base_url, timeout_s=0.8, max_retries=10, **FAST)
        results = run(gather(model, 24))
    assert [r.message["content"] for r in results] == ["ok"] * 24
    assert faults.counts["429"] and faults.counts["500"] and faults.counts["delay"]
    assert faults.counts["requests"] == faults.counts["passed"] + faults.counts["429"] + faults.counts["500"]
    assert faults.counts["passed"] >= 24
    # Every injected fault (error status or a delay past the timeout) cost the client one attempt.
    injected = faults.counts["429"] + faults.counts["500"] + faults.counts["delay"]
    assert model.endpoints[0].failures >= injected


def test_failures_that_outlast_retries_raise_chat_error():
    always = FaultInjector(p500=1.0)
    with BackgroundServer(always.install(create_app(ScriptedChatModel(default="x"), "m"))) as server:
        model = OpenAIChatModel("m", server.base_url, max_retries=2, **FAST)
        with pytest.raises(ChatError, match=r"3 attempts failed; last: .*HTTP 500"):
            run(model.chat(USER))
    assert always.counts["requests"] == 3

    slow = FaultInjector(p_delay=1.0, delay_s=1.0)
    with BackgroundServer(slow.install(create_app(ScriptedChatModel(default="x"), "m"))) as server:
        model = OpenAIChatModel("m", server.base_url, timeout_s=0.3, max_retries=1, **FAST)
        with pytest.raises(ChatError, match="timeout after 0.3s"):
            run(model.chat(USER))

    # A client error is not retried.
    app = raw_app(lambda body, request: JSONResponse({"error": {"message": "bad model"}}, status_code=404))
    with BackgroundServer(app) as server:
        model = OpenAIChatModel("m", server.base_url, max_retries=5, **FAST)
        with pytest.raises(ChatError, match="HTTP 404"):
            run(model.chat(USER))
    assert len(app.state.bodies) == 1

    model = OpenAIChatModel("m", dead_url(), max_retries=1, **FAST)
    with pytest.raises(ChatError, match="connection error"):
        run(model.chat(USER))


def test_load_balancing_and_dead_replica():
    a = ScriptedChatModel(default="a", latency_s=0.3)
    b = ScriptedChatModel(default="b", latency_s=0.3)
    with BackgroundServer(create_app(a, "m")) as sa, BackgroundServer(create_app(b, "m")) as sb:
        model = OpenAIChatModel("m", [sa.base_url, sb.base_url])
        results = run(gather(model, 8))
        # Least in flight, ties round-robin: concurrent calls split evenly.
        assert Counter(r.message["content"] for r in results) == {"a": 4, "b": 4}

        dead = dead_url()
        model = OpenAIChatModel("m", [dead, sb.base_url], max_retries=2, **FAST)
        before = len(b.requests)
        results = run(gather(model, 6))
        assert [r.message["content"] for r in results] == ["b"] * 6
        assert len(b.requests) - before == 6
        assert model.endpoints[0].failures >= 1  # it was tried, then skipped


def test_concurrency_limit():
    faults = FaultInjector()
    with BackgroundServer(
        faults.install(create_app(ScriptedChatModel(default="x", latency_s=0.1), "m"))
    ) as server:
        model = OpenAIChatModel("m", server.base_url, max_concurrency=2)
        run(gather(model, 8))
    assert faults.max_in_flight == 2 and faults.counts["requests"] == 8


def test_api_key_never_leaks(monkeypatch, caplog):
    secret = "sk-test-Zq81secretKEY-do-not-log"
    monkeypatch.setenv("EXECUTOR_SFT_TEST_KEY", secret)
    caplog.set_level(logging.DEBUG)
    faults = FaultInjector(p429=0.5, seed=3, per_call=4)
    with BackgroundServer(faults.install(create_app(ScriptedChatModel(default="x"), "m"))) as server:
        model = OpenAIChatModel(
            "m", server.base_url, api_key_env="EXECUTOR_SFT_TEST_KEY", max_retries=8, **FAST
        )
        run(gather(model, 4))
    assert faults.counts["429"] >= 1  # retries were logged
    assert set(faults.auth_headers) == {f"Bearer {secret}"}  # the key is actually sent
    assert secret not in repr(model) and secret not in str(vars(model))

    # A server that echoes the Authorization header back in its error body.
    echo = raw_app(
        lambda body, request: JSONResponse(
            {"error": {"message": f"invalid key {request.headers['authorization']}"}}, status_code=401
        )
    )
    errors = []
    with BackgroundServer(echo) as server:
        model = OpenAIChatModel("m", server.base_url, api_key_env="EXECUTOR_SFT_TEST_KEY", **FAST)
        with pytest.raises(ChatError) as info:
            run(model.chat(USER))
        errors.append(info.value)
    model = OpenAIChatModel("m", dead_url(), api_key_env="EXECUTOR_SFT_TEST_KEY", max_retries=1, **FAST)
    with pytest.raises(ChatError) as info:
        run(model.chat(USER))
    errors.append(info.value)
    for exc in errors:
        chain = [exc, exc.__cause__, exc.__context__]
        assert all(secret not in str(e) for e in chain if e is not None)
    assert "HTTP 401" in str(errors[0]) and "***" in str(errors[0])
    assert caplog.records and secret not in caplog.text
    assert all(secret not in str(r.args) for r in caplog.records)


def test_missing_key_env_names_the_variable(monkeypatch):
    monkeypatch.delenv("EXECUTOR_SFT_NO_SUCH_KEY", raising=False)
    with pytest.raises(ValueError, match="EXECUTOR_SFT_NO_SUCH_KEY is not set"):
        OpenAIChatModel("m", "http://127.0.0.1:1/v1", api_key_env="EXECUTOR_SFT_NO_SUCH_KEY")


def test_model_config(monkeypatch):
    from pydantic import ValidationError

    from executor_sft.llm import ChatModelConfig

    cfg = ChatModelConfig.model_validate(
        {
            "model": "Qwen/Qwen3-8B",
            "base_urls": "http://h:8000/v1",
            "temperature": 0.6,
            "enable_thinking": True,
        }
    )
    assert cfg.base_urls == ["http://h:8000/v1"] and cfg.sampling().enable_thinking
    model = build_chat_model(cfg)
    assert isinstance(model, OpenAIChatModel) and model.sampling.temperature == 0.6
    with pytest.raises(ValidationError, match="temprature"):
        ChatModelConfig.model_validate({"model": "m", "temprature": 0.5})
    with pytest.raises(ValidationError, match="backend"):
        ChatModelConfig.model_validate({"model": "m", "backend": "tgi"})
    with pytest.raises(ImportError, match=r"executor-sft\[gpu\]"):
        build_chat_model({"backend": "vllm", "model": "Qwen/Qwen3-1.7B"})


def test_server_rejects_unsupported_requests():
    import httpx

    app = create_app(ScriptedChatModel(default="x"), "served")
    with BackgroundServer(app) as server, httpx.Client(base_url=server.base_url) as client:
        assert client.get("/models").json()["data"][0]["id"] == "served"
        assert client.post("/chat/completions", json={"messages": USER, "stream": True}).status_code == 400
        assert client.post("/chat/completions", json={"messages": USER, "n": 2}).status_code == 400
        assert client.post("/chat/completions", json={"messages": "nope"}).status_code == 400


@pytest.mark.slow
def test_server_cli_serves_a_model():
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "executor_sft.llm.server",
            "--model",
            "offline:tiny-qwen3",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.25)
        model = OpenAIChatModel("offline:tiny-qwen3", f"http://127.0.0.1:{port}/v1")
        result = run(model.chat(USER, tools=[SEARCH_TOOL], sampling=SamplingParams(max_tokens=4)))
        assert result.model == "offline:tiny-qwen3" and result.usage.completion_tokens <= 4
        assert result.usage.prompt_tokens > 100  # the tool schema was rendered by the served template
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_password_in_the_url_reaches_neither_the_repr_nor_the_http_logs(caplog):
    """`http://user:password@host` is how some gateways take a secret: the model's repr and the
    httpx/openai debug logs show the host with `***` where the password was."""
    app = raw_app(lambda body, request: completion({"content": "ok"}))
    caplog.set_level(logging.DEBUG)
    with BackgroundServer(app) as server:
        url = server.base_url.replace("http://", "http://bob:s3cret@")
        model = OpenAIChatModel("raw", url, **FAST)
        assert run(model.chat(USER)).message["content"] == "ok"
        assert "s3cret" not in repr(model) and "bob:***@" in repr(model)
    logged = [r.getMessage() for r in caplog.records]
    assert any("bob:***@" in m for m in logged)  # the request was logged, with the password hidden
    assert not [m for m in logged if "s3cret" in m]
