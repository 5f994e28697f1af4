import time

import pytest
import torch

from tests.support import tiny_qwen3


def test_tiny_qwen3_builds_fast_and_renders_tools():
    tiny_qwen3()  # warm imports
    start = time.perf_counter()
    model, tokenizer = tiny_qwen3(seed=1)
    assert time.perf_counter() - start < 1.0
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "search"}}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<tools>" in text and text.endswith("<|im_start|>assistant\n")
    ids = tokenizer("<|im_start|>user\nhi<|im_end|>")["input_ids"]
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in ids
    out = model.generate(torch.tensor([ids]), max_new_tokens=3, do_sample=False)
    assert out.shape[1] == len(ids) + 3 or tokenizer.eos_token_id in out[0].tolist()


def test_real_qwen3_tokenizer_ids(qwen3_tokenizer):
    tok = qwen3_tokenizer
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
    assert tok.convert_tokens_to_ids("<|im_start|>") == 151644
    assert tok.convert_tokens_to_ids("<tool_call>") == 151657
    assert tok.convert_tokens_to_ids("</think>") == 151668
    assert tok("Hello world 123")["input_ids"] == [9707, 1879, 220, 16, 17, 18]


@pytest.mark.slow
def test_smollm2_answers_offline(smollm2):
    model, tokenizer = smollm2
    enc = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0][enc["input_ids"].shape[1] :])
