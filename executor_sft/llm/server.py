"""An OpenAI-compatible HTTP server around any `ChatModel`.

Serves CPU models locally (`python -m executor_sft.llm.server --model offline:smollm2`) so
every stage can talk to them exactly as to vLLM, and gives the tests a real HTTP endpoint.
Implements POST /v1/chat/completions (non-streaming, n=1), GET /v1/models and GET /health.
Binds 127.0.0.1 unless told otherwise.

Bad requests are refused as OpenAI and vLLM refuse them, with `{"error": {"message", "type",
"param", "code"}}`: 400 for a body that is not UTF-8 JSON, holds a lone surrogate, or has an
invalid field (unknown message role, tool calls that are not a list of calls, a seed outside
64 bits, ...); 413 for a body over `max_body_bytes` (counted as it arrives, so an oversized
prompt never reaches the tokenizer); 400 with code `context_length_exceeded` for a prompt the
model's context cannot hold; 404 with code `model_not_found` for a model name this server does
not serve. `tool_choice` "auto" and "none" are honoured; "required" and a named function are
refused (400), since no backend here can force a tool call. `logprobs` / `top_logprobs` (0-20)
are answered in OpenAI's `choices[].logprobs.content` shape where the model computes them
(`supports_logprobs`: the transformers backend does) and refused with a 400 naming `logprobs`
otherwise; other OpenAI fields this server cannot honour (`response_format`, penalties,
`logit_bias`) are refused unless at the value that asks nothing, and unknown fields are refused
with code `unknown_parameter`, as OpenAI refuses them.

The prompt is rendered and counted on a worker thread, so /health answers while a long
prompt is tokenised.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import copy
import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from executor_sft.llm.base import ChatError, ChatModel, ChatResult, SamplingParams, TokenLogprob

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 8 << 20
"""Room for a prompt far past any served model's context; a larger body is a client's mistake."""

_OPEN = ConfigDict(extra="allow")  # other keys pass through to the model unchanged


class FunctionCall(BaseModel):
    model_config = _OPEN

    name: str
    arguments: str


class ToolCall(BaseModel):
    model_config = _OPEN

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message, with the fields the chat templates read typed; other keys pass through.

    The roles are those the chat templates render: any other would be dropped from the prompt.
    """

    model_config = _OPEN

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class FunctionSpec(BaseModel):
    model_config = _OPEN

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    model_config = _OPEN

    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    temperature: float | None = Field(None, ge=0, le=2)  # OpenAI's range
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)  # what torch and vLLM take
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_ids: bool | None = None
    """vLLM's flag: the choice also carries the sampled `token_ids` (where the model returns them)."""
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)  # OpenAI's range
    parallel_tool_calls: bool | None = None
    """False: the answer keeps only the first of the model's tool calls (OpenAI's contract; vLLM's
    `maybe_filter_parallel_tool_calls` does the same after generating)."""

    def sampling(self, default: SamplingParams) -> SamplingParams:
        kwargs = self.chat_template_kwargs or {}
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        return SamplingParams(
            temperature=default.temperature if self.temperature is None else self.temperature,
            top_p=default.top_p if self.top_p is None else self.top_p,
            max_tokens=self.max_completion_tokens or self.max_tokens or default.max_tokens,
            seed=self.seed if self.seed is not None else default.seed,
            stop=stop or default.stop,
            enable_thinking=bool(kwargs.get("enable_thinking", default.enable_thinking)),
            logprobs=(self.top_logprobs or 0) if self.logprobs else None,
        )


def _error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    """An error in OpenAI's shape, which OpenAI clients parse and show."""
    body = {"message": message, "type": kind, "param": param, "code": code}
    return JSONResponse(status_code=status, content={"error": body})


def _validation_error(exc: ValidationError) -> JSONResponse:
    """Pydantic's errors, as the 400 OpenAI and vLLM answer an invalid body with."""
    problems = exc.errors(include_url=False)
    locs = [e["loc"] for e in problems]
    message = "; ".join(f"{_dotted(e['loc']) or 'body'}: {e['msg']}" for e in problems)
    code = "missing_required_parameter" if problems[0]["type"] == "missing" else "invalid_value"
    # A union's errors share the field's path and add one step per member type: name the field.
    param = _dotted(os.path.commonprefix(locs) or locs[0])
    return _error(400, message, param=param or None, code=code)


