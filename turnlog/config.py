"""The local configuration: what the names in a session's policy stand for on this machine.

A policy (an event of the log) may only name a summarizer or a custom output handler; the program to
run, the endpoint, the model and the environment variable holding the key come from this file, so a
log imported from elsewhere can never make turnlog run a program or send a transcript to an address
of its choosing. The file is TOML, named by ``$TURNLOG_CONFIG`` (default
``$XDG_CONFIG_HOME/turnlog/config.toml``, i.e. ``~/.config/turnlog/config.toml``)::

    [summarizers.local-llm]
    kind = "openai"                 # any OpenAI-compatible chat-completions endpoint
    model = "gpt-4o-mini"
    base_url = "http://127.0.0.1:8080/v1"
    api_key_env = "LOCAL_LLM_KEY"   # the name of the variable, never the key

    [summarizers.my-script]
    kind = "command"                # reads the transcript on stdin, prints the summary
    command = ["python3", "summarize.py"]

    [custom.errors-only]            # a tool output's full text on stdin; prints what the context shows
    command = ["grep", "-i", "error"]

``extractive`` (offline, deterministic) is built in and needs no entry."""

from __future__ import annotations

import os
import subprocess
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnlog.store import StoreError
from turnlog.store.events import describe_validation_error
from turnlog.store.events_policy import HandlerName
from turnlog.summarizers import CommandSummarizer, ExtractiveSummarizer, OpenAISummarizer, Summarizer

BUILT_IN = "extractive"
"""The summarizer every machine has."""

Argv = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
Seconds = Annotated[float, Field(gt=0, le=3600)]


class ConfigError(StoreError):
    """The local configuration cannot be read, or does not define a name a policy uses."""


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class OpenAIEntry(_Entry):
    """A summarizer behind an OpenAI-compatible chat-completions endpoint."""

    kind: Literal["openai"]
    """Discriminator."""
    model: Annotated[str, Field(min_length=1)]
    """The model to ask."""
    base_url: Annotated[str, Field(pattern=r"^https?://")] = "https://api.openai.com/v1"
    """The endpoint (``/chat/completions`` is appended)."""
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = "OPENAI_API_KEY"
    """The environment variable that holds the key."""
    timeout: Seconds = 60.0
    """Seconds before a request fails."""
    prompt_version: str = "1"
    """Bump to stop reusing summaries made with an earlier prompt."""


class CommandEntry(_Entry):
    """A summarizer that is a local program."""

    kind: Literal["command"]
    """Discriminator."""
    command: Argv
    """The program and its arguments (no shell)."""
    timeout: Seconds = 120.0
    """Seconds before it is stopped."""
    prompt_version: str = "1"
    """Bump to stop reusing summaries made with an earlier version of the program."""


class CustomEntry(_Entry):
    """A custom output handler: the full output on stdin, what the context shows on stdout."""

    command: Argv
    """The program and its arguments (no shell)."""
    timeout: Seconds = 60.0
    """Seconds before it is stopped."""
    version: str = "1"
    """Bump to make outputs condensed by an earlier version be made again."""


class LocalConfig(_Entry):
    """The whole file."""

    summarizers: dict[HandlerName, Annotated[OpenAIEntry | CommandEntry, Field(discriminator="kind")]] = {}
    """Summarizers by name."""
    custom: dict[HandlerName, CustomEntry] = {}
    """Custom output handlers by name."""


@dataclass(frozen=True)
class Config:
    """The local configuration as loaded, and where it came from (None: no file, the defaults)."""

    values: LocalConfig = field(default_factory=LocalConfig)
    path: Path | None = None

    def where(self) -> str:
        return str(self.path) if self.path is not None else f"{default_path()} (absent)"


def default_path() -> Path:
    """``$TURNLOG_CONFIG``, else ``$XDG_CONFIG_HOME/turnlog/config.toml`` (``~/.config`` by default)."""
    named = os.environ.get("TURNLOG_CONFIG")
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "turnlog" / "config.toml"


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """The local configuration. A file named explicitly (``path`` or ``$TURNLOG_CONFIG``) must
    exist; the default file may be absent (then only ``extractive`` and ``simple`` are available)."""
    explicit = path is not None or bool(os.environ.get("TURNLOG_CONFIG"))
    where = Path(path).expanduser() if path is not None else default_path()
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"configuration file {where} does not exist") from None
        return Config()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {where}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"configuration file {where} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {where} is not valid TOML: {exc}") from None
    try:
        values = LocalConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"configuration file {where}: {describe_validation_error(exc)}") from None
    return Config(values, where)


def summarizer_named(name: str, config: Config) -> Summarizer:
    """The summarizer a policy names: ``extractive``, or a ``[summarizers.NAME]`` entry."""
    entry = config.values.summarizers.get(name)
    if entry is None:
        if name == BUILT_IN:
            return ExtractiveSummarizer()
        raise ConfigError(
            f"summarizer {name!r} is not configured: add [summarizers.{name}] to {config.where()} "
            f"(or use {BUILT_IN!r}, which is built in)"
        )
    if isinstance(entry, OpenAIEntry):
        return OpenAISummarizer(
            entry.model,
            base_url=entry.base_url,
            api_key_env=entry.api_key_env,
            timeout=entry.timeout,
            prompt_version=entry.prompt_version,
            name=name,
        )
    return CommandSummarizer(
        entry.command, timeout=entry.timeout, prompt_version=entry.prompt_version, name=name
    )


CustomHandler = Callable[[str], str]
"""A custom output handler: the full output in, the text the context shows out."""


@dataclass(frozen=True)
class Handler:
    """A resolved custom handler, with the version that keys what it made."""

    name: str
    run: CustomHandler
    version: str = "1"


def custom_named(name: str, config: Config, callables: Mapping[str, CustomHandler] | None = None) -> Handler:
    """The custom handler a policy names: a callable the API caller registered under that name, or
    a ``[custom.NAME]`` entry of the local configuration."""
    if callables and name in callables:
        return Handler(name, callables[name], getattr(callables[name], "version", "1"))
    entry = config.values.custom.get(name)
    if entry is None:
        raise ConfigError(
            f"custom output handler {name!r} is not configured: add [custom.{name}] to {config.where()}"
        )
    return Handler(name, _command_handler(name, entry), entry.version)


def _command_handler(name: str, entry: CustomEntry) -> CustomHandler:
    def run(text: str) -> str:
        try:
            done = subprocess.run(
                entry.command,
                input=text,
                capture_output=True,
                text=True,
                timeout=entry.timeout,
                check=False,
            )
        except FileNotFoundError:
            raise ConfigError(f"custom handler {name!r}: program not found: {entry.command[0]}") from None
        except subprocess.TimeoutExpired:
            raise ConfigError(f"custom handler {name!r} timed out after {entry.timeout:g} s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise ConfigError(f"custom handler {name!r} exited with {done.returncode}: {last[:200]}")
        return done.stdout

    return run


__all__ = [
    "BUILT_IN",
    "CommandEntry",
    "Config",
    "ConfigError",
    "CustomEntry",
    "CustomHandler",
    "Handler",
    "LocalConfig",
    "OpenAIEntry",
    "custom_named",
    "default_path",
    "load_config",
    "summarizer_named",
]
