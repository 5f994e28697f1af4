"""Issue 41, point 1: a retrieval timeout is infrastructure, never a finished result.

A real retrieval server on 127.0.0.1 holds `POST /documents` past the client's timeout while
`recipes/collect_rollouts.py` runs as a subprocess, and the teacher opens a document on its
first turn. One slow answer is retried within the call; answers slow on every attempt leave
the episodes unstored, their attempts logged, and the plain re-run finishes them.
"""

from __future__ import annotations

import json

import pytest
from fault_helpers import (
    Endpoints,
    RetrievalServer,
    assert_complete,
    error_lines,
    lines,
    run_recipe,
    write_collect_config,
)

from executor_sft.agents.tools import OPEN_DOCUMENT_TOOL_NAME
from executor_sft.llm.base import ChatResult
from executor_sft.schema import TokenUsage
from executor_sft.synthetic.scripted_executor import ScriptedTeacherExecutor
from tests.support.recipes import stderr_tail

pytestmark = pytest.mark.faults
N = 4
TIMEOUT_S = 1.0


class OpensADocumentFirst:
    """The world's scripted teacher, except that its first turn opens a document."""

    def __init__(self, world):
        self.inner = ScriptedTeacherExecutor(world)
        self.name = self.inner.name

    async def chat(self, messages, tools=None, sampling=None):
        offered = any((t.get("function") or {}).get("name") == OPEN_DOCUMENT_TOOL_NAME for t in tools or [])
        if offered and not any(m.get("role") == "tool" for m in messages):
            call = {
                "id": "call_open",
                "type": "function",
                "function": {"name": OPEN_DOCUMENT_TOOL_NAME, "arguments": json.dumps({"doc_id": "0"})},
            }
            message = {"role": "assistant", "content": "", "tool_calls": [call]}
            return ChatResult(message, TokenUsage(prompt_tokens=1, completion_tokens=1), 0.0, self.name)
        return await self.inner.chat(messages, tools, sampling)


@pytest.fixture
def served(world, world_bm25, world_dir, tmp_path):
    retrieval = RetrievalServer(world_bm25).start()
    try:
        with Endpoints(world, replace={"teacher": OpensADocumentFirst(world)}) as endpoints:
            retriever = {"url": retrieval.url, "k": 3, "timeout_s": TIMEOUT_S, "max_retries": 1}
            config = write_collect_config(
                tmp_path / "cfg.yaml",
                world_dir,
                endpoints.models(),
                retriever,
                limit=N,
                pipeline={"tools": ["search", OPEN_DOCUMENT_TOOL_NAME]},
            )
            yield retrieval, config
    finally:
        retrieval.stop()


def _collect(config):
    return run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)


def test_one_slow_documents_answer_is_retried_within_the_call(served, tmp_path):
    retrieval, config = served
    retrieval.documents_delays = [3 * TIMEOUT_S]  # the first lookup times out, its retry does not
    proc = _collect(config)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    episodes = assert_complete(tmp_path / "out" / "rollouts.jsonl", N)  # no run finished "error"
    opened = [r for e in episodes for r in e["runs"] if r["role"] == "teacher"]
    assert opened and all(r["messages"][3]["tool_call_id"] == "call_open" for r in opened)
    assert retrieval.documents_requests == len(opened) + 1
    assert lines(tmp_path / "out" / "rollouts.attempts.jsonl") == []


@pytest.mark.slow
def test_documents_slow_on_every_attempt_leave_the_episodes_to_a_resume(served, tmp_path):
    retrieval, config = served
    retrieval.documents_delays = [3 * TIMEOUT_S] * 1000
    first = _collect(config)
    rollouts = tmp_path / "out" / "rollouts.jsonl"
    assert first.returncode == 1, stderr_tail(first.stderr)
    (line,) = error_lines(first.stderr)
    assert f"{N - len(lines(rollouts))} episodes unfinished" in line and "ReadTimeout" in line
    assert "run the same command again to resume" in line
    assert "Traceback" not in first.stderr
    assert_complete(rollouts, len(lines(rollouts)))  # nothing stored as a finished error
    attempts = lines(tmp_path / "out" / "rollouts.attempts.jsonl")
    assert attempts and all("/documents failed after 2 attempts: ReadTimeout" in a["error"] for a in attempts)

    retrieval.documents_delays.clear()
    second = _collect(config)
    assert second.returncode == 0, stderr_tail(second.stderr)
    assert error_lines(second.stderr) == []
    assert_complete(rollouts, N)