def _dotted(loc: tuple | list) -> str:
    return ".".join(str(p) for p in loc)


def _lone_surrogate(value: Any, where: str = "") -> str | None:
    """The path of the first string holding a lone surrogate (JSON allows `\\ud800`; UTF-8 does not)."""
    if isinstance(value, str):
        return None if _is_unicode(value) else where or "body"
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return None
    for key, item in items:
        path = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and not _is_unicode(key):
            return path
        if found := _lone_surrogate(item, path):
            return found
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


CLIENT_CLOSED = 499
"""The status logged for a request whose client left before its body arrived (nginx's code)."""


async def _read_body(request: Request, max_bytes: int) -> Any:
    """The request's JSON body, or the response to send; the size is checked before anything is parsed.

    A client that gives up (its timeout) before the body is read is routine under load, not a
    server fault: it gets a one-line log and a 499 that nobody reads, not a traceback.
    """
    too_large = _error(
        413,
        f"The request body is over this server's limit of {max_bytes} bytes; shorten the messages "
        "(or start the server with a larger --max_body_bytes)",
        code="request_too_large",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        return too_large
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                return too_large
            chunks.append(chunk)
    except ClientDisconnect:
        log.info("%s: the client left before its request body arrived", request.url.path)
        return Response(status_code=CLIENT_CLOSED)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        return _error(
            400,
            f"The body is not UTF-8 (byte {exc.start} is {exc.object[exc.start]:#04x}); "
            "send JSON encoded as UTF-8",
        )
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        return _error(400, f"The body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})")
    where = _lone_surrogate(body)
    if where is not None:
        return _error(
            400,
            f"{where}: holds a lone surrogate, which is not Unicode text",
            param=where,
            code="invalid_value",
        )
    return body


@dataclasses.dataclass
class ContextLimit:
    """Counts a request's prompt tokens as the model will see them, to refuse what it cannot hold."""

    tokenizer: Any
    window: int
    worker: concurrent.futures.ThreadPoolExecutor = dataclasses.field(
        # One thread: the event loop stays free, and the tokenizer is never used by two threads at once.
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="context-limit"),
        repr=False,
    )

    @classmethod
    def of(cls, model: ChatModel) -> ContextLimit | None:
        """For a model that exposes its tokenizer and context length (transformers); else None."""
        tokenizer = getattr(model, "tokenizer", None)
        config = getattr(getattr(model, "model", None), "config", None)
        window = getattr(config, "max_position_embeddings", None)
        if tokenizer is None or not isinstance(window, int):
            return None
        # A copy: the backend's worker thread reconfigures its own tokenizer (padding) mid-call.
        return cls(copy.deepcopy(tokenizer), window)

    def prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict] | None, thinking: bool) -> int:
        from executor_sft.llm.transformers_backend import render_prompt

        prompt = render_prompt(self.tokenizer, messages, tools, thinking)
        return len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    async def count(self, messages: list[dict[str, Any]], tools: list[dict] | None, thinking: bool) -> int:
        """`prompt_tokens` on the worker thread (a long prompt takes seconds to tokenise)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.worker, self.prompt_tokens, messages, tools, thinking)

    def check(
        self, n_prompt: int, requested: int | None, sampling: SamplingParams
    ) -> JSONResponse | SamplingParams:
        """A 400 when the prompt (plus an explicit max_tokens) overflows, else the fitted sampling."""
        if n_prompt >= self.window:
            return _error(
                400,
                f"This model's maximum context length is {self.window} tokens, but the messages are "
                f"{n_prompt} tokens; shorten them",
                param="messages",
                code="context_length_exceeded",
            )
        if requested is not None and n_prompt + requested > self.window:
            return _error(
                400,
                f"This model's maximum context length is {self.window} tokens, but {n_prompt} prompt "
                f"tokens + max_tokens {requested} = {n_prompt + requested}; lower max_tokens to at most "
                f"{self.window - n_prompt}",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return dataclasses.replace(sampling, max_tokens=min(sampling.max_tokens, self.window - n_prompt))


IGNORED_FIELDS = frozenset({"user", "metadata", "store", "stream_options", "service_tier"})
"""OpenAI fields that ask nothing of a non-streaming generation here (labels, storage on OpenAI's
side, stream settings, billing tier): accepted and not used."""
UNSUPPORTED_FIELDS: dict[str, tuple[Any, ...]] = {
    "response_format": (None, {"type": "text"}),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "reasoning_effort": (None,),
}
"""OpenAI fields this server cannot honour, with the values that ask nothing (accepted); any other
value is a 400 naming the field, never a silent answer without it."""


def _refusal(request: ChatCompletionRequest, name: str, logprobs: bool) -> JSONResponse | None:
    """The error for a request this server does not take (another model, streaming, n > 1, a forced
    tool, log-probabilities from a model without them)."""
    if request.model is not None and request.model != name:
        return _error(
            404,
            f"The model `{request.model}` does not exist: this server serves `{name}`",
            param="model",
            code="model_not_found",
        )
    if request.stream:
        return _error(400, "stream=true is not supported by this server", param="stream")
    if request.n != 1:
        return _error(400, f"n={request.n} is not supported (only n=1)", param="n")
    for key, value in (request.model_extra or {}).items():
        if key in IGNORED_FIELDS:
            continue
        if key in UNSUPPORTED_FIELDS:
            if value in UNSUPPORTED_FIELDS[key]:  # the field's default: nothing is asked of the model
                continue
            return _error(
                400,
                f"{key}={json.dumps(value)} is not supported by this server",
                param=key,
                code="unsupported_value",
            )
        return _error(
            400, f"Unrecognized request argument supplied: {key}", param=key, code="unknown_parameter"
        )
    if request.top_logprobs and not request.logprobs:
        return _error(
            400,
            f"top_logprobs={request.top_logprobs} needs logprobs=true",
            param="top_logprobs",
            code="invalid_value",
        )
    if request.logprobs and not logprobs:
        return _error(
            400,
            f"logprobs=true is not supported by this server: its model ({name}) does not return "
            "log-probabilities",
            param="logprobs",
            code="unsupported_value",
        )
    if request.tool_choice not in (None, "auto", "none"):
        return _error(
            400,
            f"tool_choice={_tool_choice_text(request.tool_choice)} forces a tool call, which this server "
            'cannot do (it does not constrain decoding); send "auto" or "none"',
            param="tool_choice",
        )
    return None


def _tool_choice_text(choice: str | NamedToolChoice) -> str:
    return choice if isinstance(choice, str) else f"{{function: {choice.function.name}}}"


def _message(message: dict[str, Any], parallel_tool_calls: bool | None) -> dict[str, Any]:
    """The answer's message as OpenAI gives it: the first tool call only when parallel calls are
    off, and `content` null (not "") in a message that is only tool calls."""
    message = dict(message)
    calls = message.get("tool_calls")
    if calls and parallel_tool_calls is False:
        message["tool_calls"] = calls[:1]
    message["content"] = message.get("content") or (None if calls else "")
    return message


def _completion(
    result: ChatResult, name: str, token_ids: bool = False, parallel_tool_calls: bool | None = None
) -> dict[str, Any]:
    """A chat-completion response body in OpenAI's shape (with vLLM's choice `token_ids` if asked)."""
    message = _message(result.message, parallel_tool_calls)
    finish = result.finish_reason or ("tool_calls" if message.get("tool_calls") else "stop")
    usage = result.usage
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    if token_ids and result.sampled_tokens is not None:
        choice["token_ids"] = list(result.sampled_tokens.ids)
    if result.logprobs is not None:
        choice["logprobs"] = {"content": [_token_logprob(t) for t in result.logprobs], "refusal": None}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        },
    }


def _token_logprob(token: TokenLogprob) -> dict[str, Any]:
    """One `logprobs.content` entry; `bytes` are the UTF-8 of the token's decoded text."""
    return {
        "token": token.token,
        "logprob": token.logprob,
        "bytes": list(token.token.encode("utf-8")),
        "top_logprobs": [
            {"token": text, "logprob": value, "bytes": list(text.encode("utf-8"))}
            for text, value in token.top
        ],
    }


