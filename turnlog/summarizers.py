"""Summarizers: what turns a range of a session into a short text. One small interface; the default
is offline and deterministic, others call an OpenAI-compatible endpoint, run an external program, or
wrap any Python callable. Failures raise SummarizerError: the compactor then appends nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from turnlog.store import StoreError, SummarizerInfo, SummarizerUsage


class SummarizerError(StoreError):
    """A summarizer failed, timed out, or returned nothing. Nothing was appended."""


@dataclass(frozen=True)
class TranscriptItem:
    """One message of the range to summarize (or, for a summary of summaries, one summary)."""

    version: int
    role: Literal["system", "user", "assistant", "tool", "summary"]
    text: str
    tool_name: str | None = None
    tool_calls: tuple[str, ...] = ()
    """``name(arguments)`` of each call an assistant message makes."""
    is_error: bool = False


@dataclass(frozen=True)
class SummaryRequest:
    """What a summarizer is asked to do."""

    session_id: str
    first_version: int
    last_version: int
    level: int
    """0: raw messages; n+1: level-n summaries."""
    items: tuple[TranscriptItem, ...]
    transcript: str
    """The items as text, capped to the compactor's input limit (long tool outputs shortened first)."""
    target_tokens: int
    """The summary should fit in this many tokens."""
    count: Callable[[str], int] = field(repr=False)
    """Counts tokens with the store's tokenizer."""


