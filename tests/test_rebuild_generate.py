"""The rebuild bench's store generator (scripts/benchlib/rebuild.py): passing over its message pool
several times, it tokenizes each distinct text once, and stores the counts a fresh count makes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnlog.store.tokenizer as tokenizer_module
from turnlog.store import SQLiteStore
from turnlog.store.append_rules import event_tokens
from turnlog.store.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def benchlib() -> Iterator[Any]:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from benchlib import rebuild, workload

        yield rebuild, workload
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_generate_tokenizes_each_text_of_the_pool_once(
    benchlib: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuild, workload = benchlib
    pool = [
        workload.Msg("system", "be brief"),
        *[workload.Msg("user", f"question number {i} " + "word " * (i % 7)) for i in range(30)],
    ]
    # More texts than the tokenizer keeps by default: without the wider memory each pass would
    # tokenize them all again.
    monkeypatch.setattr(tokenizer_module, "COUNTS_KEPT", 8)
    tokenizer_module.forget_counts()
    encoding = load_tokenizer()._encoding
    tokenized: list[str] = []
    real = type(encoding).encode_ordinary
    monkeypatch.setattr(
        type(encoding), "encode_ordinary", lambda self, text: tokenized.append(text) or real(self, text)
    )
    got = rebuild.generate(tmp_path / "s.db", pool, 150, 20)
    assert tokenizer_module.COUNTS_KEPT == 8  # given back
    monkeypatch.undo()
    assert got["events"] >= 150
    distinct = {m.content for m in pool}
    assert len(tokenized) == len(distinct) and set(tokenized) == distinct
    with SQLiteStore.open(tmp_path / "s.db") as store:
        records = list(store.iter_after(0))
        assert len(records) == got["events"] and store.pending_token_counts() == 0
        for record in records:  # the counts a fresh count makes
            assert record.tokens == event_tokens(store.tokenizer, record.event)
