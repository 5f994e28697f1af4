"""Log-probabilities through the model server, driven with the `openai` client as users drive it.

The transformers backend computes them from the generation's raw logits; the server returns them
in OpenAI's `choices[].logprobs.content` shape and refuses them (400, `param: logprobs`) for a model
that has none. The values are checked against an independent forward pass over prompt + completion.
"""

from __future__ import annotations

import asyncio

import openai
import pytest
import torch

from executor_sft.llm.base import SamplingParams
from executor_sft.llm.openai_backend import OpenAIChatModel
from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.llm.transformers_backend import TransformersChatModel
from tests.support.doubles import ScriptedChatModel

USER = [{"role": "user", "content": "Who directed Jaws?"}]
OTHER = [{"role": "user", "content": "Name a river in France, and the sea it runs into."}]


@pytest.fixture(scope="module")
def tiny():
    """A random tiny Qwen3 served over HTTP, and an `openai` client for it."""
    from tests import support

    model, tokenizer = support.tiny_qwen3()
    chat = TransformersChatModel(model, tokenizer, name="tiny", max_batch_size=2)
    with BackgroundServer(create_app(chat)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        yield chat, client, server
        client.close()
    chat.close()


@pytest.fixture(scope="module")
def scripted():
    model = ScriptedChatModel(default="Spielberg", name="served")
    with BackgroundServer(create_app(model)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        yield client
        client.close()


def forward_logprobs(chat: TransformersChatModel, messages, completion_ids: list[int]) -> torch.Tensor:
    """Row i: log-softmax of the logits that predicted completion token i (one full forward pass)."""
    _, prompt_ids = chat._encode(messages, None, SamplingParams())
    ids = torch.cat([prompt_ids, torch.tensor(completion_ids)])[None]
    with torch.no_grad():
        logits = chat.model(input_ids=ids).logits[0].float()
    n = prompt_ids.numel()
    return torch.log_softmax(logits[n - 1 : n - 1 + len(completion_ids)], dim=-1)


def test_logprobs_and_top_logprobs_match_a_forward_pass(tiny):
    chat, client, _ = tiny
    response = client.chat.completions.create(
        model="tiny",
        messages=USER,
        temperature=0,
        max_tokens=8,
        logprobs=True,
        top_logprobs=3,
        extra_body={"return_token_ids": True},
    )
    choice = response.choices[0]
    content = choice.logprobs.content
    ids = choice.model_extra["token_ids"]
    assert len(content) == len(ids) == response.usage.completion_tokens > 0
    reference = forward_logprobs(chat, USER, ids)
    for step, (entry, tok) in enumerate(zip(content, ids, strict=True)):
        assert entry.token == chat.tokenizer.decode([tok])
        assert entry.bytes == list(entry.token.encode("utf-8"))
        assert entry.logprob == pytest.approx(float(reference[step, tok]), abs=1e-4)
        top = entry.top_logprobs
        assert len(top) == 3 and [t.logprob for t in top] == sorted((t.logprob for t in top), reverse=True)
        assert [t.logprob for t in top] == pytest.approx(reference[step].topk(3).values.tolist(), abs=1e-4)
        assert top[0].logprob == pytest.approx(entry.logprob, abs=1e-6)  # greedy takes the argmax


def test_logprobs_alone_and_absent(tiny):
    _, client, _ = tiny
    only = client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, logprobs=True)
    assert only.choices[0].logprobs.content and all(
        e.top_logprobs == [] for e in only.choices[0].logprobs.content
    )
    plain = client.chat.completions.create(model="tiny", messages=USER, max_tokens=4)
    assert plain.choices[0].logprobs is None


def test_batched_calls_get_each_rows_own_logprobs(tiny):
    """Two calls in one left-padded generate(): each row's values are its own forward pass's."""
    chat, _, _ = tiny
    sampling = SamplingParams(max_tokens=6, logprobs=2)

    async def both():
        return await asyncio.gather(chat.chat(USER, sampling=sampling), chat.chat(OTHER, sampling=sampling))

    for messages, result in zip((USER, OTHER), asyncio.run(both()), strict=True):
        ids = result.sampled_tokens.ids
        reference = forward_logprobs(chat, messages, ids)
        assert len(result.logprobs) == len(ids)
        for step, entry in enumerate(result.logprobs):
            assert entry.token_id == ids[step]
            assert entry.logprob == pytest.approx(float(reference[step, ids[step]]), abs=1e-4)


def test_openai_backend_asks_for_and_reads_logprobs(tiny):
    chat, _, server = tiny
    sampling = SamplingParams(max_tokens=6, logprobs=2)
    remote = OpenAIChatModel(model="tiny", base_urls=server.base_url)

    async def calls():
        try:
            return await asyncio.gather(
                remote.chat(USER, sampling=sampling), remote.chat(USER, sampling=SamplingParams(max_tokens=4))
            )
        finally:
            await remote.aclose()

    over_http, plain = asyncio.run(calls())
    in_process = asyncio.run(chat.chat(USER, sampling=sampling))
    # The in-process call reuses the HTTP call's cached prefix: equal to fp32 rounding, not bitwise.
    assert [e.token for e in over_http.logprobs] == [e.token for e in in_process.logprobs]
    for remote_entry, local_entry in zip(over_http.logprobs, in_process.logprobs, strict=True):
        assert remote_entry.logprob == pytest.approx(local_entry.logprob, abs=1e-5)
        assert [t for t, _ in remote_entry.top] == [t for t, _ in local_entry.top]
        assert [v for _, v in remote_entry.top] == pytest.approx([v for _, v in local_entry.top], abs=1e-5)
    assert plain.logprobs is None


def test_model_without_logprobs_refuses_them(scripted):
    with pytest.raises(openai.BadRequestError) as caught:
        scripted.chat.completions.create(model="served", messages=USER, logprobs=True)
    assert (caught.value.param, caught.value.code) == ("logprobs", "unsupported_value")
    assert "does not return log-probabilities" in caught.value.message
    assert (
        scripted.chat.completions.create(model="served", messages=USER, logprobs=False).choices[0].logprobs
        is None
    )


@pytest.mark.parametrize(
    ("kwargs", "param", "code"),
    [
        ({"top_logprobs": 3}, "top_logprobs", "invalid_value"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_value"),
        ({"temperature": 5}, "temperature", "invalid_value"),
        ({"extra_body": {"temprature": 0.5}}, "temprature", "unknown_parameter"),
    ],
)
def test_openai_client_gets_the_400_openai_sends(tiny, kwargs, param, code):
    chat, client, _ = tiny
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, **kwargs)
    assert (caught.value.status_code, caught.value.param, caught.value.code) == (400, param, code)
