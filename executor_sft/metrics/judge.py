"""LLM judge: is a predicted answer correct given the gold answers? (True / False / None).

Verdict parsing (`parse_verdict`): reasoning and markdown are removed, then the reply must
*start* with a verdict word, optionally after a label like "Verdict:" or "Answer:".
True words: true, yes, correct. False words: false, no, incorrect, wrong. Anything else
(including a reply that starts with neither, e.g. "I think it's true") is None, because
guessing from free text would turn judge noise into labels.

An empty or missing prediction is False without a model call. Verdicts are cached by
(question, gold answers, prediction) in memory and optionally in a JSONL file. A transport
failure (`ChatError`) is not a verdict: it raises (to every caller waiting on the same
verdict) and is not cached, so the episode fails and a rerun retries it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import logging
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from executor_sft.episode_runner import note_model_call
from executor_sft.files import iter_records
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.llm.parsing import strip_think

logger = logging.getLogger(__name__)

_TRUE = {"true", "yes", "correct"}
_FALSE = {"false", "no", "incorrect", "wrong"}
_LABEL = re.compile(
    r"^(?:final\s+)?(?:verdict|answer|judgement|judgment|result|output)\s*[:=\-]\s*", re.IGNORECASE
)
_DECOR = re.compile(r"[*_`#>\"'“”‘’\[\]()]")


@functools.cache
def default_judge_prompt() -> str:
    """The packaged judge prompt (a config may replace it through `Prompts.judge`)."""
    return resources.files("executor_sft.metrics").joinpath("prompts", "judge.md").read_text("utf-8").strip()


def parse_verdict(text: str | None) -> bool | None:
    """Read a judge reply as True/False, or None when it is not a clear verdict."""
    text = strip_think(text)
    if not text:
        return None
    text = _DECOR.sub(" ", text).strip()
    text = _LABEL.sub("", text).strip()
    match = re.match(r"[A-Za-z]+", text)
    if not match:
        return None
    word = match.group(0).lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    return None


def judge_key(question: str, golden_answers: Sequence[str], prediction: str, judge: str = "") -> str:
    """The cache key of one verdict; `judge` names who gave it (model and prompt), so a cache kept
    across a change of judge model or prompt is not read as that judge's verdicts."""
    payload = json.dumps([judge, question, list(golden_answers), prediction], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class LLMJudge:
    """Judge predictions with a chat model at temperature 0, caching every verdict by content."""

    def __init__(
        self,
        model: ChatModel,
        *,
        prompt: str | None = None,
        sampling: SamplingParams | None = None,
        cache_path: str | Path | None = None,
    ):
        self.model = model
        self.prompt = prompt if prompt is not None else default_judge_prompt()
        base = sampling or getattr(model, "sampling", None) or SamplingParams(max_tokens=16)
        self.sampling = dataclasses.replace(base, temperature=0.0)
        self.cache: dict[str, bool | None] = {}
        self.cache_path = Path(cache_path) if cache_path else None
        self._inflight: dict[str, asyncio.Future] = {}
        self.calls = 0
        self.identity = json.dumps([getattr(model, "name", "unknown"), self.prompt], ensure_ascii=False)
        if self.cache_path and self.cache_path.exists():
            self._load()

    def _load(self) -> None:
        assert self.cache_path is not None
        for i, row in iter_records(self.cache_path, skip_bad_lines=True):
            try:
                self.cache[row["key"]] = row["verdict"]
            except (KeyError, TypeError):
                logger.warning("%s:%d: skipping an unreadable judge cache line", self.cache_path, i)

    def _store(self, key: str, question: str, golden: list[str], prediction: str, verdict, raw: str) -> None:
        self.cache[key] = verdict
        if self.cache_path is None:
            return
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        row = {"key": key, "question": question, "golden_answers": golden, "prediction": prediction}
        row |= {"verdict": verdict, "raw": raw, "model": getattr(self.model, "name", "unknown")}
        with self.cache_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    def render(self, question: str, golden_answers: Sequence[str], prediction: str) -> str:
        gold = "; ".join(golden_answers)
        return (
            self.prompt.replace("{question}", question)
            .replace("{golden_answers}", gold)
            .replace("{prediction}", prediction)
        )

    async def judge(
        self, question: str, golden_answers: Sequence[str], prediction: str | None
    ) -> bool | None:
        if prediction is None or not prediction.strip():
            return False
        golden = [str(g) for g in golden_answers]
        key = judge_key(question, golden, prediction, self.identity)
        if key in self.cache:
            return self.cache[key]
        if key in self._inflight:
            return await self._inflight[key]
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            messages = [{"role": "user", "content": self.render(question, golden, prediction)}]
            self.calls += 1
            result = await self.model.chat(messages, tools=None, sampling=self.sampling)
            note_model_call(result.usage)
            raw = result.message.get("content") or ""
            verdict = parse_verdict(raw)
            self._store(key, question, golden, prediction, verdict, raw)
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # marked retrieved: with no one waiting, nothing is logged at exit
            raise
        except BaseException:
            future.cancel()
            raise
        else:
            future.set_result(verdict)
        finally:
            del self._inflight[key]
        return verdict
