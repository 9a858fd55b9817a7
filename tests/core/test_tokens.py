"""Token counting: the caches keep short texts only (long ones under a digest), counts unchanged."""

from __future__ import annotations

import sys

from core.observational.tokens import count_text
from core.tokens import EstimatingTokenizer, default_tokenizer


def _text(n: int, seed: str) -> str:
    return "".join(f"{seed} paragraph {i} of a pasted document, 文書 {i}. " for i in range(n))


def test_a_long_text_is_counted_right_and_not_kept_by_the_caches() -> None:
    """A process counting thousands of pasted documents (up to the 1 MB message limit each) kept every
    one of them alive in two 8,192-entry caches: gigabytes for a long-running server."""
    tok = default_tokenizer()
    big = _text(2000, "alpha")
    assert len(big) > 50_000
    before = sys.getrefcount(big)
    first = tok.count(big)
    assert tok.count(big) == first  # the second count comes from the cache, keyed by a digest
    other = _text(2000, "omega")
    assert count_text(tok, other) == tok.count(other)
    assert sys.getrefcount(big) == before
    assert sys.getrefcount(other) == before
    if hasattr(tok, "_enc"):  # the exact tokenizer: the digest-keyed count is the real count
        assert first == len(tok._enc.encode(big, disallowed_special=()))


def test_short_texts_still_count_as_before() -> None:
    tok = default_tokenizer()
    for text in ("", " ", "hello world", "中文字符测试", "👨‍👩‍👧‍👦"):
        assert tok.count(text) == tok.count(text) and count_text(tok, text) == tok.count(text)
    assert EstimatingTokenizer().count("x" * 9001) == 2251
