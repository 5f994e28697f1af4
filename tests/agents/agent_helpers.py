"""Shared pieces for the agent tests: a tiny in-memory retriever and request-driven policies."""

from __future__ import annotations

import re

from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.schema import Question
from tests.support.doubles import assistant, tool_call

PASSAGES = [
    ("p-velmora", "Velmora", "Velmora is a river town founded by Ada Krell in 1821."),
    ("p-krell", "Ada Krell", "Ada Krell was born in Tarsin, a port city on the northern coast."),
    ("p-tarsin", "Tarsin", "Tarsin is the capital of the province of Eldmark."),
    ("p-eldmark", "Eldmark", "Eldmark is a cold province famous for its salt mines."),
    ("p-orrin", "Orrin Vale", "Orrin Vale is a painter who never visited Velmora."),
]
PASSAGE_TEXTS = [text for _, _, text in PASSAGES]

QUESTION = Question(
    id="q-velmora",
    question="In which province was the founder of Velmora born?",
    golden_answers=["Eldmark"],
    dataset="toy",
)


class ToyRetriever(Retriever):
    """Word-overlap search over PASSAGES (enough to make answers depend on the query)."""

    index_id = "toy"

    def __init__(self):
        self.queries: list[str] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        out = []
        for query in queries:
            self.queries.append(query)
            words = set(re.findall(r"\w+", query.lower()))
            scored = []
            for doc_id, title, text in PASSAGES:
                overlap = len(words & set(re.findall(r"\w+", f"{title} {text}".lower())))
                overlap += 2 * len(words & set(re.findall(r"\w+", title.lower())))  # title match counts more
                if overlap:
                    scored.append(Hit(doc_id=doc_id, title=title, text=text, score=float(overlap)))
            scored.sort(key=lambda h: (-h.score, h.doc_id))
            out.append(scored[:k])
        return out


def report(answer: str, evidence: str = "from the passages") -> str:
    return f"<answer>{answer}</answer><evidence>{evidence}</evidence>"


def search_call(query: str) -> dict:
    return assistant(tool_calls=[tool_call("search", {"query": query})])


def top_title(messages: list[dict]) -> str | None:
    """Title of Doc 1 in the latest tool result, if any."""
    for message in reversed(messages):
        if message["role"] in ("tool", "user") and "Doc 1 (Title: " in (message.get("content") or ""):
            return re.search(r"Doc 1 \(Title: ([^)]*)\)", message["content"]).group(1)
    return None


def searcher(n_searches: int = 1, prefix: str = ""):
    """Policy: search the sub-query (n times, if the tool is offered), then report Doc 1's title."""

    def policy(messages, tools):
        done = sum(m["role"] == "tool" for m in messages)
        if tools and done < n_searches:
            return search_call(messages[1]["content"])
        return report(f"{prefix}{top_title(messages) or 'unknown'}", "Doc 1 says so")

    return policy
