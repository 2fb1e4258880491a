"""Runs the examples of README.md (and docs/*.md) and compares their outputs.

A ```console block holds commands (`$ ` starts one; a line ending in `\\` continues it) each
followed by its expected output. A line that is `...` (indentation aside) matches any number of
lines, `...` inside a line any text on that line, and trailing whitespace is ignored. A ```python
block is run whole with the venv's Python. A block right after a line `<!-- not run: REASON -->` is
not run. Every block of one file runs in order in one temporary folder (with links to the
repository's scripts/, tests/ and docs/), as a reader following the file would, with the venv's
`turnlog` first on PATH and TURNLOG_DETERMINISTIC set (store.determinism) so that ids, times and
salts are the same on every run.

`python -m tests.helpers.readme_blocks --update [FILE ...]` rewrites the expected outputs from a real
run, keeping `...` lines and parts where they still match (so does TURNLOG_README_UPDATE=1 pytest
tests/test_readme.py); without --update it prints what differs.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WILDCARD = "..."
_FENCE = re.compile(r"^```(\w*)\s*$")
_TOKEN = re.compile(r"\.\.\.|\w+|\s+|[^\w\s]")
_MARKER = re.compile(r"^<!--\s*not run\b(.*?)-->\s*$")
LINKED = ("scripts", "tests", "docs")
"""The repository's folders a reader's working folder (the clone) has: examples read files in them."""
TIMEOUT = 300


@dataclass
class Command:
    """One `$ ` command of a console block and the output the file says it prints."""

    line: int
    """The 1-based line of its `$ `."""
    text: str
    """The command as the shell gets it (continuation lines joined with their line breaks)."""
    expected: list[str]
    output_start: int
    """0-based index in the file's lines of the first expected-output line."""
    output_end: int
    """0-based index after the last non-blank expected-output line."""


@dataclass
class Block:
    """One fenced example of a Markdown file."""

    path: Path
    line: int
    """The 1-based line of its opening fence."""
    lang: str
    body: list[str]
    not_run: str | None = None
    """The marker's reason ("" when it gives none) when the block is marked not to run."""
    commands: list[Command] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"


@dataclass
class Outcome:
    """What running a block gave: for each command, its output; a failure message when it differs."""

    block: Block
    outputs: list[list[str]]
    failure: str | None


def parse(path: Path) -> list[Block]:
    """The console and python blocks of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        start = index
        end = start + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        lang = fence.group(1)
        if lang in ("console", "python"):
            block = Block(path, start + 1, lang, lines[start + 1 : end], _marker(lines, start))
            if lang == "console":
                block.commands = _commands(lines, start + 1, end)
            blocks.append(block)
        index = end + 1
    return blocks


def _marker(lines: Sequence[str], fence: int) -> str | None:
    """The reason of the not-run marker on the last non-blank line before a fence, if there is one."""
    index = fence - 1
    while index >= 0 and not lines[index].strip():
        index -= 1
    found = _MARKER.match(lines[index].strip()) if index >= 0 else None
    if not found:
        return None
    return found.group(1).strip().removeprefix(":").strip()


def _commands(lines: Sequence[str], start: int, end: int) -> list[Command]:
    commands: list[Command] = []
    index = start
    while index < end:
        if not lines[index].startswith("$ "):
            if lines[index].strip() and not commands:
                raise ValueError(f"line {index + 1}: a console block's first line must be a `$ ` command")
            index += 1
            continue
        first = index
        text = [lines[index][2:]]
        while text[-1].endswith("\\") and index + 1 < end:
            index += 1
            text.append(lines[index])
        index += 1
        output_start = index
        while index < end and not lines[index].startswith("$ "):
            index += 1
        output_end = index
        while output_end > output_start and not lines[output_end - 1].strip():
            output_end -= 1
        expected = [line.rstrip() for line in lines[output_start:output_end]]
        commands.append(Command(first + 1, "\n".join(text), expected, output_start, output_end))
    return commands


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.split(WILDCARD)) + r"\Z", re.DOTALL)


def _is_wildcard(line: str) -> bool:
    """Whether an expected line is the `...` that matches any number of lines (indented or not, as
    in JSON)."""
    return line.strip() == WILDCARD


def line_matches(expected: str, actual: str) -> bool:
    """Whether one output line matches one expected line (`...` inside it matching any text)."""
    if WILDCARD not in expected:
        return expected == actual
    return _pattern(expected).match(actual) is not None


def matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Whether output lines match expected lines, a line `...` matching any number of lines."""
    memo: dict[tuple[int, int], bool] = {}

    def at(e: int, a: int) -> bool:
        key = (e, a)
        if key not in memo:
            if e == len(expected):
                result = a == len(actual)
            elif _is_wildcard(expected[e]):
                result = at(e + 1, a) or (a < len(actual) and at(e, a + 1))
            else:
                result = a < len(actual) and line_matches(expected[e], actual[a]) and at(e + 1, a + 1)
            memo[key] = result
        return memo[key]

    return at(0, 0)