@dataclass(frozen=True)
class SummaryResult:
    """A summary and what writing it cost."""

    text: str
    usage: SummarizerUsage | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Anything with ``info`` and ``summarize``."""

    info: SummarizerInfo

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...


PROMPT = (
    "You summarize part of a conversation between a user and an AI agent that uses tools, so that "
    "the agent can continue the work without the original messages. Keep: what the user asked for "
    "and any constraints; decisions made and why; each tool used with its outcome (and errors); file "
    "paths, identifiers, numbers and names that later work may need; what is still open. Be concise "
    "and factual; write plain text, no preamble. Stay under {target} tokens."
)


# --- extractive: offline, deterministic -------------------------------------------------------


_DECISION = re.compile(
    r"\b(found|fix(?:ed|es)?|decid\w*|will|should|because|cause|plan|done|added|changed|created|"
    r"updated|removed|wrote|chose|use[sd]?|need[s]?|must|next|failed|passed|works?)\b",
    re.IGNORECASE,
)
_PATH = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+|[\w-]+\.(?:py|md|js|ts|tsx|json|toml|yaml|yml|txt|rs|go|sql|sh|cfg|ini|html|css))\b"
)
_IDENT = re.compile(r"`([^`\n]{2,60})`")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class ExtractiveSummarizer:
    """The default: keeps the user's requests, decisions, tool names with their outcomes and errors,
    file paths and identifiers, within the target size. No model, no network, same input → same
    summary."""

    def __init__(self) -> None:
        self.info = SummarizerInfo(name="extractive", model=None, prompt_version="1")

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        requests: list[str] = []
        decisions: list[str] = []
        tools: list[str] = []
        errors: list[str] = []
        paths: dict[str, None] = {}
        idents: dict[str, None] = {}
        for item in request.items:
            text = " ".join(item.text.split())
            for match in _PATH.findall(item.text):
                paths.setdefault(match.strip("."), None)
            for match in _IDENT.findall(item.text):
                idents.setdefault(match, None)
            if item.role == "summary":
                # Summaries of summaries: keep their lines, most important kinds first.
                for line in item.text.splitlines():
                    line = line.strip()
                    if not line or line.startswith(("Files:", "Identifiers:")):
                        continue
                    bucket = (
                        requests
                        if line.startswith("User:")
                        else errors
                        if "error" in line.lower()
                        else decisions
                    )
                    bucket.append(line)
            elif item.role == "user":
                requests.append(f"User: {_clip(text, 300)}")
            elif item.role == "assistant":
                said = [s for s in _SENTENCE.split(text) if _DECISION.search(s)][:2]
                if said:
                    decisions.append(f"Assistant: {_clip(' '.join(said), 300)}")
                tools.extend(f"Called {_clip(call, 120)}" for call in item.tool_calls)
            elif item.role == "tool":
                first = next((line.strip() for line in item.text.splitlines() if line.strip()), "")
                if item.is_error:
                    error_line = _error_line(item.text) or first
                    errors.append(f"{item.tool_name or 'tool'} failed: {_clip(error_line, 200)}")
                else:
                    size = len(item.text.splitlines())
                    tools.append(f"{item.tool_name or 'tool'} returned {size} line(s): {_clip(first, 100)}")
        lines = requests + errors + decisions + _dedupe(tools)
        if paths:
            lines.append("Files: " + ", ".join(list(paths)[:30]))
        if idents:
            lines.append("Identifiers: " + ", ".join(list(idents)[:30]))
        if not lines:
            lines = [f"{len(request.items)} message(s) with no text to keep."]
        return SummaryResult(_fit(lines, request.target_tokens, request.count), None)


_ERROR = re.compile(r"\b\w*(?:Error|Exception)\b|\bFAILED\b|\berror:", re.IGNORECASE)


def _error_line(text: str) -> str | None:
    """The most telling line of an error output: one naming an error, with words in it (not a
    banner of ``=`` signs), the last such line when there are several."""
    best = None
    for line in text.splitlines():
        stripped = line.strip()
        words = sum(c.isalnum() for c in stripped)
        if _ERROR.search(stripped) and words >= len(stripped) / 2:
            best = stripped
    return best


def _dedupe(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fit(lines: list[str], target: int, count: Callable[[str], int]) -> str:
    """The lines, in priority order, as many as fit ``target`` tokens."""
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = count(line) + 1
        if used + cost > target:
            continue
        kept.append(line)
        used += cost
    if not kept:
        kept = [lines[0][: max(20, target * 3)]]
    return "\n".join(kept)


# --- an OpenAI-compatible endpoint -------------------------------------------------------------


class OpenAISummarizer:
    """Any OpenAI-compatible chat-completions endpoint (OpenAI, a proxy, a local server).
    The key is read from an environment variable; requests time out."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        prompt: str = PROMPT,
        prompt_version: str = "1",
        name: str = "openai",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.prompt = prompt
        self.info = SummarizerInfo(name=name, model=model, prompt_version=prompt_version)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        body = {
            "model": self.info.model,
            "messages": [
                {"role": "system", "content": self.prompt.format(target=request.target_tokens)},
                {"role": "user", "content": request.transcript},
            ],
            "max_tokens": request.target_tokens,
            "temperature": 0,
        }
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = f"{self.base_url}/chat/completions"
        http_request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(http_request, timeout=self.timeout) as response:
                data = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:200]
            hint = f"; is ${self.api_key_env} set?" if exc.code in (401, 403) else ""
            raise SummarizerError(f"summarizer endpoint {url} answered {exc.code}: {detail}{hint}") from exc
        except TimeoutError as exc:
            raise SummarizerError(f"summarizer endpoint {url} timed out after {self.timeout:g} s") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise SummarizerError(f"cannot reach summarizer endpoint {url}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise SummarizerError(f"summarizer endpoint {url} did not answer JSON: {exc.msg}") from exc
        try:
            text = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise SummarizerError(
                f"summarizer endpoint {url} answered without choices[0].message.content"
            ) from exc
        usage = data.get("usage") if isinstance(data, dict) else None
        billed = None
        if isinstance(usage, dict):
            billed = SummarizerUsage(
                input_tokens=int(usage.get("prompt_tokens", 0) or 0),
                output_tokens=int(usage.get("completion_tokens", 0) or 0),
            )
        return SummaryResult(str(text or ""), billed)


# --- an external program -------------------------------------------------------------------------


class CommandSummarizer:
    """An external program: reads the transcript on standard input, writes the summary on standard
    output. It also gets TURNLOG_TARGET_TOKENS and TURNLOG_LEVEL in its environment."""

    def __init__(
        self,
        command: str | list[str],
        *,
        timeout: float = 120.0,
        prompt_version: str = "1",
        name: str = "command",
    ) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise SummarizerError("the summarizer command is empty")
        self.timeout = timeout
        self.info = SummarizerInfo(name=name, model=" ".join(self.argv)[:200], prompt_version=prompt_version)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        env = dict(
            os.environ, TURNLOG_TARGET_TOKENS=str(request.target_tokens), TURNLOG_LEVEL=str(request.level)
        )
        try:
            done = subprocess.run(
                self.argv,
                input=request.transcript,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=env,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SummarizerError(f"summarizer command not found: {self.argv[0]}") from exc
        except subprocess.TimeoutExpired as exc:
            raise SummarizerError(f"summarizer command timed out after {self.timeout:g} s") from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise SummarizerError(f"summarizer command exited with {done.returncode}: {last[:200]}")
        return SummaryResult(done.stdout, None)


# --- any Python callable -------------------------------------------------------------------------


class CallableSummarizer:
    """Wraps ``fn(request) -> str | SummaryResult`` for library users."""

    def __init__(
        self,
        fn: Callable[[SummaryRequest], str | SummaryResult],
        *,
        name: str = "callable",
        model: str | None = None,
        prompt_version: str = "1",
    ) -> None:
        self.fn = fn
        self.info = SummarizerInfo(name=name, model=model, prompt_version=prompt_version)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        result = self.fn(request)
        return result if isinstance(result, SummaryResult) else SummaryResult(str(result), None)


def as_summarizer(value: Any) -> Summarizer:
    """A Summarizer from a summarizer or a plain callable."""
    if isinstance(value, Summarizer):
        return value
    if callable(value):
        return CallableSummarizer(value, name=getattr(value, "__name__", "callable") or "callable")
    raise TypeError(f"not a summarizer: {value!r}")
