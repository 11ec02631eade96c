"""The OpenAI request shape, checked at the router before anything reaches an engine.

Why it exists: llama-server answers some malformed requests with a 500
(``"tools": "x"``, a message whose ``role`` is a number), and a 5xx is what the
router's breakers count as an engine failure. A caller who sends those every
half second kept a healthy model closed to everyone. So the router refuses them
itself: a 400 in the OpenAI error shape naming the field (``param``), and the
request is never forwarded. Bounds that protect the engine's slots are here too:
``max_tokens`` must be a positive integer no larger than ``MAX_OUTPUT_TOKENS``
(``-1``, "until the context is full", held a slot for a minute), and a body may
carry only the documented top-level keys (a megabyte of unknown keys is not a
request).

The documented keys are OpenAI's parameters for each endpoint plus the sampling
options llama.cpp's server documents (``top_k``, ``min_p``, ``repeat_penalty``,
``grammar`` ...). Only the shapes an engine trips over are checked in depth;
values inside the documented keys are otherwise the engine's to judge (its 4xx
is the caller's answer and never counts against it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

MAX_OUTPUT_TOKENS = 32_768
MAX_MESSAGES = 4096
MAX_TOOLS = 256
MAX_STOP_SEQUENCES = 16
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
PART_TYPES = frozenset({"text", "image_url", "input_audio", "file", "refusal"})

SAMPLING = frozenset(
    {
        "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n_predict",
        "temperature", "top_p", "top_k", "min_p", "typical_p", "n", "stop", "seed",
        "presence_penalty", "frequency_penalty", "repeat_penalty", "repeat_last_n",
        "logit_bias", "logprobs", "top_logprobs", "n_probs", "user", "metadata", "store",
        "service_tier", "grammar", "json_schema", "response_format", "cache_prompt",
        "mirostat", "mirostat_tau", "mirostat_eta", "dynatemp_range", "dynatemp_exponent",
        "xtc_probability", "xtc_threshold", "dry_multiplier", "dry_base",
        "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "samplers",
        "ignore_eos", "id_slot", "timings_per_token", "return_tokens", "post_sampling_probs",
        "t_max_predict_ms", "lora", "echo", "best_of", "suffix",
    }
)  # fmt: skip
CHAT_ONLY = frozenset(
    {
        "messages", "tools", "tool_choice", "parallel_tool_calls", "functions",
        "function_call", "reasoning_effort", "reasoning_format", "chat_template_kwargs",
        "modalities", "audio", "prediction", "web_search_options", "thinking_forced_open",
        "add_generation_prompt", "continue_final_message", "chat_template",
    }
)  # fmt: skip
DOCUMENTED: Mapping[str, frozenset[str]] = {
    "chat": SAMPLING | CHAT_ONLY,
    "completions": SAMPLING | {"prompt"},
    "embeddings": frozenset(
        {"model", "input", "encoding_format", "dimensions", "user", "content", "embd_normalize"}
    ),
}


@dataclass(frozen=True)
class ShapeRefusal:
    """Why a request is not forwarded: the field (``param``) and what is wrong with it."""

    param: str
    message: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _token_limit(payload: Mapping[str, Any], limit: int) -> ShapeRefusal | None:
    for name in ("max_tokens", "max_completion_tokens", "n_predict"):
        value = payload.get(name)
        if value is None:
            continue
        if not _is_int(value) or not 1 <= value <= limit:
            return ShapeRefusal(name, f"'{name}' must be an integer from 1 to {limit}")
    return None


def _scalars(payload: Mapping[str, Any]) -> ShapeRefusal | None:
    if "stream" in payload and not isinstance(payload["stream"], bool):
        return ShapeRefusal("stream", "'stream' must be true or false")
    for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty"):
        if name in payload and payload[name] is not None and not _is_number(payload[name]):
            return ShapeRefusal(name, f"'{name}' must be a number")
    for name in ("top_k", "seed", "n", "top_logprobs"):
        if name in payload and payload[name] is not None and not _is_int(payload[name]):
            return ShapeRefusal(name, f"'{name}' must be an integer")
    stop = payload.get("stop")
    well_formed = isinstance(stop, list) and len(stop) <= MAX_STOP_SEQUENCES
    if (
        stop is not None
        and not isinstance(stop, str)
        and not (well_formed and all(isinstance(s, str) for s in stop))
    ):
        return ShapeRefusal(
            "stop", f"'stop' must be a string or at most {MAX_STOP_SEQUENCES} strings"
        )
    return None


def _content(content: Any, where: str) -> ShapeRefusal | None:
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return ShapeRefusal(where, f"'{where}' must be a string, null or a list of parts")
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in PART_TYPES:
            return ShapeRefusal(
                f"{where}[{index}]",
                f"'{where}[{index}]' must be a part with a type of {', '.join(sorted(PART_TYPES))}",
            )
        if kind == "text" and not isinstance(part.get("text"), str):
            return ShapeRefusal(f"{where}[{index}].text", "a text part needs a string 'text'")
    return None


def _messages(payload: Mapping[str, Any]) -> ShapeRefusal | None:
    messages = payload.get("messages")
    if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES:
        return ShapeRefusal("messages", f"'messages' must be a list of 1 to {MAX_MESSAGES}")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            return ShapeRefusal(where, f"'{where}' must be an object")
        if message.get("role") not in ROLES:
            return ShapeRefusal(
                f"{where}.role", f"'{where}.role' must be one of {', '.join(sorted(ROLES))}"
            )
        refused = _content(message.get("content"), f"{where}.content")
        if refused is not None:
            return refused
    return None


def _tools(payload: Mapping[str, Any]) -> ShapeRefusal | None:
    tools = payload.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        return ShapeRefusal("tools", f"'tools' must be a list of at most {MAX_TOOLS} tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type", "function") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
        ):
            return ShapeRefusal(
                f"tools[{index}]",
                f'\'tools[{index}]\' must be {{"type": "function", "function": {{"name": ...}}}}',
            )
    choice = payload.get("tool_choice")
    if choice is not None and not isinstance(choice, (str, dict)):
        return ShapeRefusal("tool_choice", "'tool_choice' must be a string or an object")
    return None


def _prompt(payload: Mapping[str, Any]) -> ShapeRefusal | None:
    prompt = payload.get("prompt")
    if isinstance(prompt, str) or (
        isinstance(prompt, list) and all(isinstance(p, (str, int, list)) for p in prompt)
    ):
        return None
    return ShapeRefusal("prompt", "'prompt' must be a string or a list of strings or tokens")


def _input(payload: Mapping[str, Any]) -> ShapeRefusal | None:
    value = payload.get("input", payload.get("content"))
    if isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(v, (str, int, list)) for v in value)
    ):
        return None
    return ShapeRefusal("input", "'input' must be a string or a list of strings or tokens")


CHECKS: Mapping[str, tuple[Callable[[Mapping[str, Any]], ShapeRefusal | None], ...]] = {
    "chat": (_messages, _tools, _scalars),
    "completions": (_prompt, _scalars),
    "embeddings": (_input,),
}


def shape_refusal(
    endpoint: str, payload: Mapping[str, Any], *, token_limit: int = MAX_OUTPUT_TOKENS
) -> ShapeRefusal | None:
    """Why ``payload`` is not a request for ``endpoint`` (chat, completions, embeddings),
    or None when it may be forwarded."""
    documented = DOCUMENTED.get(endpoint)
    if documented is None:
        return None
    unknown = sorted(key for key in payload if key not in documented)
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:3])
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        return ShapeRefusal(unknown[0][:64], f"unknown parameter {shown}{more} for /v1/{endpoint}")
    if endpoint != "embeddings":
        refused = _token_limit(payload, token_limit)
        if refused is not None:
            return refused
    for check in CHECKS[endpoint]:
        refused = check(payload)
        if refused is not None:
            return refused
    return None


def over_model_limit(
    endpoint: str, payload: Mapping[str, Any], model: str, limit: int
) -> JSONResponse | None:
    """The 400 for a token limit above ``model``'s own ``max_output_tokens``, or None."""
    if endpoint == "embeddings" or limit >= MAX_OUTPUT_TOKENS:
        return None
    refused = _token_limit(payload, limit)
    if refused is None:
        return None
    return _answer(ShapeRefusal(refused.param, f"{refused.message} for model '{model}'"))


def refused_shape(endpoint: str, payload: Mapping[str, Any]) -> JSONResponse | None:
    """The 400 (OpenAI error shape, ``param`` naming the field) for a malformed request,
    or None: the router's hook before admission, so a refused request holds no slot."""
    refusal = shape_refusal(endpoint, payload)
    return None if refusal is None else _answer(refusal)


def _answer(refusal: ShapeRefusal) -> JSONResponse:
    body = {
        "error": {
            "message": refusal.message,
            "type": "invalid_request_error",
            "param": refusal.param,
            "code": "invalid_request_shape",
        }
    }
    return JSONResponse(body, status_code=400)