def updated(expected: Sequence[str], actual: Sequence[str]) -> list[str]:
    """New expected lines for an output: the old ones if they still match; else the real output, with
    the old lines kept where they still match the line they stand for, `...` lines kept around the
    parts that are found again, and `...` parts of a line kept where the rest of it is unchanged."""
    if matches(expected, actual):
        return list(expected)
    segments: list[list[str]] = [[]]
    wildcards: list[str] = []
    for line in expected:
        if _is_wildcard(line):
            wildcards.append(line)
            segments.append([])
        else:
            segments[-1].append(line)
    if not wildcards:
        return _aligned(expected, actual)
    head, *middle, tail = segments
    if len(head) + len(tail) > len(actual):
        return list(actual)
    end = len(actual) - len(tail)
    result = _aligned(head, actual[: len(head)])
    cursor = len(head)
    for wildcard, segment in zip(wildcards, [*middle, None], strict=True):
        result.append(wildcard)
        if segment is None:
            break
        found = _find(segment, actual, cursor, end)
        if found is not None:
            result += _aligned(segment, actual[found : found + len(segment)])
            cursor = found + len(segment)
    result += _aligned(tail, actual[end:])
    return result if matches(result, actual) else list(actual)


def _find(segment: Sequence[str], actual: Sequence[str], start: int, end: int) -> int | None:
    """Where in actual[start:end] a run of lines most like ``segment`` begins (None when none is)."""
    best, where = 0.6, None
    for index in range(start, end - len(segment) + 1):
        window = actual[index : index + len(segment)]
        score = sum(_similarity(e, a) for e, a in zip(segment, window, strict=True)) / max(1, len(segment))
        if score > best:
            best, where = score, index
    return where


def _similarity(expected: str, actual: str) -> float:
    return 1.0 if line_matches(expected, actual) else difflib.SequenceMatcher(None, expected, actual).ratio()


def _aligned(expected: Sequence[str], actual: Sequence[str]) -> list[str]:
    """The actual lines, each kept as its expected line where that still matches it, or with the
    expected line's `...` parts where only they changed."""
    result: list[str] = []
    opcodes = difflib.SequenceMatcher(None, list(expected), list(actual), autojunk=False).get_opcodes()
    for tag, e1, e2, a1, a2 in opcodes:
        if tag == "equal":
            result += expected[e1:e2]
        elif tag == "replace" and e2 - e1 == a2 - a1:
            result += [_line(e, a) for e, a in zip(expected[e1:e2], actual[a1:a2], strict=True)]
        else:
            result += actual[a1:a2]
    return result


def _line(expected: str, actual: str) -> str:
    """One expected line for an actual one: the expected line if it matches; else the actual line
    with the text the expected line's `...` parts stood for put back as `...` where the text around
    them is unchanged."""
    if line_matches(expected, actual) or WILDCARD not in expected:
        return expected if line_matches(expected, actual) else actual
    old, new = _TOKEN.findall(expected), _TOKEN.findall(actual)
    parts: list[str] = []
    for tag, e1, e2, a1, a2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            parts += old[e1:e2]
        elif WILDCARD in old[e1:e2]:
            parts.append(WILDCARD)
        else:
            parts += new[a1:a2]
    candidate = "".join(parts)
    return candidate if line_matches(candidate, actual) else actual