async def _complete(
    model: ChatModel, limit: ContextLimit | None, request: ChatCompletionRequest, default: SamplingParams
) -> ChatResult | JSONResponse:
    """The model's answer, or the error to send: a prompt over the context, a failed model."""
    messages = [m.model_dump(exclude_unset=True) for m in request.messages]
    offered = request.tools if request.tool_choice != "none" else None
    tools = [t.model_dump(exclude_unset=True) for t in offered] if offered else None
    sampling = request.sampling(default)
    try:
        if limit is not None:
            n_prompt = await limit.count(messages, tools, sampling.enable_thinking)
            fitted = limit.check(n_prompt, request.max_completion_tokens or request.max_tokens, sampling)
            if isinstance(fitted, JSONResponse):
                return fitted
            sampling = fitted
        return await model.chat(messages, tools=tools, sampling=sampling)
    except ChatError as exc:
        return _error(502, f"upstream model failed: {exc}", "upstream_error")
    except Exception as exc:  # the model crashed on this input: report it, keep serving
        log.exception("chat failed")
        return _error(500, f"{type(exc).__name__}: {exc}", "server_error")


def create_app(
    model: ChatModel, served_name: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    """A FastAPI app serving `model` under `served_name` (default: `model.name`)."""
    name = served_name or model.name
    default = getattr(model, "sampling", None) or SamplingParams()
    app = FastAPI(title=f"executor_sft chat server ({name})")
    app.state.model = model
    limit = ContextLimit.of(model)

    @app.exception_handler(HTTPException)
    async def _openai_http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))  # an unknown path or method, in OpenAI's shape

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "executor_sft"}],
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request):
        body = await _read_body(http, max_body_bytes)
        if isinstance(body, Response):
            return body
        try:
            request = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            return _validation_error(exc)
        refused = _refusal(request, name, logprobs=getattr(model, "supports_logprobs", False))
        if refused is not None:
            return refused
        result = await _complete(model, limit, request, default)
        if isinstance(result, JSONResponse):
            return result
        return _completion(
            result,
            name,
            token_ids=bool(request.return_token_ids),
            parallel_tool_calls=request.parallel_tool_calls,
        )

    return app


