"""Faults at the model server and at the OpenAI backend, over real HTTP on 127.0.0.1.

The server side sends what a broken or hostile client sends (malformed fields, bytes that are not
UTF-8, a body far past any context, a forced tool call, a prompt that takes seconds to tokenise)
and expects OpenAI-shaped refusals while the server keeps serving. The backend side faces an
endpoint that answers 200 with a body that is not a chat completion (a proxy's HTML page,
truncated JSON) a few times before a good answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from executor_sft.llm.base import ChatError
from executor_sft.llm.openai_backend import OpenAIChatModel
from executor_sft.llm.server import DEFAULT_MAX_BODY_BYTES, BackgroundServer, create_app
from executor_sft.llm.transformers_backend import TransformersChatModel
from tests.support.doubles import ScriptedChatModel

pytestmark = pytest.mark.faults

USER = [{"role": "user", "content": "Who directed Jaws?"}]
ERROR_KEYS = {"message", "type", "param", "code"}
SEARCH = {
    "type": "function",
    "function": {"name": "search", "description": "Search.", "parameters": {"type": "object"}},
}


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    return body["error"]


def post_raw(client: httpx.Client, raw: bytes) -> httpx.Response:
    return client.post("/chat/completions", content=raw, headers={"content-type": "application/json"})


@pytest.fixture(scope="module")
def tiny():
    """A random tiny Qwen3 behind the server: the real template and tokenizer see every request."""
    from tests import support

    model, tokenizer = support.tiny_qwen3()
    chat = TransformersChatModel(model, tokenizer, name="tiny")
    with (
        BackgroundServer(create_app(chat)) as server,
        httpx.Client(base_url=server.base_url, timeout=60) as client,
    ):
        yield client
    chat.close()


@pytest.fixture(scope="module")
def scripted():
    model = ScriptedChatModel(default="Spielberg", name="served")
    with (
        BackgroundServer(create_app(model)) as server,
        httpx.Client(base_url=server.base_url, timeout=60) as client,
    ):
        yield model, client


# -- the server ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "param", "needle"),
    [
        (
            json.dumps({"messages": [{"role": "assistant", "content": "", "tool_calls": "oops"}]}).encode(),
            "messages.0.tool_calls",
            "valid list",
        ),
        (
            json.dumps({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}).encode(),
            "messages.0.tool_calls.0.function",
            "Field required",
        ),
        (json.dumps({"messages": USER, "seed": 2**70}).encode(), "seed", "9223372036854775807"),
        (json.dumps({"messages": [{"role": "user", "content": 7}]}).encode(), "messages.0.content", "string"),
        (b'{"messages": [{"role": "user", "content": "a \\ud800 b"}]}', "messages.0.content", "surrogate"),
        ('{"messages": [{"role": "user", "content": "caf\u00e9"}]}'.encode("latin-1"), None, "not UTF-8"),
        (json.dumps({"messages": USER, "tools": [{"function": {}}]}).encode(), "tools.0", "Field required"),
    ],
    ids=[
        "tool_calls-oops",
        "tool_call-no-name",
        "seed-2**70",
        "content-int",
        "lone-surrogate",
        "latin-1",
        "tool",
    ],
)
def test_malformed_fields_get_openai_400_and_the_server_keeps_serving(tiny, raw, param, needle):
    error = error_of(post_raw(tiny, raw), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert needle in error["message"]
    ok = tiny.post("/chat/completions", json={"messages": USER, "max_tokens": 2, "seed": 2**63 - 1})
    assert ok.status_code == 200, ok.text


def test_an_escaped_surrogate_pair_is_text_and_reaches_the_model(scripted):
    model, client = scripted
    r = post_raw(client, b'{"messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}')
    assert r.status_code == 200, r.text
    assert model.requests[-1]["messages"][0]["content"] == "smile \U0001f600"


def test_body_over_the_limit_gets_413_and_reaches_no_model(scripted):
    model, client = scripted
    before = len(model.requests)
    big = json.dumps({"messages": [{"role": "user", "content": "w" * (10 << 20)}]}).encode()
    error = error_of(post_raw(client, big), 413)
    assert error["code"] == "request_too_large" and str(DEFAULT_MAX_BODY_BYTES) in error["message"]

    def chunks():  # no content-length: counted as it arrives
        for i in range(0, len(big), 1 << 16):
            yield big[i : i + (1 << 16)]

    r = client.post("/chat/completions", content=chunks(), headers={"content-type": "application/json"})
    assert error_of(r, 413)["code"] == "request_too_large"
    assert len(model.requests) == before
    assert client.post("/chat/completions", json={"messages": USER}).status_code == 200


def test_a_client_that_leaves_before_its_body_arrives_costs_one_log_line(scripted, caplog):
    """A client whose timeout fires mid-upload (routine under load) is no server error."""
    model, client = scripted
    before = len(model.requests)
    uvicorn_records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = uvicorn_records.append
    uvicorn_log = logging.getLogger("uvicorn.error")  # uvicorn's own logger: it does not reach caplog
    uvicorn_log.addHandler(handler)
    caplog.set_level(logging.INFO, logger="executor_sft.llm.server")
    try:
        url = httpx.URL(str(client.base_url))
        with socket.create_connection((url.host, url.port), timeout=5) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"messages"'
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            uvicorn_records or any("client left" in r.getMessage() for r in caplog.records)
        ):
            time.sleep(0.05)
    finally:
        uvicorn_log.removeHandler(handler)
    left = [r.getMessage() for r in caplog.records if "client left" in r.getMessage()]
    assert left == ["/v1/chat/completions: the client left before its request body arrived"]
    assert [r.getMessage() for r in uvicorn_records if r.levelno >= logging.ERROR] == []
    assert client.post("/chat/completions", json={"messages": USER}).status_code == 200
    assert len(model.requests) == before + 1


def test_body_limit_is_configurable():
    model = ScriptedChatModel(default="ok", name="m")
    long = [{"role": "user", "content": "w" * 1000}]
    with (
        BackgroundServer(create_app(model, max_body_bytes=1000)) as server,
        httpx.Client(base_url=server.base_url) as client,
    ):
        error = error_of(client.post("/chat/completions", json={"messages": long}), 413)
        assert "limit of 1000 bytes" in error["message"]
        assert client.post("/chat/completions", json={"messages": USER}).status_code == 200
    assert len(model.requests) == 1


def test_tool_choice_none_and_auto_are_honoured(scripted):
    model, client = scripted
    for choice, offered in [("none", None), ("auto", [SEARCH]), (None, [SEARCH])]:
        body = {"messages": USER, "tools": [SEARCH], "tool_choice": choice}
        assert client.post("/chat/completions", json=body).status_code == 200
        assert model.requests[-1]["tools"] == offered, choice


@pytest.mark.parametrize(
    ("choice", "needle"),
    [
        ("required", "tool_choice=required forces a tool call"),
        ({"type": "function", "function": {"name": "search"}}, "tool_choice={function: search} forces"),
        ("sometimes", "'none', 'auto' or 'required'"),
    ],
)
def test_tool_choice_the_server_cannot_honour_gets_400(scripted, choice, needle):
    model, client = scripted
    before = len(model.requests)
    body = {"messages": USER, "tools": [SEARCH], "tool_choice": choice}
    error = error_of(client.post("/chat/completions", json=body), 400)
    assert error["param"] == "tool_choice" and needle in error["message"]
    assert len(model.requests) == before


def test_unknown_path_and_method_answer_in_openai_shape(scripted):
    _, client = scripted
    assert error_of(client.get("/nowhere"), 404)["message"] == "Not Found"
    assert error_of(client.get("/chat/completions"), 405)["message"] == "Method Not Allowed"


def test_health_answers_while_a_long_prompt_is_tokenised(tiny):
    """1.5 MB of prompt (under the body limit) takes the tokenizer seconds; /health must not wait for it."""
    long = {"messages": [{"role": "user", "content": "word " * 300_000}]}
    outcome: dict[str, object] = {}

    def send() -> None:
        with httpx.Client(base_url=str(tiny.base_url), timeout=120) as client:
            outcome["response"] = client.post("/chat/completions", json=long)
            outcome["at"] = time.monotonic()

    health = tiny.base_url.copy_with(path="/health")
    sender = threading.Thread(target=send)
    started = time.monotonic()
    sender.start()
    time.sleep(0.3)  # the body is in and tokenising
    latencies = []
    while sender.is_alive() and time.monotonic() - started < 60:
        t0 = time.monotonic()
        assert tiny.get(health, timeout=10).json() == {"status": "ok"}
        latencies.append((time.monotonic() - t0, time.monotonic()))
        time.sleep(0.05)
    sender.join(timeout=60)
    error = error_of(outcome["response"], 400)
    assert error["code"] == "context_length_exceeded"
    during = [lat for lat, at in latencies if at < outcome["at"]]
    assert len(during) >= 3, f"the long request finished too soon to test: {latencies}"
    assert max(during) < 1.0, during  # on the event loop it waited for the whole tokenisation


# -- the OpenAI backend ----------------------------------------------------------------------

HTML_502 = (
    "<html>\n<head><title>502 Bad Gateway</title></head>\n<body><h1>502 Bad Gateway</h1></body>\n</html>\n"
)
BAD_BODIES = {
    "html-page": (HTML_502, "text/html"),
    "truncated-json": ('{"id": "chatcmpl-1", "choices": [{"index": 0, "mess', "application/json"),
    "error-object": ('{"error": {"message": "upstream overloaded"}}', "application/json"),
    "no-choices": (
        '{"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}',
        "application/json",
    ),
    "empty": ("", "text/plain"),
}


class BadBodies:
    """Middleware over the real server: the first `n` chat calls get a 200 with `body` instead."""

    def __init__(self, body: str, media_type: str, n: int, status: int = 200):
        self.body, self.media_type, self.n, self.status = body, media_type, n, status
        self.calls = 0

    async def __call__(self, request: Request, call_next):
        if not request.url.path.endswith("/chat/completions"):
            return await call_next(request)
        self.calls += 1
        if self.calls <= self.n:
            return Response(self.body, status_code=self.status, media_type=self.media_type)
        return await call_next(request)


def served(faults: BadBodies) -> BackgroundServer:
    app: FastAPI = create_app(ScriptedChatModel(default="Spielberg", name="m"), "m")
    app.middleware("http")(faults)
    return BackgroundServer(app)


def backend(server: BackgroundServer, max_retries: int) -> OpenAIChatModel:
    return OpenAIChatModel(
        "m", server.base_url, max_retries=max_retries, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=10
    )


async def chat_once(model: OpenAIChatModel):
    try:
        return await model.chat(USER)
    finally:
        await model.aclose()


@pytest.mark.parametrize("kind", list(BAD_BODIES))
def test_a_200_that_is_not_a_completion_is_retried_then_answered(kind, caplog):
    faults = BadBodies(*BAD_BODIES[kind], n=2)
    with served(faults) as server, caplog.at_level(logging.INFO, logger="executor_sft.llm.openai_backend"):
        result = asyncio.run(chat_once(backend(server, max_retries=4)))
    assert result.message["content"] == "Spielberg"
    assert faults.calls == 3
    retries = [r for r in caplog.records if r.name == "executor_sft.llm.openai_backend"]
    assert len(retries) == 2
    for record in retries:
        text = record.getMessage()
        assert "HTTP 200 with a body that is not" in text and "\n" not in text
        assert record.exc_info is None and record.levelno == logging.INFO


@pytest.mark.parametrize("kind", ["html-page", "truncated-json"])
def test_a_malformed_200_gets_as_many_attempts_as_a_500(kind, caplog):
    attempts = {}
    for label, faults in [
        ("500", BadBodies('{"error": {"message": "boom"}}', "application/json", n=99, status=500)),
        (kind, BadBodies(*BAD_BODIES[kind], n=99)),
    ]:
        with served(faults) as server, pytest.raises(ChatError) as failed:
            asyncio.run(chat_once(backend(server, max_retries=3)))
        attempts[label] = faults.calls
        assert "4 attempts failed" in str(failed.value) and "\n" not in str(failed.value)
    assert attempts == {"500": 4, kind: 4}
    assert not [r for r in caplog.records if r.exc_info]
