"""The model card of a trained executor: base model, intended use and limitations, a quick
start with the executor's own prompt and tool, the outcome (final loss), the data record, the
settings that took effect (plain values, those of earlier stretches of a run resumed with changes
included), the training procedure and the licence."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor_sft.configfile import relative_paths
from executor_sft.llm.offline import OFFLINE_MODELS, is_offline
from executor_sft.sft.data import DEFAULT_SFT_DATA
from executor_sft.versions import package_version

PROJECT_LICENCE = "Apache-2.0"
BASE_LICENCES = {
    "offline:tiny-qwen3": (
        "apache-2.0",
        "random weights made by executor_sft, under the project's Apache-2.0",
    ),
    "HuggingFaceTB/SmolLM2-135M-Instruct": (
        "apache-2.0",
        "SmolLM2-135M-Instruct is released under Apache-2.0",
    ),
    "Qwen/Qwen3-": ("apache-2.0", "the Qwen3 models are released under Apache-2.0"),
}
"""Base models whose licence is known: hub id (or id prefix ending in "-") -> (card metadata id, sentence).
Offline aliases resolve through their hub id in the alias table."""
INTENDED_USE_MARK = "## Intended use and limitations"
TRAINING_RECORD_MARK = "## executor_sft training record"


def base_model_line(name: str) -> str:
    """Where the weights came from, in words a reader can follow."""
    if is_offline(name) and name in OFFLINE_MODELS:
        entry = OFFLINE_MODELS[name]
        hub = f"; the same model on the Hub: `{entry.hub_id}`" if entry.hub_id else ""
        return f"`{name}`: {entry.description}{hub}"
    if "/" in name and not name.startswith(("/", ".", "~")):
        return f"[{name}](https://huggingface.co/{name})"
    return f"`{name}` (a local checkpoint)"


def base_licence(name: str) -> tuple[str, str] | None:
    """(licence id, sentence) of a base model named by hub id or offline alias, if known."""
    for key in (name, OFFLINE_MODELS[name].hub_id if name in OFFLINE_MODELS else None):
        if not key:
            continue
        if key in BASE_LICENCES:
            return BASE_LICENCES[key]
        prefix = next((p for p in BASE_LICENCES if p.endswith("-") and key.startswith(p)), None)
        if prefix:
            return BASE_LICENCES[prefix]
    return None


def licence_section(base_model: str) -> str:
    known = base_licence(base_model)
    weights = (
        f"The weights derive from the base model and carry its licence: {known[0]} ({known[1]})."
        if known
        else "The weights derive from the base model and carry its licence: check the base model's "
        "licence before you use or share them."
    )
    return f"## Licence\n\n{weights} `executor_sft`, the code that trained them, is {PROJECT_LICENCE}."


@dataclass(frozen=True)
class TrainingStage:
    """What trained the weights, as the card names it: Hub tag, the method in a phrase, and the
    trainer in a sentence."""

    tag: str
    method: str
    trainer: str


SFT_STAGE = TrainingStage(
    tag="sft",
    method="passage-masked SFT",
    trainer="Trained with TRL's `SFTTrainer` through `executor_sft.sft.ExecutorSFTTrainer`, a subclass "
    "that receives rows already tokenised with their passage masks (TRL only pads or packs "
    "them) and never builds a KV cache in training.",
)


def card_front_matter(name: str, stage: TrainingStage = SFT_STAGE) -> str:
    base = OFFLINE_MODELS[name].hub_id if name in OFFLINE_MODELS else name
    lines = ["---", "library_name: transformers", f"tags: [executor_sft, {stage.tag}, trl, search-agent]"]
    known = base_licence(name)
    if known:
        lines.append(f"license: {known[0]}")
    if base and "/" in base and not base.startswith(("/", ".", "~")):
        lines.append(f"base_model: {base}")
    return "\n".join(lines + ["---"])


def data_reference(source: str) -> str:
    """The training data as a reader elsewhere can follow it: a path relative to the checkout or
    the working directory, a Hub dataset link, or (a file outside both) its name only."""
    path = Path(source).expanduser()
    if path.exists() or path.is_absolute() or source.startswith((".", "~")):
        shown = relative_paths(str(path.resolve()) if path.exists() else str(path))
        if Path(shown).is_absolute():
            return f"`{path.name}` (a local file)"
        return f"`{shown}`"
    return f"[{source}](https://huggingface.co/datasets/{source})"


def is_embedded_default(data_source: str) -> bool:
    """Whether the rows are the project's sample data (the scripted fictional world)."""
    path = Path(data_source).expanduser()
    return path.exists() and path.resolve() == DEFAULT_SFT_DATA.resolve()


