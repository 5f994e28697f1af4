"""The GRPO recipes end to end on CPU: rollouts -> grpo.jsonl -> one GRPO step from a saved checkpoint.

Uses a real BM25 index directory built by `build_index` over a slice of the minibench corpus
(written to tmp), and the reference config with only paths and CPU settings overridden.
"""

from __future__ import annotations

import itertools
import json

import pytest
from post_training import ROOT, load_recipe

from executor_sft.schema import Episode, ExecutorRun, Outcome, Question, Report
from tests.support import tiny_qwen3

pytestmark = pytest.mark.slow

CONFIG = ROOT / "recipes" / "configs" / "grpo_qwen3_1.7b.yaml"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, minibench_corpus_path):
    from executor_sft.retrieval import build_index

    root = tmp_path_factory.mktemp("grpo_recipe")
    with minibench_corpus_path.open(encoding="utf-8") as src, (root / "corpus.jsonl").open("w") as dst:
        dst.writelines(itertools.islice(src, 300))
    build_index(root / "corpus.jsonl", root / "index", bm25=True)
    model, tok = tiny_qwen3(seed=2)
    model.save_pretrained(root / "ckpt")
    tok.save_pretrained(root / "ckpt")
    runs = [
        ExecutorRun(
            run_id=f"t{i}",
            round=0,
            sub_query_index=i,
            sub_query=q,
            role="teacher",
            model="teacher",
            max_turns=3,
            max_searches=2,
            finish="report",
            report=Report(answer=a),
            outcome=Outcome(answer=a, em=1.0, f1=1.0, judge=True),
        )
        for i, (q, a) in enumerate([("Who founded the city?", "Romulus"), ("When was it founded?", "753 BC")])
    ]
    ep = Episode(episode_id="e1", question=Question(id="q1", question="Q?", golden_answers=["x"]), runs=runs)
    (root / "rollouts.jsonl").write_text(ep.to_json() + "\n", encoding="utf-8")
    return root


def test_build_grpo_data_recipe(workdir):
    report = load_recipe("build_grpo_data").main(
        [
            "--rollouts",
            str(workdir / "rollouts.jsonl"),
            "--output",
            str(workdir / "grpo.jsonl"),
            "--top_k",
            "2",
        ]
    )
    assert report.examples == 2
    rows = [json.loads(line) for line in (workdir / "grpo.jsonl").read_text().splitlines()]
    assert [r["reference"] for r in rows] == [["Romulus"], ["753 BC"]]
    assert rows[0]["prompt"][0]["role"] == "system" and "top 2 passages" in rows[0]["prompt"][0]["content"]


def test_reference_config_parses():
    recipe = load_recipe("grpo_executor")
    script, training, model = recipe.parse_args(
        ["--config", str(CONFIG), "--bf16", "false", "--use_vllm", "false"]
    )
    assert (training.num_generations, training.learning_rate, training.beta) == (8, 1e-6, 0.0)
    assert training.max_tool_calling_iterations == 2 and training.vllm_mode == "colocate"
    assert training.chat_template_kwargs == {"enable_thinking": False}
    assert (script.retriever_top_k, script.max_searches) == (3, 2)
    assert (script.reward_funcs, training.reward_weights, script.reward_kwargs) == (
        ["outcome", "clp_em_grounded"],
        [1.0, 0.5],
        {},
    )
    assert script.answerer == {"model": "Qwen/Qwen3-32B", "base_urls": ["http://127.0.0.1:8001/v1"]}
    assert model.dtype == "bfloat16" and model.use_peft is False


def test_grpo_recipe_one_step(workdir, tmp_path):
    if not (workdir / "grpo.jsonl").exists():
        test_build_grpo_data_recipe(workdir)
    recipe = load_recipe("grpo_executor")
    out = tmp_path / "out"
    trainer = recipe.main(
        [
            "--config", str(CONFIG),
            "--model_name_or_path", str(workdir / "ckpt"),
            "--dtype", "float32",
            "--attn_implementation", "eager",
            "--dataset", str(workdir / "grpo.jsonl"),
            "--retriever", json.dumps({"index": str(workdir / "index")}),
            "--output_dir", str(out),
            "--use_vllm", "false",
            "--bf16", "false",
            "--use_cpu", "true",
            "--gradient_checkpointing", "false",
            "--max_steps", "1",
            "--num_generations", "2",
            "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "1",
            "--max_completion_length", "16",
            "--warmup_steps", "0",
            "--save_strategy", "no",
            "--log_completions", "false",
            "--reward_funcs", "clp_em",  # the outcome reward needs the answerer's server
            "--reward_weights", "1.0",
            "--use_peft", "true",
            "--lora_r", "4",
            "--lora_alpha", "8",
            "--lora_target_modules", "q_proj", "v_proj",
        ]
    )  # fmt: skip
    assert trainer.state.global_step == 1
    log = next(h for h in trainer.state.log_history if "reward" in h)
    assert {"executor/tool_calls", "executor/correct", "executor/format_ok", "rewards/clp_em/mean"} <= set(
        log
    )
    # LoRA: only the adapter is saved
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
