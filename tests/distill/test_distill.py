"""On-policy distillation with the search tool, on CPU: the recipe, the loss mask, the tokenizer check."""

from __future__ import annotations

import json

import pytest
import torch
from post_training import NUM_GENERATIONS, ROOT, Script, install_script, run_recipe

from executor_sft.agents.executor_text import SEARCH_BUDGET_SPENT
from executor_sft.distill import (
    DistillScriptArguments,
    ExecutorDistillationTrainer,
    TokenizerMismatchError,
    build_distill_trainer,
    check_same_tokenizer,
)
from executor_sft.grpo.data import grpo_examples_from_rollouts
from tests.support import tiny_qwen3

CONFIG = ROOT / "recipes" / "configs" / "distill_tiny.yaml"


@pytest.fixture(scope="module")
def other_vocabulary(tmp_path_factory):
    """A saved model with another vocabulary (its weights are never loaded: the tokenizers are compared first)."""
    model, tok = tiny_qwen3(vocab_size=400)
    path = tmp_path_factory.mktemp("other_vocab")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_same_tokenizer_passes_and_another_vocabulary_is_refused(tiny_teacher, other_vocabulary):
    check_same_tokenizer("offline:tiny-qwen3", str(tiny_teacher))  # SFT'd or not, one vocabulary
    with pytest.raises(
        TokenizerMismatchError, match=r"its tokenizer is not the student's .* 400 vs 502 tokens"
    ):
        check_same_tokenizer("offline:tiny-qwen3", str(other_vocabulary))