def environment(state: Path, home: Path) -> dict[str, str]:
    """The environment the examples run in: the venv first on PATH, deterministic ids and clock, a
    home of their own, and none of the caller's TURNLOG_ settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TURNLOG_")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        TURNLOG_DETERMINISTIC=str(state),
        HOME=str(home),
        NO_COLOR="1",
        PYTHONPATH=str(ROOT),
        PYTHONDONTWRITEBYTECODE="1",
    )
    for name in ("VIRTUAL_ENV", "COLUMNS", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env.pop(name, None)
    return env


class Runner:
    """Runs one file's blocks in order in one temporary folder, each at most once, so that a test of
    a block can ask for its outcome and get every earlier block run first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.blocks = parse(path)
        self._temp = Path(tempfile.mkdtemp(prefix="turnlog-readme-"))
        self.folder = self._temp / "work"
        self.folder.mkdir()
        (self._temp / "home").mkdir()
        for name in LINKED:
            (self.folder / name).symlink_to(ROOT / name, target_is_directory=True)
        self.env = environment(self._temp / "determinism.json", self._temp / "home")
        self._done: dict[int, Outcome] = {}

    def close(self) -> None:
        shutil.rmtree(self._temp, ignore_errors=True)

    def outcome(self, block: Block) -> Outcome:
        for earlier in self.blocks:
            if earlier.line not in self._done:
                self._done[earlier.line] = self._run(earlier)
            if earlier.line == block.line:  # the test's block is parsed apart: the same line, not object
                break
        return self._done[block.line]

    def outcomes(self) -> Iterator[Outcome]:
        for block in self.blocks:
            yield self.outcome(block)

    def _run(self, block: Block) -> Outcome:
        if block.not_run is not None:
            return Outcome(block, [], None)
        if block.lang == "python":
            script = self._temp / f"block_{block.line}.py"
            script.write_text("\n".join(block.body) + "\n", encoding="utf-8")
            ran = self._shell([str(BIN / "python"), str(script)])
            if ran.returncode:
                failure = f"{block.name}: the python block exits {ran.returncode}:\n{ran.stdout}"
                return Outcome(block, [], failure)
            return Outcome(block, [], None)
        outputs: list[list[str]] = []
        failures: list[str] = []
        for command in block.commands:
            ran = self._shell(["bash", "-o", "pipefail", "-c", command.text])
            actual = _lines(ran.stdout)
            outputs.append(actual)
            if not matches(command.expected, actual):
                failures.append(
                    f"{self.path.name}:{command.line}: $ {command.text}\n"
                    + "expected:\n"
                    + "".join(f"  {line}\n" for line in command.expected)
                    + f"got (exit status {ran.returncode}):\n"
                    + "".join(f"  {line}\n" for line in actual)
                )
        return Outcome(block, outputs, "\n".join(failures) or None)

    def _shell(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT,
        )


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def rewrite(path: Path, outcomes: Sequence[Outcome]) -> int:
    """Writes each run command's real output into the file as its expected output (see
    :func:`updated`); returns how many commands changed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    changes: list[tuple[Command, list[str]]] = []
    for outcome in outcomes:
        for command, actual in zip(outcome.block.commands, outcome.outputs, strict=False):
            new = updated(command.expected, actual)
            if new != command.expected:
                changes.append((command, new))
    for command, new in sorted(changes, key=lambda change: -change[0].output_start):
        lines[command.output_start : command.output_end] = new
    if changes:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(changes)


def documents() -> list[Path]:
    """README.md and every docs/*.md with a console or python block."""
    found = [ROOT / "README.md"]
    found += [path for path in sorted((ROOT / "docs").glob("*.md")) if parse(path)]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.readme_blocks", description=__doc__)
    parser.add_argument("--update", action="store_true", help="rewrite expected outputs from a real run")
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md, docs/*.md)")
    args = parser.parse_args(argv)
    status = 0
    for path in args.files or documents():
        runner = Runner(path.resolve())
        try:
            outcomes = list(runner.outcomes())
        finally:
            runner.close()
        for outcome in outcomes:
            if outcome.block.not_run is not None:
                print(f"{outcome.block.name}: not run: {outcome.block.not_run or '(no reason given)'}")
            elif outcome.failure and (not args.update or outcome.block.lang == "python"):
                print(outcome.failure)
                status = 1
        if args.update:
            print(f"{path.name}: {rewrite(path, outcomes)} outputs rewritten")
    return status


if __name__ == "__main__":
    sys.exit(main())