def _steps(config: dict[str, Any]) -> str:
    if config.get("max_steps"):
        return f"{config['max_steps']} steps"
    return f"{config.get('num_train_epochs', '?')} epochs"


def intended_use(data_source: str, row_counts: dict[str, dict[str, int]], config: dict[str, Any]) -> str:
    rows = sum(row_counts["stratum"].values())
    datasets = ", ".join(sorted(row_counts["dataset"])) or "unknown datasets"
    if is_embedded_default(data_source):
        body = (
            f"A **smoke-test model**, not a useful executor: {_steps(config)} on the project's sample "
            f"data ({rows} rows from `executor_sft.synthetic`, a fictional world whose trajectories "
            "were written by scripted policies). It shows that the training path works end to end; "
            "it knows nothing true about the real world, and its answers must not be used. Train "
            "on rows filtered from real collections for a model worth evaluating (docs/sft.md)."
        )
    else:
        body = (
            "Intended use: the executor of a role-factorised search agent. It answers one "
            "self-contained sub-query by calling the `search` tool below and replies "
            "`<answer>...</answer><evidence>...</evidence>` for a backbone to read.\n\n"
            f"Limitations: trained for {_steps(config)} on {rows} filtered rows ({datasets}), with "
            "the system prompt and tool shown in the quick start and the retriever's passage "
            "format (`Doc i (Title: T) text`); with another prompt, tool or corpus it has not been "
            "tested. Its answers are only as good as the passages it retrieves, and it inherits "
            "the base model's biases. Evaluate it on your own questions before relying on it "
            "(docs/eval.md)."
        )
    return f"{INTENDED_USE_MARK}\n\n{body}"


