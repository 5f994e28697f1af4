"""Prefix reuse in the transformers backend: same tokens as a full prefill, a bounded cache."""

import asyncio
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.llm import SamplingParams, TransformersChatModel
from executor_sft.llm.prefix_cache import PrefixCache, PrefixEntry, common_prefix
from tests.support import tiny_qwen3

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
PASSAGES = [
    "[1] Varna Prime (city): founded in 1203 by Ilsa Moro after the river war; its harbour froze each winter.",
    "[1] Ilsa Moro (person): a cartographer born in Oskel; she drew the first map of the northern delta.",
]


def _entry(ids: list[int]) -> PrefixEntry:
    t = torch.tensor(ids, dtype=torch.long)
    kv = torch.zeros(1, len(ids), 2)
    return PrefixEntry(ids=t, keys=[kv], values=[kv.clone()])


def test_common_prefix():
    a = torch.tensor([1, 2, 3, 4])
    assert common_prefix(a, torch.tensor([1, 2, 9])) == 2
    assert common_prefix(a, torch.tensor([1, 2])) == 2
    assert common_prefix(a, torch.tensor([7])) == 0
    assert common_prefix(a, torch.tensor([], dtype=torch.long)) == 0


def test_a_longer_entry_replaces_its_prefix_and_the_least_recent_goes_first():
    cache = PrefixCache(max_tokens=10)
    cache.store(_entry([1, 2, 3]))
    cache.store(_entry([1, 2, 3, 4, 5]))  # holds [1, 2, 3]: that entry is dropped
    assert len(cache) == 1 and cache.tokens == 5
    cache.store(_entry([7, 8, 9]))
    entry, n = cache.longest(torch.tensor([1, 2, 3, 4, 6]))  # now the most recent
    assert n == 4 and entry.ids.tolist() == [1, 2, 3, 4, 5]
    cache.store(_entry([5, 5, 5]))  # 11 tokens: [7, 8, 9] was used least recently
    assert cache.tokens == 8 and cache.reusable(torch.tensor([7, 8])) == 0
    assert cache.evicted_entries == 1
    cache.store(_entry(list(range(11))))  # over the cap on its own: not kept
    assert cache.tokens == 8


@settings(max_examples=60, deadline=None)
@given(
    cap=st.integers(1, 40),
    sequences=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=15), min_size=1, max_size=25),
)
def test_the_cache_never_holds_more_than_its_cap_and_finds_the_longest_prefix(cap, sequences):
    cache = PrefixCache(max_tokens=cap)
    for ids in sequences:
        query = torch.tensor(ids)
        held = [e.ids for e in cache._entries.values()]
        best = max((common_prefix(h, query) for h in held), default=0)
        assert cache.longest(query)[1] == best
        cache.store(_entry(ids))
        assert cache.tokens <= cap


def _turns(model: TransformersChatModel, question: str) -> tuple[list[list[int]], list[list[dict]]]:
    """Three turns of one executor-shaped conversation: each prompt is the last plus its reply and a tool answer."""
    messages = [
        {"role": "system", "content": "Answer the sub-query from the corpus. Search before you answer."},
        {"role": "user", "content": question},
    ]
    tokens, prompts = [], []
    for turn in range(3):
        prompts.append(list(messages))
        result = model.generate_sync(messages, tools=[SEARCH_TOOL], sampling=GREEDY)
        tokens.append(result.sampled_tokens.ids)
        messages = messages + [
            {"role": "assistant", "content": result.message.get("content") or ""},
            {"role": "tool", "content": PASSAGES[turn % 2]},
        ]
    return tokens, prompts


def _logits_agree_where_tokens_differ(model, tokenizer, prompts, plain, reused) -> None:
    """Where greedy tokens differ, the step is a near-tie whose logits agree to 1e-4."""
    from executor_sft.llm.transformers_backend import render_prompt

    for turn, (a, b) in enumerate(zip(plain, reused, strict=True)):
        if a == b:
            continue
        j = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        text = render_prompt(tokenizer, prompts[turn], [SEARCH_TOOL], enable_thinking=False)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        ids = torch.cat([ids, torch.tensor([a[:j]], dtype=torch.long)], dim=1)
        with torch.inference_mode():
            full = model(ids).logits[0, -1]
            head = model(ids[:, :-8], use_cache=True)
            split = model(ids[:, -8:], past_key_values=head.past_key_values).logits[0, -1]
        assert torch.max(torch.abs(full - split)) < 1e-4
        top2 = torch.topk(full, 2).values
        assert top2[0] - top2[1] < 1e-3, f"turn {turn} step {j}: tokens differ without a near-tie"


