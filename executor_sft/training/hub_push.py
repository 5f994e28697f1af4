"""`--push_to_hub` is checked before training: the hub must answer and a token must be there.

Otherwise the push fails after the whole run, at its end, with a long connection traceback; the
model is saved by then, but the user learns only then that the push could not happen.
"""

from __future__ import annotations

import os
from typing import Any

PROBE_TIMEOUT_S = 5.0


def push_problem(training_args: Any) -> str | None:
    """Why `push_to_hub` cannot push from here (None: it can, or no push is asked)."""
    if not getattr(training_args, "push_to_hub", False):
        return None
    from huggingface_hub import constants, get_token

    keep = "the checkpoint stays local; drop --push_to_hub, or push it later with `hf upload`"
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return f"--push_to_hub: HF_HUB_OFFLINE=1 forbids reaching the hub; {keep}"
    endpoint = constants.ENDPOINT
    import httpx

    try:
        httpx.head(endpoint, timeout=PROBE_TIMEOUT_S, follow_redirects=True)
    except (httpx.HTTPError, OSError) as exc:
        return (
            f"--push_to_hub: the hub at {endpoint} did not answer in {PROBE_TIMEOUT_S:g} s "
            f"({type(exc).__name__}); {keep}"
        )
    if get_token() is None:
        return f"--push_to_hub: no hub token (log in with `hf auth login`, or set HF_TOKEN); {keep}"
    return None
