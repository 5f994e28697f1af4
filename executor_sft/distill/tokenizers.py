"""The teacher must read the student's token ids as the same tokens: one vocabulary, checked first.

Per-token distillation compares the two models' next-token distributions index by index, so a
teacher with another vocabulary (or the same size, other ids) trains the student on noise.
The check reads only the tokenizers (their files, or the offline alias's vocabulary), before
any model loads.
"""

from __future__ import annotations

from executor_sft.errors import ConfigError
from executor_sft.grpo.policy import load_tokenizer
from executor_sft.llm.vocabulary import vocabulary_fingerprint


class TokenizerMismatchError(ConfigError):
    """The teacher's tokenizer is not the student's."""


def _first_difference(student: dict[str, int], teacher: dict[str, int]) -> str:
    for token, sid in sorted(student.items(), key=lambda kv: kv[1]):
        tid = teacher.get(token)
        if tid != sid:
            where = f"id {tid} in the teacher's" if tid is not None else "absent from the teacher's"
            return f"token {token!r} is id {sid} in the student's vocabulary, {where}"
    extra = sorted(set(teacher) - set(student), key=teacher.get)
    return f"the teacher's has {len(extra)} more token(s), e.g. {extra[0]!r}" if extra else "they differ"


def check_same_tokenizer(
    student: str, teacher: str, revision: str | None = None, trust_remote_code: bool = False
) -> None:
    """Raise `TokenizerMismatchError` (one line) unless both name the same vocabulary."""
    s_tok = load_tokenizer(student, trust_remote_code=trust_remote_code)
    t_tok = load_tokenizer(teacher, revision=revision, trust_remote_code=trust_remote_code)
    (s_size, s_hash), (t_size, t_hash) = vocabulary_fingerprint(s_tok), vocabulary_fingerprint(t_tok)
    if s_hash == t_hash:
        return
    raise TokenizerMismatchError(
        f"teacher_model_name_or_path {teacher!r}: its tokenizer is not the student's ({student!r}): "
        f"{t_size} vs {s_size} tokens, {_first_difference(s_tok.get_vocab(), t_tok.get_vocab())}; on-policy "
        "distillation compares the two models token by token, so the teacher must share the student's "
        "tokenizer (e.g. Qwen3-8B or Qwen3-32B for a Qwen3-1.7B student)"
    )
