"""The edited-prompt probe's edit: the same turn-2 prompt with the first results flipped.

A student that reads its first results changes its decision when only the passages change; one that
recalls each sub-query's decision does not. `edit_first_results` makes that one change: where the
first results miss the gold passage it puts the gold passage first; where they hold it, it swaps it
for a same-worded namesake passage (the decoupled world writes namesakes in the core template, so the
swap leaves the wording alone and changes only the attribute).
"""

from __future__ import annotations


def edit_first_results(world, messages: list[dict], gold_id: str) -> tuple[str, list[dict]] | None:
    """(side, edited copy) of a turn-2 prompt: side `miss` (the first results lack the gold passage)
    puts it in place of Doc 1; side `hit` swaps it for a same-worded distractor not shown. None for a
    hit with no such distractor."""
    gold = world.by_id[gold_id]
    tool = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    lines = messages[tool]["content"].split("\n")
    shown = [world.entity_of_passage("", line.split(") ", 1)[-1]) for line in lines]
    shown_ids = {e.id for e in shown if e is not None}
    if gold.id in shown_ids:
        side, at = "hit", next(i for i, e in enumerate(shown) if e is not None and e.id == gold.id)
        same = [
            e
            for e in world.entities
            if e.type == "person"
            and e.kind == "namesake"
            and e.id not in shown_ids
            and (e.name == gold.name or e.extra.get("twin_of") == gold.id)
        ]
        if not same:
            return None
        new = same[0]
    else:
        side, at, new = "miss", 0, gold
    lines[at] = f"Doc {at + 1} (Title: {new.name}) {world.passage_text(new)}"
    edited = [dict(m) for m in messages]
    edited[tool]["content"] = "\n".join(lines)
    return side, edited


__all__ = ["edit_first_results"]
