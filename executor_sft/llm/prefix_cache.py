"""Key/value caches kept between an executor's turns, so a turn prefills only its new tokens.

Each turn's prompt is the previous turn's prompt, its completion and the tool's answer (the
one-prefix invariant), and the runs of one evaluation share their system prompt and tool
schemas. An entry holds the per-layer keys and values of one token sequence; a request reuses
the entry with the longest common prefix of its own token ids, so a re-rendered turn that
tokenises differently from what was generated (a tool call re-serialised by the chat template,
a think block the template drops) still reuses everything before the first difference.

Memory is bounded by `max_tokens`, counted over all entries, evicted least recently used first.
An entry whose tokens start another entry's is dropped when the longer one is stored: the
longer one serves every prompt the shorter could, at least as far.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from itertools import count
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tensors arrive from the backend; importing this module needs no torch
    import torch

DEFAULT_PREFIX_CACHE_TOKENS = 32768
"""The default cap: 1.5 GB of fp32 keys and values for SmolLM2-135M, 7.5 GB for Qwen3-0.6B."""


@dataclass
class PrefixEntry:
    """The keys and values of `ids` at every layer, each `[kv_heads, len(ids), head_dim]`."""

    ids: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def tokens(self) -> int:
        return int(self.ids.numel())


@dataclass
class PrefixStats:
    """What the cache saved: prompt tokens asked for, and how many of them were not recomputed."""

    requests: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "prefilled_tokens": self.prefilled_tokens}


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the longest common prefix of two 1-D id tensors."""
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if differ.numel() else n


@dataclass
class PrefixCache:
    """Least-recently-used entries, at most `max_tokens` tokens in all."""

    max_tokens: int
    evicted_entries: int = 0
    _entries: OrderedDict[int, PrefixEntry] = field(default_factory=OrderedDict)
    _keys: count = field(default_factory=count)

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, ids: torch.Tensor) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest prefix with `ids`, and that length (0: none). Marks it used."""
        best_key, best = None, 0
        for key, entry in self._entries.items():
            n = common_prefix(entry.ids, ids)
            if n > best:
                best_key, best = key, n
        if best_key is None:
            return None, 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key], best

    def reusable(self, ids: torch.Tensor) -> int:
        """How many leading tokens of `ids` some entry holds, without marking anything used."""
        return max((common_prefix(e.ids, ids) for e in self._entries.values()), default=0)

    def store(self, entry: PrefixEntry) -> None:
        """Keep `entry` (most recently used), then evict down to the cap; one over the cap is not kept."""
        if entry.tokens == 0 or entry.tokens > self.max_tokens:
            return
        for key in [k for k, e in self._entries.items() if common_prefix(e.ids, entry.ids) == e.tokens]:
            del self._entries[key]
        self._entries[next(self._keys)] = entry
        total = self.tokens
        while total > self.max_tokens:
            _, old = self._entries.popitem(last=False)
            total -= old.tokens
            self.evicted_entries += 1

    def clear(self) -> None:
        self._entries.clear()
