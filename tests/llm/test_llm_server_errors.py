"""Our OpenAI-compatible server refuses bad requests as OpenAI and vLLM do, over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.llm.transformers_backend import TransformersChatModel
from tests.support.doubles import ScriptedChatModel

USER = [{"role": "user", "content": "Who directed Jaws?"}]
ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def scripted():
    model = ScriptedChatModel(default="Spielberg", name="served")
    with BackgroundServer(create_app(model)) as server, httpx.Client(base_url=server.base_url) as client:
        yield model, client


@pytest.fixture(scope="module")
def tiny():
    """A random tiny Qwen3 (context 8,192) behind the server; no request here reaches generate()."""
    from tests import support

    model, tokenizer = support.tiny_qwen3()
    chat = TransformersChatModel(model, tokenizer, name="tiny")
    with BackgroundServer(create_app(chat)) as server, httpx.Client(base_url=server.base_url) as client:
        yield chat, client
    chat.close()


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS
    return body["error"]


@pytest.mark.parametrize(
    ("body", "param", "code", "needle"),
    [
        ({"messages": "nope"}, "messages", "invalid_value", "messages"),
        ({"model": "served"}, "messages", "missing_required_parameter", "Field required"),
        ({"messages": []}, "messages", "invalid_value", "at least 1 item"),
        ({"messages": USER, "temperature": -1}, "temperature", "invalid_value", "greater than or equal to 0"),
        ({"messages": USER, "max_tokens": "lots"}, "max_tokens", "invalid_value", "integer"),
        ({"messages": USER, "temperature": 5}, "temperature", "invalid_value", "less than or equal to 2"),
        ({"messages": USER, "logprobs": True}, "logprobs", "unsupported_value", "logprobs=true"),
        ({"messages": USER, "top_logprobs": 3}, "top_logprobs", "invalid_value", "needs logprobs=true"),
        (
            {"messages": USER, "response_format": {"type": "json_object"}},
            "response_format",
            "unsupported_value",
            "json_object",
        ),
        ({"messages": USER, "presence_penalty": 0.5}, "presence_penalty", "unsupported_value", "0.5"),
        (
            {"messages": USER, "temprature": 0.5},
            "temprature",
            "unknown_parameter",
            "Unrecognized request argument",
        ),
    ],
)
def test_invalid_bodies_get_openai_400(scripted, body, param, code, needle):
    model, client = scripted
    before = len(model.requests)
    error = error_of(client.post("/chat/completions", json=body), 400)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert needle in error["message"]
    assert len(model.requests) == before


def test_fields_at_their_defaults_and_fields_that_ask_nothing_are_accepted(scripted):
    _, client = scripted
    body = {
        "messages": USER,
        "logprobs": False,
        "response_format": {"type": "text"},
        "frequency_penalty": 0,
        "user": "someone",
        "parallel_tool_calls": True,
        "stream_options": None,
    }
    r = client.post("/chat/completions", json=body)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Spielberg"


def test_body_that_is_not_json_gets_400(scripted):
    _, client = scripted
    r = client.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert "JSON" in error_of(r, 400)["message"]


def test_unknown_role_gets_400_and_reaches_no_model(scripted):
    model, client = scripted
    before = len(model.requests)
    messages = [{"role": "user", "content": "hi"}, {"role": "usr", "content": "dropped?"}]
    error = error_of(client.post("/chat/completions", json={"model": "served", "messages": messages}), 400)
    assert error["param"] == "messages.1.role" and "'assistant'" in error["message"]
    assert len(model.requests) == before


def test_known_roles_and_extra_keys_pass_through(scripted):
    model, client = scripted
    messages = [
        {"role": "system", "content": "Be brief."},
        *USER,
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Look it up.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "Jaws"}'}}
            ],
        },
        {"role": "tool", "content": "Jaws (1975)", "tool_call_id": "c1"},
    ]
    r = client.post("/chat/completions", json={"model": "served", "messages": messages})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Spielberg"
    assert model.requests[-1]["messages"] == messages


def test_unknown_model_gets_404_model_not_found(scripted):
    model, client = scripted
    before = len(model.requests)
    error = error_of(client.post("/chat/completions", json={"model": "gpt-9", "messages": USER}), 404)
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert "gpt-9" in error["message"] and "served" in error["message"]
    assert len(model.requests) == before
    assert client.post("/chat/completions", json={"model": "served", "messages": USER}).status_code == 200


def test_prompt_longer_than_the_context_gets_400_with_both_lengths(tiny):
    chat, client = tiny
    long = [{"role": "user", "content": "word " * 20_000}]  # 100k characters
    error = error_of(client.post("/chat/completions", json={"model": "tiny", "messages": long}), 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert "8192 tokens" in error["message"]
    (n_prompt,) = [int(w) for w in error["message"].split() if w.isdigit() and int(w) > 8192]
    assert n_prompt > 20_000


def test_max_tokens_past_the_context_gets_400(tiny):
    _, client = tiny
    body = {"model": "tiny", "messages": USER, "max_tokens": 8192}
    error = error_of(client.post("/chat/completions", json=body), 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    assert "lower max_tokens to at most" in error["message"]
