"""What text of a message is indexed, and how it is cut into keyword tokens.

FTS5's ``unicode61`` tokenizer treats a run of Chinese characters as one token (there are no spaces),
so "我对花生过敏" would only match itself. We therefore store CJK text pre-segmented: every CJK
character becomes its own token, and a query matches consecutive characters as FTS5 phrases
(bigrams), which is the usual character-bigram approach without needing a custom tokenizer. The same
function segments stored text and queries, so both sides always agree.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Mapping

from core.messages import Message

# Han, Hiragana/Katakana, Hangul: scripts written without spaces between words.
_CJK_CHAR = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK = re.compile(f"[{_CJK_CHAR}]")
_CJK_RUN = re.compile(f"[{_CJK_CHAR}]+")
_WORD = re.compile(r"\w+", re.UNICODE)

# Query-side only: words that match nearly every message add cost and noise to an OR query.
# Stored text keeps them (phrases and other users' queries may still need them). The list is small on
# purpose: measured on LoCoMo (public split), NLTK's 179-word list lost .007 keyword recall@10 against
# this one (it drops "after", "both", "during", "before"...), and no list at all lost .029.
# The last line is what ``\w+`` leaves of clitics ("Caroline's", "hadn't", "I'm", "we'll", "you're",
# "I've", "I'd"): alone they carry nothing and match a large share of any English text. ("won", as in
# "won't", stays: it is also a verb.)
STOP_WORDS = frozenset(
    """a an and are as at be been but by can could did do does doing for from had has have he her hers him
    his how i if in into is it its me my of on or our she so than that the their them then there they this
    to was we were what when where which who whom why will with would you your yours
    s t m d ll re ve don didn doesn isn aren wasn weren hasn haven hadn couldn wouldn shouldn""".split()
)


def message_text(message: Message) -> str:
    """The text recall indexes and matches: ``content.content`` if non-empty, else text parts joined.

    Same rule as the query side (spec §2.4), so a message and the same words asked as a query agree.
    """
    return content_text(message.content)


def content_text(content: Mapping[str, Any] | Any) -> str:
    if not isinstance(content, Mapping):
        return content if isinstance(content, str) else ""
    direct = content.get("content")
    if isinstance(direct, str) and direct.strip():
        return direct
    parts = content.get("parts")
    if not isinstance(parts, list):
        return ""
    texts = [p["text"] for p in parts if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return " ".join(t for t in texts if t)


def segment(text: str) -> str:
    """Text as stored in the keyword index: NFKC-normalised, CJK characters spaced apart."""
    normalised = unicodedata.normalize("NFKC", text)
    return _CJK_RUN.sub(lambda m: " " + " ".join(m.group(0)) + " ", normalised)


def keyword_terms(text: str) -> list[str]:
    """The quoted FTS5 terms of free text, in query order, without repeats.

    Latin words become terms unless they are stop words (names, numbers and dates always stay); each
    CJK run contributes its character bigrams as quoted phrases (a lone character stands for itself).
    Every term is quoted, so user text can never be parsed as FTS5 syntax (``NEAR``, ``-``, ``*``,
    column filters). A query of stop words only ("what is it?") keeps them rather than return nothing.
    """
    normalised = unicodedata.normalize("NFKC", text).casefold()
    terms: list[str] = []
    seen: set[str] = set()

    def add(term: str) -> None:
        if term not in seen:
            seen.add(term)
            terms.append('"' + term.replace('"', '""') + '"')

    for word in _WORD.findall(normalised):
        if not _CJK.search(word):
            if word not in STOP_WORDS:
                add(word)
            continue
        # A word may mix scripts ("iphone手机"): Latin pieces stay words, CJK runs become bigrams.
        for piece in re.split(f"([{_CJK_CHAR}]+)", word):
            if not piece:
                continue
            if _CJK.match(piece):
                chars = list(piece)
                if len(chars) == 1:
                    add(chars[0])
                for a, b in zip(chars, chars[1:]):
                    add(f"{a} {b}")
            elif piece not in STOP_WORDS:
                add(piece)
    if not terms:
        for w in _WORD.findall(normalised):
            if not _CJK.search(w):
                add(w)
    return terms


def keyword_query(text: str) -> str | None:
    """An FTS5 MATCH expression for free text (its ``keyword_terms`` OR-ed; BM25 does the ranking),
    or None when nothing searchable is left."""
    terms = keyword_terms(text)
    return " OR ".join(terms) if terms else None
