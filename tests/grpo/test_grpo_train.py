"""A real 2-step GRPO run on CPU: tiny random Qwen3, BM25 over minibench, multi-turn search.

The model emits scripted turns (`post_training`: a `LogitsProcessor` on the model's own
`generate`; one rollout per group is left free). The batch the trainer computes the loss on is
captured in `compute_loss` and its loss mask checked token by token.
"""

from __future__ import annotations

import pytest
import torch
from post_training import NUM_GENERATIONS, SUB_QUERIES, Script, install_script

from executor_sft.grpo import GRPOScriptArguments, build_grpo_trainer, clp_reward, to_dataset
from executor_sft.grpo.data import build_prompt

pytestmark = pytest.mark.slow


def test_two_step_grpo_masks_tool_output(tiny_checkpoint, minibench_bm25, tmp_path):
    from trl import GRPOConfig, GRPOTrainer, ModelConfig

    captured: list[dict[str, torch.Tensor]] = []

    class CapturingTrainer(GRPOTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            captured.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    system = (
        "You answer with the search tool. {top_k} passage(s) per search, at most {max_searches} searches."
    )
    rows = [
        {"prompt": build_prompt(q, system.format(top_k=1, max_searches=1)), "reference": [a], "sub_query": q}
        for q, a in SUB_QUERIES
    ]
    script_args = GRPOScriptArguments(retriever={"k": 1}, max_searches=1)  # reward_funcs: [clp_em]
    training_args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=1024,
        learning_rate=1e-4,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        use_cpu=True,
        seed=0,
        chat_template_kwargs={"enable_thinking": False},
        dataloader_num_workers=0,
    )
    model_args = ModelConfig(model_name_or_path=str(tiny_checkpoint))
    trainer = build_grpo_trainer(
        script_args,
        training_args,
        model_args,
        train_dataset=to_dataset(rows),
        retriever=minibench_bm25,
        trainer_cls=CapturingTrainer,
    )
    assert trainer.max_tool_calling_iterations == 1  # defaulted from max_searches
    tok = trainer.processing_class
    script = Script(tok)
    install_script(trainer.model, script)

    trainer.train()

    assert trainer.state.global_step == 2
    assert len(captured) == 2 and script.first_turns and script.second_turns
    response_open = tok.convert_tokens_to_ids("<tool_response>")
    response_close = tok.convert_tokens_to_ids("</tool_response>")
    checked_tool_rows = 0
    for batch in captured:
        ids, cmask, tmask = batch["completion_ids"], batch["completion_mask"], batch["tool_mask"]
        loss_mask = cmask * tmask
        for row in range(ids.shape[0]):
            n = int(cmask[row].sum())
            seq, mask = ids[row, :n].tolist(), loss_mask[row, :n].tolist()
            assert loss_mask[row, n:].sum() == 0  # padding is never trained
            first = next((s for s in script.first_turns if seq[: len(s)] == s), None)
            if first is None or n == len(first):
                # the free rollout, or a search whose result did not fit max_completion_length
                assert mask == [1] * n
                assert first is not None or response_open not in seq
                continue
            checked_tool_rows += 1
            last = next(s for s in script.second_turns if seq[n - len(s) :] == s)
            # The model's own tokens (search call, report, their end-of-turn tokens) are trained ...
            assert mask[: len(first)] == [1] * len(first)
            assert mask[n - len(last) :] == [1] * len(last)
            # ... every token in between (the tool turn the trainer inserted) is not.
            middle = mask[len(first) : n - len(last)]
            assert middle and set(middle) == {0}
            inserted = seq[len(first) : n - len(last)]
            assert response_open in inserted and response_close in inserted
            passages = tok.decode(inserted)
            assert "Doc 1 (Title:" in passages  # real BM25 passages from minibench
    assert checked_tool_rows == 2 * (NUM_GENERATIONS - 1)

    # Rewards: per group, 2 right reports and 1 wrong after one search each, and the free rollout.
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2
    for h in logs:
        assert h["reward"] == pytest.approx(2 * clp_reward(1.0, 1) / NUM_GENERATIONS, abs=1e-3)
        assert h["rewards/clp_em/mean"] == pytest.approx(h["reward"])
        assert h["executor/tool_calls"] == pytest.approx(0.75)
        assert h["executor/correct"] == pytest.approx(0.5)
        assert h["executor/format_ok"] == pytest.approx(0.75)
        assert h["tools/call_frequency"] == pytest.approx(0.75)
