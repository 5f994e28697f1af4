"""Session-scoped real model and its HTTP server for the backend tests."""

from __future__ import annotations

import pytest

from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.llm.transformers_backend import TransformersChatModel


@pytest.fixture(scope="session")
def smollm2_chat(smollm2):
    model, tokenizer = smollm2
    return TransformersChatModel(model, tokenizer, name="smollm2")


@pytest.fixture(scope="session")
def smollm2_server(smollm2_chat):
    with BackgroundServer(create_app(smollm2_chat)) as server:
        yield server
