"""A reward of the user's own, from docs/architecture.md "A reward", in a real GRPO run.

The docs' example is saved as the user's module `my_rewards.py`, the docs' YAML names it by its
import path next to the built-in `clp_em` with weights, and two GRPO steps run on CPU with the
scripted tiny Qwen3 (`post_training`). Rows 0 and 1 of each group quote the passage their search
returned in the report's evidence, row 2 does not, row 3 never searches.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from forkserver import run_script
from post_training import NUM_GENERATIONS, ROOT, SUB_QUERIES, Script, install_script, load_recipe

from executor_sft.grpo import build_grpo_trainer, clp_reward, to_dataset
from executor_sft.grpo.data import build_prompt
from tests.support.docs import doc_block, write_doc_module
from tests.support.recipes import stderr_tail

CPU_RUN = """
retriever: {{k: 1}}
max_searches: 1
model_name_or_path: {model}
output_dir: {out}
max_steps: 2
per_device_train_batch_size: {n}
num_generations: {n}
max_completion_length: 1024
learning_rate: 1.0e-4
beta: 0.0
logging_steps: 1
save_strategy: "no"
report_to: none
bf16: false
use_cpu: true
seed: 0
chat_template_kwargs: {{enable_thinking: false}}
dataloader_num_workers: 0
"""


def quote_quote_plain(row: int, reference: str, tool_response: str) -> str:
    """Right, wrong, right answers; the first two quote 8 words of the passage, the third does not."""
    answer = reference if row % 2 == 0 else "not the answer"
    passage = tool_response.splitlines()[0].split(") ", 1)[1]  # "Doc 1 (Title: T) text"
    evidence = " ".join(passage.split()[:8]) if row < 2 else "From the passages."
    return f"<answer>{answer}</answer>\n<evidence>{evidence}</evidence>"


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    write_doc_module("architecture.md", "A reward", tmp_path, "my_rewards")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_rewards", None)


@pytest.mark.slow
def test_docs_reward_weighted_next_to_clp_in_a_real_run(
    user_module, tiny_checkpoint, minibench_bm25, tmp_path
):
    config = tmp_path / "my_grpo.yaml"
    config.write_text(
        doc_block("architecture.md", "A reward", lang="yaml")
        + CPU_RUN.format(model=tiny_checkpoint, out=tmp_path / "out", n=NUM_GENERATIONS),
        encoding="utf-8",
    )
    script_args, training_args, model_args = load_recipe("grpo_executor").parse_args(
        ["--config", str(config)]
    )
    assert script_args.reward_funcs == ["clp_em", "my_rewards:QuotesPassage"]
    assert training_args.reward_weights == [1.0, 0.5]
    system = "You answer with the search tool. 1 passage per search, at most 1 search."
    rows = [{"prompt": build_prompt(q, system), "reference": [a], "sub_query": q} for q, a in SUB_QUERIES]
    trainer = build_grpo_trainer(
        script_args, training_args, model_args, train_dataset=to_dataset(rows), retriever=minibench_bm25
    )
    clp, quotes = trainer.reward_funcs
    assert (type(quotes).__module__, quotes.min_words, clp.__name__) == ("my_rewards", 5, "clp_em")
    script = Script(trainer.processing_class, quote_quote_plain)
    install_script(trainer.model, script)

    trainer.train()

    assert trainer.state.global_step == 2 and len(script.second_turns) == 2 * (NUM_GENERATIONS - 1)
    assert quotes.calls == 2  # once per generation batch
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2
    clp_mean = 2 * clp_reward(1.0, 1) / NUM_GENERATIONS  # right, wrong, right, no search
    quote_mean = 2 / NUM_GENERATIONS  # quote, quote, no quote, no search
    for h in logs:
        assert h["rewards/clp_em/mean"] == pytest.approx(clp_mean, abs=1e-4)
        assert h["rewards/quotes_passage/mean"] == pytest.approx(quote_mean, abs=1e-4)
        assert h["reward"] == pytest.approx(1.0 * clp_mean + 0.5 * quote_mean, abs=1e-4)


def run_grpo_recipe(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return run_script(
        [
            sys.executable,
            "recipes/grpo_executor.py",
            "--config",
            "recipes/configs/grpo_qwen3_1.7b.yaml",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--reward_funcs", "clp_em", "clp_emm"],
            "unknown reward 'clp_emm': did you mean 'clp_em'?",
        ),
        (
            ["--reward_funcs", "clp_em", "no_such_module:Reward", "--reward_weights", "1", "1"],
            "reward 'no_such_module:Reward': cannot import module 'no_such_module'",
        ),
        (
            ["--reward_weights", "1.0", "0.5", "0.2"],
            "reward_weights: 3 weight(s) for 2 reward(s) ['outcome', 'clp_em_grounded']",
        ),
    ],
    ids=["unknown-name", "unknown-path", "weights-mismatch"],
)
def test_bad_reward_is_one_line_before_any_model_loads(args, message, tmp_path):
    # Neither the model nor the data exist: the error must come before either is read.
    proc = run_grpo_recipe(
        "--model_name_or_path", str(tmp_path / "no-model"),
        "--dataset", str(tmp_path / "no.jsonl"),
        "--bf16", "false", "--use_vllm", "false", "--use_cpu", "true",
        *args,
    )  # fmt: skip
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], stderr_tail(proc.stderr)
