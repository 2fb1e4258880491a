"""The synthetic agent workload: a seeded stream of messages shaped like a coding agent's session
(about 10% user, 40% assistant, 25% assistant tool calls, 25% tool returns), with real text taken
from the Python standard library's own sources so the tokenizer sees code, prose and JSON."""

from __future__ import annotations

import ast
import bisect
import itertools
import json
import math
import random
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SYSTEM_PROMPT = (
    "You are a careful coding agent working in a Python repository. Use the tools to read files, "
    "search the code, run the tests and look up documentation. Explain what you change and why, "
    "keep answers short, and never invent file contents you have not read."
)

TOOLS = ("read_file", "search_code", "run_tests", "fetch_docs", "query_db")


@dataclass(frozen=True, slots=True)
class Msg:
    """One message of the workload, before any store's own format."""

    kind: str
    """system, user, assistant, call (an assistant message with one tool call) or tool."""
    content: str
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None


@dataclass
class _Text:
    """A body of text as units (lines or paragraphs) with running word counts, so a slice of about
    W words is found with one bisect."""

    units: list[str]
    cum: list[int]
    sep: str

    @classmethod
    def of(cls, units: list[str], sep: str) -> _Text:
        units = [u for u in units if u.strip()] if sep == "\n\n" else units
        cum = [0, *itertools.accumulate(len(u.split()) for u in units)]
        return cls(units, cum, sep)

    def take(self, rng: random.Random, words: int) -> str:
        words = min(words, self.cum[-1] // 2)
        last_start = bisect.bisect_left(self.cum, self.cum[-1] - words) - 1
        start = rng.randrange(0, max(1, last_start))
        end = bisect.bisect_left(self.cum, self.cum[start] + words, lo=start + 1)
        return self.sep.join(self.units[start : max(end, start + 1)])


@dataclass
class Corpus:
    code: _Text
    prose: _Text
    paths: list[str]
    identifiers: list[str]
    sentences: list[str]


@lru_cache(maxsize=1)
def corpus() -> Corpus:
    """Code, prose (docstrings and comments) and names from the standard library, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in root.rglob("*.py")
        if not any(part in {"test", "tests", "site-packages", "idlelib", "lib2to3"} for part in p.parts)
    )
    code_lines: list[str] = []
    paragraphs: list[str] = []
    paths: list[str] = []
    identifiers: set[str] = set()
    for path in files:
        try:
            text = path.read_text("utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        rel = str(path.relative_to(root))
        paths.append(rel)
        code_lines += text.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    paragraphs += [" ".join(p.split()) for p in doc.split("\n\n")]
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and len(identifiers) < 20000:
                identifiers.add(node.name)
        comment: list[str] = []
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("#") and not stripped.startswith("#!"):
                comment.append(stripped.lstrip("#").strip())
            elif comment:
                if len(comment) > 1 or len(comment[0].split()) > 6:
                    paragraphs.append(" ".join(comment))
                comment = []
    prose = _Text.of(paragraphs, "\n\n")
    sentences = [s.strip() + "." for p in paragraphs[:20000] for s in p.split(". ") if len(s.split()) > 4]
    return Corpus(_Text.of(code_lines, "\n"), prose, paths, sorted(identifiers), sentences)


def _loguniform(rng: random.Random, low: float, high: float) -> int:
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


class Workload:
    """The same seeded stream of messages for every store."""

    def __init__(self, seed: int = 20260422) -> None:
        self.seed = seed
        self.c = corpus()

    # -- texts ----------------------------------------------------------------------------------

    def _prose(self, rng: random.Random, words: int) -> str:
        return self.c.prose.take(rng, words)

    def _code(self, rng: random.Random, words: int) -> str:
        return self.c.code.take(rng, words)

    def _json(self, rng: random.Random, words: int, tool: str) -> str:
        items: list[dict[str, object]] = []
        count = 0
        while count < words:
            if tool == "search_code":
                item: dict[str, object] = {
                    "path": rng.choice(self.c.paths),
                    "line": rng.randint(1, 3000),
                    "match": self.c.code.take(rng, 6).strip(),
                    "score": round(rng.random(), 3),
                }
            else:
                item = {
                    "id": rng.randint(1, 10**6),
                    "name": rng.choice(self.c.identifiers),
                    "module": rng.choice(self.c.paths),
                    "summary": rng.choice(self.c.sentences),
                    "size": rng.randint(10, 10**5),
                    "tags": rng.sample(self.c.identifiers[:400], 3),
                    "active": rng.random() < 0.7,
                }
            items.append(item)
            count += len(json.dumps(item, indent=2).split())
        return json.dumps({"tool": tool, "count": len(items), "results": items}, indent=2)

    def _arguments(self, rng: random.Random, tool: str) -> str:
        if tool == "read_file":
            args: dict[str, object] = {"path": rng.choice(self.c.paths), "start_line": rng.randint(1, 500)}
        elif tool == "search_code":
            args = {"pattern": rng.choice(self.c.identifiers), "glob": "**/*.py", "max_results": 50}
        elif tool == "run_tests":
            args = {"paths": rng.sample(self.c.paths, 2), "verbose": rng.random() < 0.5}
        elif tool == "fetch_docs":
            args = {"topic": rng.choice(self.c.identifiers), "section": rng.choice(self.c.sentences)[:60]}
        else:
            args = {"sql": f"SELECT * FROM symbols WHERE name LIKE '{rng.choice(self.c.identifiers)}%'"}
        return json.dumps(args)

    def _tool_output(self, rng: random.Random, tool: str) -> str:
        # 50 to 5,000 words, most outputs short (median about 160 words), and 1% of 25k-35k words.
        words = rng.randint(25_000, 35_000) if rng.random() < 0.01 else int(50 * 100 ** (rng.random() ** 2))
        if tool in ("search_code", "query_db"):
            return self._json(rng, words, tool)
        if tool == "fetch_docs":
            return self._prose(rng, words)
        if tool == "run_tests":
            log = self._code(rng, words)
            return f"$ python -m pytest -q\n{log}\nFAILED tests/test_core.py::test_roundtrip - AssertionError"
        return self._code(rng, words)

    # -- the stream -------------------------------------------------------------------------------

    def stream(self, *, salt: int = 0, call_prefix: str = "call") -> Iterator[Msg]:
        """Messages forever: the system message, then turns (a user message, then the agent's
        steps: assistant texts and tool calls each followed at once by its return)."""
        rng = random.Random(self.seed * 1000 + salt)
        calls = itertools.count(1)
        if salt == 0:
            yield Msg("system", SYSTEM_PROMPT)
        while True:
            user = self._prose(rng, _loguniform(rng, 5, 300))
            if rng.random() < 0.2:
                user += "\n\n```python\n" + self._code(rng, _loguniform(rng, 10, 200)) + "\n```"
            yield Msg("user", user)
            steps = ["pair"] * rng.randint(0, 5) + ["text"] * rng.randint(0, 6)
            rng.shuffle(steps)
            steps.append("text")
            for step in steps:
                if step == "text":
                    text = self._prose(rng, _loguniform(rng, 10, 400))
                    if rng.random() < 0.3:
                        text += "\n\n```python\n" + self._code(rng, _loguniform(rng, 20, 300)) + "\n```"
                    yield Msg("assistant", text)
                else:
                    tool = rng.choice(TOOLS)
                    call_id = f"{call_prefix}_{next(calls):07d}"
                    said = self._prose(rng, _loguniform(rng, 5, 40)) if rng.random() < 0.3 else ""
                    yield Msg("call", said, call_id, tool, self._arguments(rng, tool))
                    yield Msg("tool", self._tool_output(rng, tool), call_id, tool)

    def session(self, n: int) -> list[Msg]:
        """The first ``n`` messages (one more if the n-th is a call, so no call is left open)."""
        msgs = list(itertools.islice(self.stream(), n + 1))
        if msgs[n - 1].kind == "call":
            return msgs
        return msgs[:n]

    def probe_turns(self, count: int, salt: int = 1) -> list[list[Msg]]:
        """Typical turns to append to a session before building its next context: the messages
        between two model calls (the model is called after a user message or a tool return)."""
        turns: list[list[Msg]] = []
        current: list[Msg] = []
        for msg in self.stream(salt=salt, call_prefix=f"probe{salt}"):
            current.append(msg)
            if msg.kind in ("user", "tool"):
                turns.append(current)
                current = []
                if len(turns) == count:
                    return turns
        return turns  # pragma: no cover - the stream is endless


def describe(msgs: list[Msg]) -> dict[str, object]:
    """The mix and sizes of a list of messages, for the results."""
    kinds: dict[str, int] = {}
    for m in msgs:
        kinds[m.kind] = kinds.get(m.kind, 0) + 1
    sizes = [len(m.content.encode()) + len((m.arguments or "").encode()) for m in msgs]
    tool_words = [len(m.content.split()) for m in msgs if m.kind == "tool"]
    return {
        "messages": len(msgs),
        "share": {k: round(100 * v / len(msgs), 1) for k, v in sorted(kinds.items())},
        "mean_bytes": round(sum(sizes) / len(sizes)),
        "median_bytes": sorted(sizes)[len(sizes) // 2],
        "tool_words_min": min(tool_words, default=0),
        "tool_words_max": max(tool_words, default=0),
        "tool_over_25k_words": sum(1 for w in tool_words if w >= 25_000),
    }
