"""Issue 41, point 3: a request the server refuses is the episode's own outcome, not an outage.

Real servers on 127.0.0.1: the chat endpoint answers one question's requests with a 400
`context_length_exceeded`, the retrieval server answers a 5 MB document id with its 413. Each is
recorded once and never retried, within the call or across runs; an over-long document id from
the model gets a correction that does not echo it, and never reaches the server.
"""

from __future__ import annotations

import json

import pytest
from fault_helpers import Endpoints, RetrievalServer, error_lines, lines, run_recipe, write_collect_config

from executor_sft.agents.executor import run_executor
from executor_sft.agents.settings import ExecutorSettings
from executor_sft.agents.tools import MAX_DOC_ID_CHARS, OPEN_DOCUMENT_TOOL_NAME
from executor_sft.llm.base import ChatResult
from executor_sft.retrieval import RemoteRetriever, RetrievalError, RetrievalRefused
from executor_sft.schema import TokenUsage
from tests.support.recipes import stderr_tail

pytestmark = pytest.mark.faults
N = 4
CONTEXT_LENGTH = {
    "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
    "type": "invalid_request_error",
    "code": "context_length_exceeded",
}


@pytest.fixture
def retrieval(world_bm25):
    server = RetrievalServer(world_bm25).start()
    yield server
    server.stop()


def test_a_400_for_one_episode_is_stored_once_and_never_retried(world, world_dir, retrieval, tmp_path):
    first_question = json.loads((world_dir / "questions.jsonl").open().readline())
    with Endpoints(world) as endpoints:
        endpoints.control.refuse[first_question["question"]] = (400, CONTEXT_LENGTH)
        retriever = {"url": retrieval.url, "k": 3, "timeout_s": 5.0, "max_retries": 1}
        config = write_collect_config(
            tmp_path / "cfg.yaml", world_dir, endpoints.models(), retriever, limit=N
        )
        first = run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)
        assert first.returncode == 0, stderr_tail(first.stderr)
        assert error_lines(first.stderr) == [] and "Traceback" not in first.stderr
        episodes = {e["question"]["id"]: e for e in lines(tmp_path / "out" / "rollouts.jsonl")}
        assert len(episodes) == N
        refused = episodes.pop(first_question["id"])
        assert refused["stop_reason"] == "error" and "context_length_exceeded" in refused["error"]
        assert "HTTP 400" in refused["error"]
        assert [e["stop_reason"] for e in episodes.values() if e["stop_reason"] == "error"] == []
        assert endpoints.control.served["backbone:400"] == 1  # not retried within the call
        assert lines(tmp_path / "out" / "rollouts.attempts.jsonl") == []

        again = run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)
        assert again.returncode == 0, stderr_tail(again.stderr)
        assert f"wrote 0 episodes to {tmp_path / 'out' / 'rollouts.jsonl'}" in again.stdout
        assert endpoints.control.served["backbone:400"] == 1  # nor across runs


async def test_a_413_from_the_retrieval_server_is_refused_once(retrieval):
    remote = RemoteRetriever(retrieval.url, timeout=5.0, max_retries=3, backoff_s=0.01)
    with pytest.raises(RetrievalRefused, match="413") as info:
        await remote.adocuments(["x" * (5 << 20)])
    assert not isinstance(info.value, RetrievalError)  # not an outage: the episode is not re-run
    assert retrieval.documents_requests == 1
    remote.close()


class OpensAHugeId:
    """Opens a document whose id is 1 MB on its first turn, then reports."""

    name = "huge-id"

    async def chat(self, messages, tools=None, sampling=None):
        if any(m.get("role") == "tool" for m in messages):
            message = {"role": "assistant", "content": "<answer>unknown</answer>\n<evidence>none</evidence>"}
        else:
            arguments = json.dumps({"doc_id": "d" * (1 << 20)})
            call = {
                "id": "call_0",
                "type": "function",
                "function": {"name": OPEN_DOCUMENT_TOOL_NAME, "arguments": arguments},
            }
            message = {"role": "assistant", "content": "", "tool_calls": [call]}
        return ChatResult(message, TokenUsage(prompt_tokens=1, completion_tokens=1), 0.0, self.name)


async def test_an_over_long_document_id_gets_a_correction_not_an_echo(retrieval):
    remote = RemoteRetriever(retrieval.url, timeout=5.0, max_retries=0)
    settings = ExecutorSettings(tools=("search", OPEN_DOCUMENT_TOOL_NAME))
    run = await run_executor(OpensAHugeId(), remote, "Who directed the film Zothroukund?", settings)
    remote.close()
    (answer,) = [m for m in run.messages if m["role"] == "tool"]
    assert len(answer["content"]) < 1000, len(answer["content"])
    assert f"1,048,576 characters long; keep it under {MAX_DOC_ID_CHARS}" in answer["content"]
    assert run.n_corrections == 1 and run.finish == "report"
    assert retrieval.documents_requests == 0
