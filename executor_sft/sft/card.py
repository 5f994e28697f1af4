"""The model card of a trained executor: base model, a quick start with the executor's own
prompt and tool, the data record, and the settings that took effect (plain values), those of
earlier stretches of a run resumed with changes included."""

from __future__ import annotations

import json
from typing import Any

from executor_sft.llm.offline import OFFLINE_MODELS, is_offline


def base_model_line(name: str) -> str:
    """Where the weights came from, in words a reader can follow."""
    if is_offline(name) and name in OFFLINE_MODELS:
        entry = OFFLINE_MODELS[name]
        hub = f"; the same model on the Hub: `{entry.hub_id}`" if entry.hub_id else ""
        return f"`{name}`: {entry.description}{hub}"
    if "/" in name and not name.startswith(("/", ".", "~")):
        return f"[{name}](https://huggingface.co/{name})"
    return f"`{name}` (a local checkpoint)"


def card_front_matter(name: str) -> str:
    base = OFFLINE_MODELS[name].hub_id if name in OFFLINE_MODELS else name
    lines = ["---", "library_name: transformers", "tags: [executor_sft, sft, trl, search-agent]"]
    if base and "/" in base and not base.startswith(("/", ".", "~")):
        lines.append(f"base_model: {base}")
    return "\n".join(lines + ["---"])


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
) -> str:
    """The executor section; `earlier` holds the configurations a resume with changes replaced."""
    parts = [
        "## executor_sft training record",
        f"Data: `{data_source}` — {sum(row_counts['stratum'].values())} rows used for training.",
        "Loss: assistant tokens only (tool calls, final report, `<|im_end|>`); system, sub-query and "
        "retrieved passages are masked. The tokenizer is saved with its inference chat template.",
        "### Rows per stratum",
        _table(row_counts["stratum"], "stratum"),
        "### Rows per dataset",
        _table(row_counts["dataset"], "dataset"),
        "### Long trajectories",
        "```json\n" + json.dumps(length_summary, indent=2) + "\n```",
    ]
    if composition_report is not None:
        parts += [
            "### Composition report (from the filter)",
            "```json\n" + json.dumps(composition_report, indent=2, default=str)[:20000] + "\n```",
        ]
    heading = f"### Configuration (from step {earlier[-1]['until_step'] + 1})" if earlier else "### Configuration"
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
        "use_liger_kernel": training_args.use_liger_kernel,
        "enable_thinking": script_args.enable_thinking,
        "overflow": script_args.overflow,
        "use_peft": model_args.use_peft,
        "lora": {"r": model_args.lora_r, "alpha": model_args.lora_alpha} if model_args.use_peft else None,
        "seed": training_args.seed,
    }


def model_card(*, title: str, base_model: str, model_dir: str, first_row: dict[str, Any], record: str) -> str:
    """The whole README.md of a trained executor."""
    messages = first_row.get("messages") or []
    system = next((m["content"] for m in messages if m.get("role") == "system"), "")
    sub_query = next((m["content"] for m in messages if m.get("role") == "user"), "")
    return (
        "\n\n".join(
            [
                card_front_matter(base_model),
                f"# {title}",
                f"A search executor fine-tuned with `executor_sft` (passage-masked SFT) from "
                f"{base_model_line(base_model)}.",
                quick_start(model_dir, system, first_row.get("tools") or [], sub_query).strip(),
                record.strip(),
            ]
        )
        + "\n"
    )
