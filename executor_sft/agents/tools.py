"""The executor's one tool, in OpenAI function-calling form (also written into SFT rows)."""

from __future__ import annotations

SEARCH_TOOL_NAME = "search"

SEARCH_TOOL: dict = {
    "type": "function",
    "function": {
        "name": SEARCH_TOOL_NAME,
        "description": (
            "Search the knowledge corpus. Returns the top passages as lines "
            "'Doc i (Title: T) text'. Use a short, specific query."
        ),
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "The search query."}},
            "required": ["query"],
        },
    },
}
