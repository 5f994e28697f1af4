"""The in-place appending KV cache: the same keys, values and tokens as transformers' own."""

import asyncio

import torch
from transformers import DynamicCache, MistralConfig
from transformers.cache_utils import DynamicLayer

from executor_sft.llm import SamplingParams, TransformersChatModel
from executor_sft.llm.append_cache import MIN_SPARE, AppendLayer, append_cache, full_attention_only
from tests.support import tiny_qwen3


def _kv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 2, n, 4, generator=g), torch.randn(3, 2, n, 4, generator=g)


def test_updates_hold_what_dynamic_layer_holds_across_a_regrow_and_an_outside_crop():
    ours, theirs = AppendLayer(), DynamicLayer()
    steps = [5, *[1] * (MIN_SPARE + 3), 7]  # past the first buffer's spare capacity
    for i, n in enumerate(steps):
        k, v = _kv(n, i)
        got, want = ours.update(k, v), theirs.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    grown = ours._buffers[0]
    assert grown.shape[-2] > sum(steps[:2]) + MIN_SPARE  # it regrew once it was full
    ours.crop(-4)
    theirs.crop(-4)
    k, v = _kv(2, 99)
    got, want = ours.update(k, v), theirs.update(k, v)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert ours._buffers[0] is not grown  # the cropped tensors started a new buffer


def test_decoding_writes_into_the_buffer_without_copying_it():
    layer = AppendLayer()
    layer.update(*_kv(10, 0))
    buffer = layer._buffers[0]
    for i in range(5):
        keys, _ = layer.update(*_kv(1, i + 1))
        assert keys.data_ptr() == buffer.data_ptr()  # a view of the same storage


def test_prefilled_cache_holds_the_given_layers():
    layers = [_kv(6, 0), _kv(6, 1)]
    cache = append_cache(layers)
    assert cache.get_seq_length() == 6 and all(type(layer) is AppendLayer for layer in cache.layers)
    assert torch.equal(cache.layers[1].keys, layers[1][0])


def test_sliding_window_models_keep_transformers_cache():
    assert not full_attention_only(MistralConfig(sliding_window=4, num_hidden_layers=2))
    model, _ = tiny_qwen3()
    assert full_attention_only(model.config)


def test_greedy_turns_are_the_same_with_and_without_it():
    """The backend's generation, prefix reuse on, with the appending cache and with transformers'
    DynamicCache: the same completions over a 3-turn conversation (reuse feeds each turn's kept
    keys back through the cache)."""
    model, tok = tiny_qwen3()
    sampling = SamplingParams(temperature=0.0, max_tokens=12)

    async def turns(chat: TransformersChatModel) -> list[str]:
        messages = [{"role": "user", "content": "Where was Ilsa Moro born?"}]
        out = []
        for turn in range(3):
            result = await chat.chat(messages, sampling=sampling)
            out.append(result.message.get("content"))
            messages += [result.message, {"role": "user", "content": f"Turn {turn}: say more."}]
        return out

    results = []
    for append in (True, False):
        chat = TransformersChatModel(model, tok, max_batch_size=1)
        chat._append_cache = append
        results.append(asyncio.run(turns(chat)))
        assert chat.prefix_stats.reused_tokens > 0
        chat.close()
    assert results[0] == results[1]


def test_an_empty_append_cache_is_what_generate_starts_from():
    model, tok = tiny_qwen3()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        ours = model.generate(
            input_ids=ids, past_key_values=append_cache(), max_new_tokens=6, do_sample=False
        )
        theirs = model.generate(
            input_ids=ids, past_key_values=DynamicCache(), max_new_tokens=6, do_sample=False
        )
    assert torch.equal(ours, theirs)
