"""Fixtures for the SFT tests: rows in the sft.jsonl format, built programmatically."""

from __future__ import annotations

import pytest
from rowgen import make_row, make_rows


@pytest.fixture()
def row_two_searches():
    return make_row(7, n_searches=2, passage_words=30)


@pytest.fixture(scope="session")
def sft_rows():
    return make_rows(24, seed=100)
