"""Whether a hub id can be had here: in the local hub cache, or from a hub that answers now.

Asked before anything loads (the preflight, the TRL recipes' model checks): without it a hub id
on a machine without the hub passes every check, then the loader retries for about a minute and
dies with a long `OSError`. The hub is asked once per id, with a short timeout, and never under
`HF_HUB_OFFLINE=1`.
"""

from __future__ import annotations

import functools
import os

HUB_PROBE_TIMEOUT_S = 5.0


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_model_problem(model_id: str, what: str = "model") -> str | None:
    """None when hub id `model_id` is cached or the hub has it, else one line saying what to do
    (naming HF_HUB_OFFLINE and the cache folder). `what` is "model" or "tokenizer"."""
    from huggingface_hub import constants

    if in_hub_cache(model_id, what):
        return None
    cache = f"the hub cache ({constants.HF_HUB_CACHE}, set by HF_HOME)"
    if hub_offline():
        return (
            f"{model_id}: not a local directory and not in {cache}, and HF_HUB_OFFLINE=1 forbids a "
            f"download; download it first (hf download {model_id}) or give a local directory"
        )
    reason = _hub_answer(model_id, constants.ENDPOINT, HUB_PROBE_TIMEOUT_S)
    if reason is None:
        return None
    return (
        f"{model_id}: not a local directory and not in {cache}, and {reason}; download it where the "
        f"hub answers (hf download {model_id}) into that cache, or give a local directory "
        "(set HF_HUB_OFFLINE=1 to skip asking the hub)"
    )


def in_hub_cache(repo_id: str, what: str = "model") -> bool:
    from huggingface_hub import try_to_load_from_cache

    names = ("config.json",) if what == "model" else ("tokenizer_config.json", "tokenizer.json")
    return any(isinstance(try_to_load_from_cache(repo_id, n), str) for n in names)


@functools.lru_cache(maxsize=64)
def _hub_answer(repo_id: str, endpoint: str, timeout_s: float) -> str | None:
    """None when the hub at `endpoint` lists `repo_id`, else why it cannot be had from there."""
    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        HfApi(endpoint=endpoint).model_info(repo_id, timeout=timeout_s)
    except GatedRepoError:
        return None  # the loader's own error says to log in, and a token may be set
    except RepositoryNotFoundError:
        return f"the hub at {endpoint} has no such model (or it is private)"
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "an error"
        return f"the hub at {endpoint} answered {status}"
    except (httpx.HTTPError, OSError) as exc:  # refused, timed out, DNS, TLS
        return f"the hub at {endpoint} did not answer in {timeout_s:g} s ({type(exc).__name__})"
    return None