class BackgroundServer:
    """Run an app with uvicorn on a background thread (tests, notebooks); port 0 picks a free one.

    Use as a context manager; `base_url` ends in `/v1`, ready for `OpenAIChatModel`.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        self.config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off")
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="chat-server")
        self.host = host
        self.port = port

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"chat server did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description="Serve a chat model over the OpenAI chat-completions API."
    )
    parser.add_argument(
        "--model", required=True, help='path, hub id or alias ("offline:smollm2", "offline:tiny-qwen3")'
    )
    parser.add_argument("--name", default=None, help="model id to serve under (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument(
        "--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="larger request bodies get 413"
    )
    parser.add_argument(
        "--chat_template",
        "--chat-template",  # vLLM's spelling, accepted too
        default=None,
        help='Jinja file, or "chatml_tools"',
    )
    args = parser.parse_args(argv)

    import uvicorn

    from executor_sft.llm.backends import TransformersConfig
    from executor_sft.llm.config import build_chat_model

    cfg = TransformersConfig(
        model=args.model,
        name=args.name,
        dtype=args.dtype,
        chat_template=args.chat_template,
    )
    t0 = time.perf_counter()
    model = build_chat_model(cfg)
    print(
        f"loaded {args.model} in {time.perf_counter() - t0:.1f}s; serving http://{args.host}:{args.port}/v1",
        flush=True,
    )
    uvicorn.run(
        create_app(model, args.name or args.model, args.max_body_bytes),
        host=args.host,
        port=args.port,
        log_level="info",
    )


if __name__ == "__main__":
    main()
