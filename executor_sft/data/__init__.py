"""Question sets and corpora: loaders for FlashRAG, Search-R1, the paper's splits and the Hub."""

from executor_sft.data.questions import QuestionFormatError, load_questions
from executor_sft.schema import Question

__all__ = ["Question", "QuestionFormatError", "load_questions"]
