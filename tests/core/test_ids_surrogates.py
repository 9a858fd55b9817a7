"""``core.ids.lone_surrogate`` finds a lone surrogate by encoding the text (UTF-8 cannot encode one) instead of
searching it with a regex: the answers are the regex's, code point named included."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.ids import first_in_strings, lone_surrogate, surrogate_in

_SURROGATE = re.compile("[\ud800-\udfff]")


def _regex_search(text: str) -> int | None:
    match = _SURROGATE.search(text)
    return None if match is None else ord(match.group())


def _by_regex(value: Any) -> str | None:
    """The answer as the regex gave it (the code before the encode-first check), over the same walk."""
    return first_in_strings(value, _regex_search)


TRICKY = [
    "", "a", "plain ascii \x00 \x7f", "é", "日本語のテキスト", "emoji 🙂 and 🙂", "\U0010ffff", "\ufffd", "\ufeff",
    "\ud800", "\udfff", "\udc80", "x\ud83d", "\ude00y", "\ud83d\ude00",  # (two lone halves: Python never pairs them)
    "é\udcff日本", "🙂\ud800🙂\udfff", "مرحبا\u200f\ud834", "a" * 10_000 + "\udbff", "\udfff\ud800",
]


@pytest.mark.parametrize("text", TRICKY)
def test_each_tricky_string_gets_the_regexs_answer(text: str) -> None:
    assert lone_surrogate(text) == _by_regex(text)
    assert lone_surrogate({text: [text, (1, None, text)]}) == _by_regex({text: [text, (1, None, text)]})


def test_the_first_surrogate_of_a_string_is_named() -> None:
    assert [surrogate_in(t) for t in ("", "abc", "é日🙂", "é\udcff日\ud800")] == [None, None, None, 0xDCFF]
    assert lone_surrogate("é\udcff日\ud800") == "a lone surrogate (U+DCFF), which has no UTF-8 form"
    assert lone_surrogate("🙂 fine") is None and lone_surrogate("") is None


_chars = st.one_of(st.characters(codec="utf-8"), st.integers(0xD800, 0xDFFF).map(chr))
_text = st.text(_chars, max_size=40)
_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text),
                     lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
                     max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_json)
def test_any_json_like_value_gets_the_regexs_answer(value: Any) -> None:
    assert lone_surrogate(value) == _by_regex(value)