@pytest.mark.slow
def test_a_teacher_with_another_vocabulary_is_one_line_and_exit_2_before_anything_loads(
    other_vocabulary, world_index
):
    proc = run_recipe(
        "distill_executor",
        "--config", str(CONFIG),
        "--teacher_model_name_or_path", str(other_vocabulary),
        "--retriever", json.dumps({"index": str(world_index)}),
        expect=2,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: teacher_model_name_or_path '{other_vocabulary}': its tokenizer")
    assert "Traceback" not in proc.stderr and "Loading weights" not in proc.stderr


@pytest.mark.slow
def test_distill_recipe_runs_on_cpu(distilled_output, sft_output, tiny_teacher):
    out, stdout = distilled_output
    assert "distillation done: 2 steps; teacher KL" in stdout
    assert (out / "model.safetensors").exists() and (out / "tokenizer_config.json").exists()
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "tags: [executor_sft, distillation, trl, search-agent]" in card
    assert f"(on-policy distillation) from `{sft_output}`" in card and "- teacher KL " in card
    assert '"name": "search"' in card and f'"teacher_model_name_or_path": "{tiny_teacher}"' in card


@pytest.mark.slow
@pytest.mark.parametrize("max_searches", [1, 2])
def test_tool_result_tokens_carry_no_loss_on_a_real_batch(max_searches, tiny_teacher, world_index, tmp_path):
    """The student (scripted turns: search, then report) and a teacher that differs from it; the batch
    the loss is computed on is captured and its mask checked token by token. The search spends the
    budget at max_searches 1 only: then the runtime's notice follows it, masked like the passages."""
    from trl import DistillationConfig, ModelConfig

    from executor_sft.grpo import to_dataset

    captured: list[dict[str, torch.Tensor]] = []
    losses: list[float] = []

    class Capturing(ExecutorDistillationTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            captured.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            losses.append(float(loss))
            return loss

    rows = grpo_examples_from_rollouts(ROOT / "data" / "rollouts.jsonl")[:2]
    script_args = DistillScriptArguments(
        retriever={"index": str(world_index), "k": 1}, max_searches=max_searches
    )
    args = DistillationConfig(
        output_dir=str(tmp_path / "out"),
        teacher_model_name_or_path=str(tiny_teacher),
        max_steps=2,
        per_device_train_batch_size=NUM_GENERATIONS,
        max_completion_length=1024,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        seed=0,
        chat_template_kwargs={"enable_thinking": False},
    )
    trainer = build_distill_trainer(
        script_args,
        args,
        ModelConfig(model_name_or_path="offline:tiny-qwen3"),
        train_dataset=to_dataset(rows * NUM_GENERATIONS),
        trainer_cls=Capturing,
    )
    assert trainer.beta == 1.0 and trainer.max_tool_calling_iterations == max_searches  # reverse KL; budget
    tok = trainer.processing_class
    script = Script(tok, sub_queries=[(r["sub_query"], r["reference"][0]) for r in rows])
    install_script(trainer.model, script)
    trainer.train()

    assert trainer.state.global_step == 2 and len(captured) == 2
    response_open = tok.convert_tokens_to_ids("<tool_response>")
    checked = 0
    for batch in captured:
        ids, cmask, tmask = batch["completion_ids"], batch["completion_mask"], batch["tool_mask"]
        for row in range(ids.shape[0]):
            n = int(cmask[row].sum())
            seq, mask = ids[row, :n].tolist(), (cmask[row, :n] * tmask[row, :n]).tolist()
            first = next((s for s in script.first_turns if seq[: len(s)] == s), None)
            if first is None or n == len(first):
                assert mask == [1] * n  # the free rollout (or a search whose result did not fit)
                continue
            checked += 1
            last = next(s for s in script.second_turns if seq[n - len(s) :] == s)
            assert mask[: len(first)] == [1] * len(first) and mask[n - len(last) :] == [1] * len(last)
            middle = mask[len(first) : n - len(last)]
            assert middle and set(middle) == {0}  # the tool turn: passages and their wrapping
            inserted = seq[len(first) : n - len(last)]
            assert response_open in inserted and "Doc 1 (Title:" in tok.decode(inserted)
            assert (SEARCH_BUDGET_SPENT in tok.decode(inserted)) == (max_searches == 1)
    assert checked == 2 * (NUM_GENERATIONS - 1)
    logs = [h for h in trainer.state.log_history if "distill/teacher_kl" in h]
    assert len(logs) == 2
    for h, loss in zip(logs, losses, strict=True):
        assert h["distill/teacher_kl"] == pytest.approx(loss) and loss > 0  # the teacher differs
        assert h["distill/searches"] == pytest.approx(0.75) and h["distill/zero_search"] == pytest.approx(
            0.25
        )
        assert h["distill/report"] == pytest.approx(0.75)


def test_the_qwen3_config_parses():
    from post_training import load_recipe

    script, training, model = load_recipe("distill_executor").parse_args(
        [
            "--config",
            str(ROOT / "recipes" / "configs" / "distill_qwen3_1.7b.yaml"),
            "--use_vllm",
            "false",
            "--bf16",
            "false",
        ]
    )
    assert (training.beta, training.teacher_model_name_or_path, training.max_steps) == (
        1.0,
        "Qwen/Qwen3-8B",
        50,
    )
    assert training.chat_template_kwargs == {"enable_thinking": False} and model.dtype == "bfloat16"
    assert (script.rollouts, script.max_searches, script.retriever_top_k) == (["runs/rollouts.jsonl"], 2, 3)


def test_prompts_from_any_questions_file_use_the_runtime_executor_prompt():
    from executor_sft.agents.prompting import Prompts
    from executor_sft.grpo import load_prompt_dataset

    ds = load_prompt_dataset(
        DistillScriptArguments(
            questions=str(ROOT / "data" / "world" / "subqueries_train.jsonl"), max_searches=2
        )
    )
    first = json.loads((ROOT / "data" / "world" / "subqueries_train.jsonl").open().readline())
    system, user = ds[0]["prompt"]
    assert system["content"] == Prompts().render("executor_native", top_k=3, max_searches=2)
    assert (
        user == {"role": "user", "content": first["question"]}
        and ds[0]["reference"] == first["golden_answers"]
    )