def _four_digits(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def training_outcome(log_history: list[dict[str, Any]] | None) -> str | None:
    """The final loss from the trainer's log: the last logged step's loss and the run's mean."""
    history = log_history or []
    last = next((h for h in reversed(history) if "loss" in h), None)
    mean = next((h["train_loss"] for h in reversed(history) if "train_loss" in h), None)
    if last is None and mean is None:
        return None
    lines = ["## Training outcome", ""]
    if last is not None:
        lines.append(f"- final loss (step {last.get('step', '?')}): {_four_digits(float(last['loss']))}")
    if mean is not None:
        lines.append(f"- mean training loss over the run (`train_loss`): {_four_digits(float(mean))}")
    return "\n".join(lines)


def training_procedure(stage: TrainingStage = SFT_STAGE) -> str:
    """TRL and the libraries that trained the model, with their versions."""
    versions = [
        f"{name} {package_version(dist) or 'unknown'}"
        for name, dist in (
            ("TRL", "trl"),
            ("Transformers", "transformers"),
            ("PyTorch", "torch"),
            ("Datasets", "datasets"),
            ("executor_sft", "executor-sft"),
        )
    ]
    return f"## Training procedure\n\n{stage.trainer}\n\nFramework versions: {', '.join(versions)}."


def quick_start(model_dir: str, system_prompt: str, tools: list[dict[str, Any]], sub_query: str) -> str:
    return f"""## Quick start

The executor answers one sub-query with its own system prompt and the `search` tool it was
trained with; feed each tool call's passages back as a `tool` message until it reports
`<answer>...</answer><evidence>...</evidence>`.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{model_dir}")
model = AutoModelForCausalLM.from_pretrained("{model_dir}")
system_prompt = {system_prompt!r}
tools = {json.dumps(tools)}
messages = [
    {{"role": "system", "content": system_prompt}},
    {{"role": "user", "content": {sub_query!r}}},
]
inputs = tokenizer.apply_chat_template(
    messages, tools=tools, add_generation_prompt=True, enable_thinking=False,
    return_tensors="pt", return_dict=True,
)
out = model.generate(**inputs, max_new_tokens=128, do_sample=False)
print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=False))
```

Or run it inside the library: `executor_sft.agents.run_executor`, or serve it with
`python -m executor_sft.llm.server --model {model_dir}` and point a collection or
evaluation config at that endpoint.
"""


def _table(counts: dict[str, int], key: str) -> str:
    lines = [f"| {key} | rows |", "| --- | ---: |"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    return "\n".join(lines)


def executor_card_section(
    *,
    data_source: str,
    row_counts: dict[str, dict[str, int]],
    composition_report: dict[str, Any] | None,
    length_summary: dict[str, Any],
    config: dict[str, Any],
    earlier: list[dict[str, Any]] = (),
    fidelity_summary: dict[str, Any] | None = None,
) -> str:
    """The executor section; `earlier` holds the configurations a resume with changes replaced."""
    parts = [
        intended_use(data_source, row_counts, config),
        TRAINING_RECORD_MARK,
        f"Data: {data_reference(data_source)} — {sum(row_counts['stratum'].values())} rows used for training.",
        "Loss: assistant tokens only (tool calls, final report, `<|im_end|>`); system, sub-query and "
        "retrieved passages are masked. The tokenizer is saved with its inference chat template.",
        "### Rows per stratum",
        _table(row_counts["stratum"], "stratum"),
        "### Rows per dataset",
        _table(row_counts["dataset"], "dataset"),
        "### Long trajectories",
        "```json\n" + json.dumps(length_summary, indent=2) + "\n```",
    ]
    if fidelity_summary is not None:
        parts += [
            "### Token fidelity (re-rendered assistant turns vs the sampled ids)",
            "```json\n" + json.dumps(fidelity_summary, indent=2) + "\n```",
        ]
    if composition_report is not None:
        parts += [
            "### Composition report (from the filter)",
            "```json\n" + json.dumps(composition_report, indent=2, default=str)[:20000] + "\n```",
        ]
    heading = (
        f"### Configuration (from step {earlier[-1]['until_step'] + 1})" if earlier else "### Configuration"
    )
    parts += [heading, "```json\n" + json.dumps(config, indent=2, default=str) + "\n```"]
    for stretch in earlier:
        parts += [
            f"### Configuration until step {stretch['until_step']} (resumed with changes: "
            f"{', '.join(stretch['changed'])})",
            f"Data: `{stretch['data_source']}` ({stretch['identity']['data']['rows']} rows, "
            f"sha256 `{stretch['identity']['data']['sha256']}`).",
            "```json\n" + json.dumps(stretch["config"], indent=2, default=str) + "\n```",
        ]
    return "\n\n".join(parts) + "\n"


def prompts_card_section(
    *, data_sources: list[str], n_prompts: int, steps: int, config: dict[str, Any]
) -> str:
    """Intended use and training record of a post-training stage, which learns from prompts (the
    sub-queries it samples its own runs on), not from rows. The sources are local files, or
    `hf://` datasets."""
    shown = ", ".join(
        f"[{src[5:]}](https://huggingface.co/datasets/{src[5:]})"
        if src.startswith("hf://")
        else data_reference(src)
        if Path(src).expanduser().exists()
        else f"`{src}`"
        for src in data_sources
    )
    use = (
        "Intended use: the executor of a role-factorised search agent. It answers one "
        "self-contained sub-query by calling the tools below and replies "
        "`<answer>...</answer><evidence>...</evidence>` for a backbone to read.\n\n"
        f"Limitations: {steps} steps on runs it sampled itself from {n_prompts} prompts, with the "
        "system prompt and tools shown in the quick start and the retriever's passage format "
        "(`Doc i (Title: T) text`); with another prompt, tool or corpus it has not been tested. Its "
        "answers are only as good as the passages it retrieves, and it inherits the base model's "
        "biases. Evaluate it on your own questions before relying on it (docs/eval.md)."
    )
    return (
        "\n\n".join(
            [
                f"{INTENDED_USE_MARK}\n\n{use}",
                TRAINING_RECORD_MARK,
                f"Prompts: {shown} — {n_prompts} sub-queries.",
                "### Configuration",
                "```json\n" + json.dumps(config, indent=2, default=str) + "\n```",
            ]
        )
        + "\n"
    )


def config_record(script_args, training_args, model_args) -> dict[str, Any]:
    """The settings that took effect, as plain values."""
    world = max(1, training_args.world_size)
    warmup = training_args.warmup_steps
    length = (
        {"max_steps": training_args.max_steps}
        if training_args.max_steps > 0
        else {"num_train_epochs": training_args.num_train_epochs}
    )
    return {
        "model": model_args.model_name_or_path,
        "learning_rate": training_args.learning_rate,
        "lr_scheduler_type": getattr(
            training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type
        ),
        "warmup": f"{warmup:.0%} of the steps" if 0 < warmup < 1 else f"{int(warmup)} steps",
        **length,
        "global_batch": {
            "per_device": training_args.per_device_train_batch_size,
            "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
            "processes": world,
            "total": training_args.per_device_train_batch_size
            * training_args.gradient_accumulation_steps
            * world,
        },
        "max_length": training_args.max_length,
        "packing": training_args.packing,
        "bf16": training_args.bf16,
        "gradient_checkpointing": training_args.gradient_checkpointing,
        "attn_implementation": model_args.attn_implementation,
        "compile_layers": script_args.compile_layers,
        "gathered_loss": script_args.gathered_loss,
        "trainable_layers": script_args.trainable_layers,
        "use_liger_kernel": training_args.use_liger_kernel,
        "enable_thinking": script_args.enable_thinking,
        "overflow": script_args.overflow,
        "use_peft": model_args.use_peft,
        "lora": {"r": model_args.lora_r, "alpha": model_args.lora_alpha} if model_args.use_peft else None,
        "seed": training_args.seed,
    }


def model_card(
    *,
    title: str,
    base_model: str,
    model_dir: str,
    first_row: dict[str, Any],
    record: str,
    log_history: list[dict[str, Any]] | None = None,
    stage: TrainingStage = SFT_STAGE,
    outcome: str | None = None,
) -> str:
    """The whole README.md of a trained executor (`log_history`: the trainer state's, for the final
    loss; `outcome`: a stage's own outcome section instead).

    Absolute paths inside the checkout or the working directory are written relative."""
    messages = first_row.get("messages") or []
    system = next((m["content"] for m in messages if m.get("role") == "system"), "")
    sub_query = next((m["content"] for m in messages if m.get("role") == "user"), "")
    use, mark, rest = record.partition(TRAINING_RECORD_MARK)
    use, rest = (use, mark + rest) if mark else ("", record)
    parts = [
        card_front_matter(base_model, stage),
        f"# {title}",
        f"A search executor trained with `executor_sft` ({stage.method}) from {base_model_line(base_model)}.",
        use.strip(),
        quick_start(model_dir, system, first_row.get("tools") or [], sub_query).strip(),
        outcome or training_outcome(log_history) or "",
        rest.strip(),
        training_procedure(stage),
        licence_section(base_model),
    ]
    return relative_paths("\n\n".join(p for p in parts if p) + "\n")