@pytest.mark.slow
def test_three_greedy_turns_with_reuse_give_the_tokens_of_a_full_prefill(smollm2):
    model, tokenizer = smollm2
    plain = TransformersChatModel(model, tokenizer, prefix_cache_tokens=0)
    reusing = TransformersChatModel(model, tokenizer, prefix_cache_tokens=8192)
    question = "Who founded Varna Prime, and where was the founder born?"
    expected, prompts = _turns(plain, question)
    got, _ = _turns(reusing, question)
    _logits_agree_where_tokens_differ(model, tokenizer, prompts, expected, got)
    stats = reusing.prefix_stats
    assert stats.requests == 3 and stats.reused_tokens > stats.prompt_tokens / 2, stats


def test_concurrent_runs_reuse_their_prefixes_within_the_cap_and_match_serial_outputs():
    model, tokenizer = tiny_qwen3(seed=3)
    serial = TransformersChatModel(model, tokenizer, max_batch_size=1, prefix_cache_tokens=0)
    cap = 900
    batched = TransformersChatModel(model, tokenizer, max_batch_size=4, prefix_cache_tokens=cap)
    peak = []
    original = batched.prefix_cache.store

    def watch(entry):
        original(entry)
        peak.append(batched.prefix_cache.tokens)

    batched.prefix_cache.store = watch
    questions = ["Who founded the city?", "When was the harbour built?", "Where was Ilsa Moro born?"]

    async def three_turns(chat_model, question):
        messages = [{"role": "user", "content": question}]
        replies = []
        for turn in range(3):
            result = await chat_model.chat(messages, tools=[SEARCH_TOOL], sampling=GREEDY)
            replies.append(result.sampled_tokens.ids)
            messages = messages + [
                {"role": "assistant", "content": result.message.get("content") or ""},
                {"role": "tool", "content": PASSAGES[turn % 2]},
            ]
        return replies

    async def run(chat_model):
        return await asyncio.gather(*(three_turns(chat_model, q) for q in questions))

    assert asyncio.run(run(batched)) == asyncio.run(run(serial))
    stats = batched.prefix_stats
    assert stats.reused_tokens > 0 and max(peak) <= cap, (stats, max(peak))


def test_a_batch_takes_the_calls_closest_in_new_tokens_and_leaves_far_ones_out():
    from executor_sft.llm.transformers_backend import NEW_TOKEN_SLACK, _close_in_new_tokens

    calls = [object() for _ in range(5)]
    new = dict(zip(map(id, calls), [100, 90, 250, 5000, 120], strict=True))
    first = calls[0]
    assert _close_in_new_tokens(first, calls, new, size=3) == [first, calls[1], calls[4]]
    assert calls[3] not in _close_in_new_tokens(first, calls, new, size=8)  # > 2 x 100 + slack
    new[id(calls[3])] = 200 + NEW_TOKEN_SLACK
    assert calls[3] in _close_in_new_tokens(first, calls, new, size=8)


def test_a_call_the_cache_misses_runs_apart_from_later_turns_that_hit():
    """Two runs' second turns and a new, longer conversation arrive together: the second turns
    share a batch and reuse their first turns; the miss prefills alone, and outputs match serial."""
    model, tokenizer = tiny_qwen3(seed=5)
    serial = TransformersChatModel(model, tokenizer, max_batch_size=1, prefix_cache_tokens=0)
    batched = TransformersChatModel(model, tokenizer, max_batch_size=4, prefix_cache_tokens=4096)
    batches = []
    original = batched.generate_batch_sync

    def watch(requests, sampling, encoded=None):
        batches.append(len(requests))
        return original(requests, sampling, encoded)

    batched.generate_batch_sync = watch
    firsts = [
        [{"role": "user", "content": q}] for q in ("Who founded the city?", "Where was Ilsa Moro born?")
    ]
    seconds = []
    for messages in firsts:
        reply = batched.generate_sync(messages, tools=[SEARCH_TOOL], sampling=GREEDY)
        seconds.append(
            messages
            + [
                {"role": "assistant", "content": reply.message.get("content") or ""},
                {"role": "tool", "content": PASSAGES[0]},
            ]
        )
    long_new = [{"role": "user", "content": " ".join(PASSAGES * 6) + " Which of these froze each winter?"}]
    reused_before = batched.prefix_stats.reused_tokens

    async def together(chat_model):
        # The model's one worker waits until all three calls are queued, as under load.
        gate = threading.Event()
        chat_model._executor.submit(gate.wait, 30)
        calls = [
            *(
                asyncio.ensure_future(chat_model.chat(m, tools=[SEARCH_TOOL], sampling=GREEDY))
                for m in seconds
            ),
            asyncio.ensure_future(chat_model.chat(long_new, sampling=GREEDY)),
        ]
        await asyncio.sleep(0.2)
        gate.set()
        return await asyncio.gather(*calls)

    batches.clear()
    got = [r.sampled_tokens.ids for r in asyncio.run(together(batched))]
    assert got == [r.sampled_tokens.ids for r in asyncio.run(together(serial))]
    assert sorted(batches) == [1, 2], batches
    first_turns = sum(len(tokenizer(m[0]["content"])["input_ids"]) for m in firsts)
    assert batched.prefix_stats.reused_tokens - reused_before > first_turns
