"""What text of a message is indexed, and how it is cut into keyword tokens.

FTS5's ``unicode61`` tokenizer treats a run of Chinese characters as one token (there are no spaces),
so "我对花生过敏" would only match itself. We therefore store CJK text pre-segmented: every CJK
character becomes its own token, and a query matches consecutive characters as FTS5 phrases
(bigrams), which is the usual character-bigram approach without needing a custom tokenizer. The same
function segments stored text and queries, so both sides always agree.
"""

from __future__ import annotations

import calendar
import hashlib
import re
import unicodedata
from collections import abc
from dataclasses import dataclass
from datetime import date, timedelta
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


def recall_text(message: Message) -> str:
    """The text recall embeds and matches: ``content.content`` if non-empty, else text parts joined.

    Mastra's query rule (spec §2.4), used for stored messages too, so a message and the same words
    asked as a query agree. It differs from ``Message.text`` (text parts first, what the model reads)
    when a Mastra row's ``content.content`` says something else than its parts.
    """
    return recall_content_text(message.content)


# The old name, still imported by core/processors/semantic_recall.py (owned by another change in
# flight); remove once that import reads ``recall_text``.
message_text = recall_text


def recall_content_text(content: Mapping[str, Any] | Any) -> str:
    """``recall_text`` of a stored row's content dict (the index reads raw rows in SQL)."""
    if not isinstance(content, (dict, abc.Mapping)):  # dict first: typing's Mapping check is slow
        return content if isinstance(content, str) else ""
    direct = content.get("content")
    if isinstance(direct, str) and direct.strip():
        return direct
    parts = content.get("parts")
    if not isinstance(parts, list):
        return ""
    texts = [p["text"] for p in parts if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return " ".join(t for t in texts if t)


# How much of a long message, its context and a query is embedded. A text model's cost grows faster than
# the text (USE on 2 cores: 2,000 characters ~40 ms, 8,000 0.55 s, a 440 kB message 35 s: one hostile
# message held a gateway's turn that long, at its save and again as a query), and one vector of a long
# text says little about any part of it. Keyword search still reads the whole message.
MAX_EMBED_CHARS = 2_000
MAX_CONTEXT_CHARS = 1_000
#: The longest search query a client from outside may send (the MCP server's ``search_memory``): what recall
#: embeds of a query (``query_text``), the same number, so no part of an accepted query is left out of its vector.
#: (A turn's own query, the user's message, is not refused: it is embedded to here and its keyword terms read to
#: ``MAX_QUERY_TERMS``.)
MAX_QUERY_CHARS = MAX_EMBED_CHARS


def passage_text(context: str, text: str) -> str:
    """What is embedded for a message: its context (the previous message of its thread: its last
    ``MAX_CONTEXT_CHARS``), a newline, then its own text (its first ``MAX_EMBED_CHARS``;
    ``core.recall.passages``)."""
    text = text[:MAX_EMBED_CHARS]
    return f"{context[-MAX_CONTEXT_CHARS:]}\n{text}" if context else text


def query_text(query: str) -> str:
    """What is embedded for a search: the query's first ``MAX_EMBED_CHARS``."""
    return query[:MAX_EMBED_CHARS]


def passage_hash(context: str, text: str) -> str:
    """A short, stable digest of (context, text): equal hashes mean the same passage and keyword doc."""
    data = context.encode("utf-8", "surrogatepass") + b"\0" + text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def segment(text: str) -> str:
    """Text as stored in the keyword index: NFKC-normalised, CJK characters spaced apart, a NUL a
    space (a word break: libSQL's driver cuts a text value at its first NUL when it reads it back, and
    Postgres refuses NUL in text, so the words after one would be lost or the message unindexed)."""
    normalised = unicodedata.normalize("NFKC", text.replace("\x00", " ") if "\x00" in text else text)
    return _CJK_RUN.sub(lambda m: " " + " ".join(m.group(0)) + " ", normalised)


_VOWELS = frozenset("aeiou")


def _derived(word: str) -> str | None:
    """The other side of a "-y" / "-ic" derivation, which Porter stemming leaves apart ("allergy" and
    "allergies" stem to "allergi", "allergic" to "allerg"; "economy" / "economic", "history" /
    "historic"): searched as one more term, so "my allergies" finds "I am allergic to peanuts". Only
    ASCII words of five letters or more, with a consonant before the ending; a form no message uses
    ("spicic") matches nothing. LoCoMo's public split, where the pattern is rare: recall@10 within
    .001 (keyword .7078 -> .7071, hybrid USE .7892 -> .7885, e5 .8183 -> .8177; the worst conversation
    .746 -> .749 and .777 -> .779, the best -.006)."""
    if not word.isascii() or not word.isalpha() or len(word) < 5:
        return None
    if word.endswith("ies") and len(word) >= 6 and word[-4] not in _VOWELS:
        return word[:-3] + "ic"
    if word.endswith("y") and word[-2] not in _VOWELS:
        return word[:-1] + "ic"
    if word.endswith("ical") and len(word) >= 7:
        return word[:-4] + "y"
    if word.endswith("ic") and word[-3] not in _VOWELS:
        return word[:-2] + "y"
    return None


# A search matches at most this many distinct keyword terms of its query, the first ones in query order. A
# question has a few dozen; a pasted document or a hostile 400 kB message has tens of thousands, and each
# term costs a frequency lookup and a posting list (56,755 terms took 13 s of CPU per search before the cap).
MAX_QUERY_TERMS = 256


def keyword_terms(text: str, limit: int = MAX_QUERY_TERMS) -> list[str]:
    """The quoted FTS5 terms of free text, in query order, without repeats; the first ``limit`` of them
    (the text is read only as far as needed).

    Latin words become terms unless they are stop words (names, numbers and dates always stay), each
    followed by its "-y" / "-ic" counterpart (``_derived``); each CJK run contributes its character
    bigrams as quoted phrases (a lone character stands for itself).
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

    def add_word(word: str) -> None:
        if word not in STOP_WORDS:
            add(word)
            if (other := _derived(word)) is not None:
                add(other)

    for match in _WORD.finditer(normalised):
        if len(terms) >= limit:
            break
        word = match.group(0)
        if not _CJK.search(word):
            add_word(word)
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
            else:
                add_word(piece)
    if not terms:
        for match in _WORD.finditer(normalised):
            if len(terms) >= limit:
                break
            if not _CJK.search(match.group(0)):
                add(match.group(0))
    return terms[:limit]


def keyword_query(text: str) -> str | None:
    """An FTS5 MATCH expression for free text (its ``keyword_terms`` OR-ed; BM25 does the ranking),
    or None when nothing searchable is left."""
    terms = keyword_terms(text)
    return " OR ".join(terms) if terms else None


# -- speakers a query names ---------------------------------------------------------------------------

# A transcript line often starts with who says it ("Caroline: I went to a support group"), as
# conversations imported from other tools or written by several people do. Such a label is at most
# a few words before a colon at the very start of the text.
LABEL_CHARS = 80  # a label is looked for in a text's first characters only
# Every character whose NFKC form holds a colon (a test checks the list against ``unicodedata``).
COLON_CHARS = ":\u2a74\ufe13\ufe55\uff1a"
_COLON = re.compile(f"[{COLON_CHARS}]")
_LABEL = re.compile(r"\s*([^\W\d_][\w'\u2019-]*(?:[ ][^\W\d_][\w'\u2019-]*){0,2})\s*:\s")


def speaker_label(text: str) -> str | None:
    """The speaker a message's text names at its start ("Caroline: ..." -> "caroline"), casefolded
    and NFKC-normalised, or None when it has no such label (a URL, a time "10:30" or a sentence with
    a colon further on is no label)."""
    head = text[:LABEL_CHARS]
    if _COLON.search(head) is None:  # no label without a colon: skips the normalisation and the regex
        return None
    m = _LABEL.match(unicodedata.normalize("NFKC", head))
    return m.group(1).casefold() if m else None


class SpeakerMatcher:
    """Which ``speaker_label``s a query names: every word of the label is a word of the query
    ("What did Caroline's mentor say?" names "caroline"); a label in a script written without spaces
    (Chinese, Japanese) is named when the query contains it."""

    def __init__(self, query: str) -> None:
        self._text = unicodedata.normalize("NFKC", query).casefold()
        self._words = frozenset(_WORD.findall(self._text))

    def __call__(self, label: str | None) -> bool:
        if not label:
            return False
        if _CJK.search(label):
            return label in self._text
        parts = _WORD.findall(label)
        return bool(parts) and all(w in self._words for w in parts)


# -- periods a query names ---------------------------------------------------------------------------

# A named day also covers the days just before it: "on 25 May" may be asked about a message written a
# little later ("last weekend, before April 10"), and message times are UTC while the asker's day is
# local. Measured on LoCoMo's public split (DATE_BOOST in core/recall/search.py).
DAY_BEFORE = 7
DAY_AFTER = 1

_MONTH_NAMES = (
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sept", "sep"), ("october", "oct"),
    ("november", "nov"), ("december", "dec"),
)
_MONTHS = {name: i for i, names in enumerate(_MONTH_NAMES, start=1) for name in names}
_M = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_D = r"(\d{1,2})(?:st|nd|rd|th)?"
_Y = r"((?:19|20)\d\d)"
_SEP = r"[\s,]*"
_PREP = r"(?:in|during|since|of|from|by|until|till|before|after|around|early|mid|late|summer|winter|spring|fall|autumn)"
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "couple": 2, "few": 3}
# Most specific first; a match blanks its span, so "May 2023" is not read again as "2023".
# A month alone ("May" is also a verb) or a year alone ("2000 people") needs a preposition before it.
_ABSOLUTE = (
    (re.compile(rf"\b{_Y}-(\d\d)-(\d\d)\b"), "ymd"),
    (re.compile(rf"\b{_D}(?:\s+of)?\s+{_M}{_SEP}{_Y}\b"), "dmy"),
    (re.compile(rf"\b{_M}\s+{_D}{_SEP}{_Y}\b"), "mdy"),
    (re.compile(rf"\b{_M}{_SEP}(?:of\s+)?{_Y}\b"), "my"),
    (re.compile(rf"\b{_D}(?:\s+of)?\s+{_M}(?!\w)"), "dm"),
    (re.compile(rf"\b{_M}\s+{_D}\b(?!\s*(?:am|pm|:|%|percent))"), "md"),
    (re.compile(rf"\b{_PREP}\s+{_M}(?!\w)"), "m"),
    (re.compile(rf"\b{_PREP}\s+{_Y}\b"), "y"),
)
# Every absolute pattern starts a number or a month's name at a word's start: a query with neither skips
# them all (most queries; "w123" or "remark" has neither).
_ABSOLUTE_HINT = re.compile(rf"\b(?:\d|{_M})")
_RELATIVE = re.compile(
    r"\b(?:(today|tonight|this morning|this afternoon|this evening)|(yesterday)"
    r"|(?:(last|this|past)\s+(week(?:end)?|month|year))"
    r"|(?:(\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few)\s+"
    r"(day|week|month|year)s?\s+ago))\b"
)


@dataclass(frozen=True)
class DateSpan:
    """A period a query names: the days ``first``..``last`` (inclusive), or, when the query gave no
    year, a month (and day) of any year."""

    first: date | None = None
    last: date | None = None
    month: int | None = None
    day: int | None = None

    def contains(self, day: date) -> bool:
        if self.first is not None and self.last is not None:
            return self.first <= day <= self.last
        if self.month is None or day.month != self.month:
            return False
        if self.day is None:
            return True
        named = date(day.year, self.month, min(self.day, calendar.monthrange(day.year, self.month)[1]))
        return -DAY_AFTER <= (named - day).days <= DAY_BEFORE  # (only within the named month: kept simple)


def _day_span(d: date) -> DateSpan:
    return DateSpan(d - timedelta(days=DAY_BEFORE), d + timedelta(days=DAY_AFTER))


def _month_span(year: int, month: int) -> DateSpan:
    return DateSpan(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))


def _months_back(today: date, n: int) -> tuple[int, int]:
    index = today.year * 12 + today.month - 1 - n
    return index // 12, index % 12 + 1


def query_dates(text: str, today: date | None = None) -> list[DateSpan]:
    """The periods an English query names: calendar dates ("25 May, 2022", "May 23, 2023",
    "2023-05-08"), months ("in May 2022", "in June"), years ("in 2023"), and, when ``today`` is given,
    periods relative to it ("yesterday", "last week", "this month", "3 days ago").

    A named day covers ``DAY_BEFORE`` days before it and ``DAY_AFTER`` after. Impossible dates
    ("31 February") are skipped. Anything else (Chinese dates, weekdays, seasons alone) names nothing.
    """
    lowered = unicodedata.normalize("NFKC", text).casefold()
    spans: list[DateSpan] = []
    for pattern, kind in _ABSOLUTE if _ABSOLUTE_HINT.search(lowered) else ():
        def take(m: re.Match[str], kind: str = kind) -> str:
            g = m.groups()
            try:
                if kind == "ymd":
                    spans.append(_day_span(date(int(g[0]), int(g[1]), int(g[2]))))
                elif kind == "dmy":
                    spans.append(_day_span(date(int(g[2]), _MONTHS[g[1]], int(g[0]))))
                elif kind == "mdy":
                    spans.append(_day_span(date(int(g[2]), _MONTHS[g[0]], int(g[1]))))
                elif kind == "my":
                    spans.append(_month_span(int(g[1]), _MONTHS[g[0]]))
                elif kind == "dm":
                    date(2000, _MONTHS[g[1]], int(g[0]))  # validates the day (2000 is a leap year)
                    spans.append(DateSpan(month=_MONTHS[g[1]], day=int(g[0])))
                elif kind == "md":
                    date(2000, _MONTHS[g[0]], int(g[1]))
                    spans.append(DateSpan(month=_MONTHS[g[0]], day=int(g[1])))
                elif kind == "m":
                    spans.append(DateSpan(month=_MONTHS[g[0]]))
                else:
                    spans.append(DateSpan(date(int(g[0]), 1, 1), date(int(g[0]), 12, 31)))
            except ValueError:
                pass
            return " " * len(m.group(0))

        lowered = pattern.sub(take, lowered)
    if today is None:
        return spans
    for m in _RELATIVE.finditer(lowered):
        now_word, yesterday, which, unit, count, ago_unit = m.groups()
        if now_word:
            spans.append(DateSpan(today, today))
        elif yesterday:
            spans.append(DateSpan(today - timedelta(days=2), today - timedelta(days=1)))
        elif which:
            spans.append(_relative(today, which, unit))
        else:
            n = int(count) if count.isdigit() else _NUMBER_WORDS[count.removesuffix(" of").split()[-1]]
            spans.append(_ago(today, n, ago_unit))
    return spans


def _relative(today: date, which: str, unit: str) -> DateSpan:
    if unit == "weekend":  # the last Saturday and Sunday before today (or this one, if it is under way)
        sunday = today - timedelta(days=(today.weekday() + 1) % 7)
        return DateSpan(sunday - timedelta(days=1), sunday + timedelta(days=1))
    if which == "past":  # "the past week/month/year": the trailing period up to today
        days = {"week": 7, "month": 31, "year": 366}[unit]
        return DateSpan(today - timedelta(days=days), today)
    back = 1 if which == "last" else 0
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * back)
        return DateSpan(monday, monday + timedelta(days=6))
    if unit == "month":
        return _month_span(*_months_back(today, back))
    return DateSpan(date(today.year - back, 1, 1), date(today.year - back, 12, 31))


def _ago(today: date, n: int, unit: str) -> DateSpan:
    if unit == "day":
        d = today - timedelta(days=n)
        return DateSpan(d - timedelta(days=1), d + timedelta(days=1))
    if unit == "week":
        d = today - timedelta(weeks=n)
        return DateSpan(d - timedelta(days=4), d + timedelta(days=4))
    if unit == "month":
        return _month_span(*_months_back(today, n))
    return DateSpan(date(today.year - n, 1, 1), date(today.year - n, 12, 31))
