"""The model card of a trained executor: base model, a quick start with the executor's own
prompt and tool, the data record, and the settings that took effect (plain values)."""

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
) -> str:
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
    parts += ["### Configuration", "```json\n" + json.dumps(config, indent=2, default=str) + "\n```"]
    return "\n\n".join(parts) + "\n"


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
