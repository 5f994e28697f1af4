"""Question sets and corpora: loaders for FlashRAG, Search-R1, the shared seed splits and the Hub."""

from executor_sft.data.idlist import ids_digest, read_ids
from executor_sft.data.questions import Duplicates, QuestionFormatError, load_questions
from executor_sft.data.selection import LimitPer, QuestionSource, select_questions
from executor_sft.schema import Question

__all__ = [
    "Duplicates",
    "LimitPer",
    "Question",
    "QuestionFormatError",
    "QuestionSource",
    "ids_digest",
    "load_questions",
    "read_ids",
    "select_questions",
]
