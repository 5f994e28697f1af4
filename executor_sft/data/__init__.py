"""Question sets and corpora: loaders for FlashRAG, Search-R1, the paper's splits and the Hub."""

from executor_sft.data.questions import Duplicates, QuestionFormatError, load_questions
from executor_sft.schema import Question

__all__ = ["Duplicates", "Question", "QuestionFormatError", "load_questions"]
