"""Estimated cost of model calls from a price table the user edits (no Qt, no I/O).

Prices are per million input and per million output tokens, per model. A model matches a row by its
full id (``openai/gpt-4o-mini``) or by its name without the provider (``gpt-4o-mini``). Local models
(the offline scripted model, a server on this computer, Ollama-style ``name:tag`` names) get no
price unless the user sets one for exactly that id: a local call costs nothing to run but is not
free to estimate either, so the Studio says "no price set" rather than $0.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping
from urllib.parse import urlparse

from core.traces.spans import ModelUsage

NO_PRICE = "—"
NO_PRICE_SET = "no price set"
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
LOCAL_PROVIDERS = frozenset({"scripted", "ollama", "lmstudio", "lm-studio", "llamacpp", "local"})
_TAGGED = re.compile(r"^[\w.\-]+:[\w.\-]+$")  # Ollama's name:tag (llama3:8b, qwen2.5:7b-instruct)


@dataclass(frozen=True)
class Price:
    input_per_m: float  # US dollars per million input tokens
    output_per_m: float  # … per million output tokens

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens / 1e6 * self.input_per_m + output_tokens / 1e6 * self.output_per_m


# Public list prices (US $ per million tokens, standard tier) when this table was written; the
# dialog says to check them against the provider's page, and every row can be changed or removed.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "o4-mini": Price(1.10, 4.40),
}


def bare_name(model: str) -> str:
    """``openai/gpt-4o-mini`` → ``gpt-4o-mini`` (the provider prefix our model ids carry)."""
    return model.split("/", 1)[1] if "/" in model else model


def is_local(usage: ModelUsage) -> bool:
    """A model that runs on this computer (or is scripted): it gets no price by default."""
    if usage.model.startswith("scripted/") or (usage.provider or "").lower() in LOCAL_PROVIDERS:
        return True
    if usage.base_url:
        host = (urlparse(usage.base_url).hostname or "").lower()
        if host in LOCAL_HOSTS or host.endswith(".localhost"):
            return True
    return bool(_TAGGED.match(bare_name(usage.model)))


def price_for(table: Mapping[str, Price], usage: ModelUsage) -> Price | None:
    if usage.model in table:
        return table[usage.model]
    if is_local(usage):
        return None  # only a price set for exactly this id applies to a local model
    return table.get(bare_name(usage.model))


@dataclass(frozen=True)
class CostLine:
    usage: ModelUsage
    price: Price | None

    @property
    def cost(self) -> float | None:
        return None if self.price is None else self.price.cost(self.usage.input_tokens, self.usage.output_tokens)

    @property
    def text(self) -> str:
        u = self.usage
        tokens = f"{u.input_tokens:,} in + {u.output_tokens:,} out"
        if self.cost is None:
            why = " (local model)" if is_local(u) else ""
            return f"{u.model}: {tokens} · {NO_PRICE_SET}{why}"
        return f"{u.model}: {tokens} · {format_cost(self.cost)}"


@dataclass(frozen=True)
class CostEstimate:
    lines: tuple[CostLine, ...]

    @property
    def priced(self) -> bool:
        return any(line.cost is not None for line in self.lines)

    @property
    def complete(self) -> bool:
        """Every model that was used has a price."""
        return all(line.cost is not None for line in self.lines if _used(line.usage))

    @property
    def total(self) -> float | None:
        costs = [line.cost for line in self.lines if line.cost is not None]
        return sum(costs) if costs else None

    @property
    def unpriced(self) -> list[str]:
        return [line.usage.model for line in self.lines if line.cost is None and _used(line.usage)]

    @property
    def label(self) -> str:
        """The table cell: the sum, "—" when no model used has a price, "+" when some lack one."""
        if self.total is None:
            return NO_PRICE
        return format_cost(self.total) + ("" if self.complete else "+")

    @property
    def tooltip(self) -> str:
        if not self.lines:
            return "No model call reported token usage."
        head = "Estimated from the price table (Traces > Prices…)."
        if self.unpriced:
            head += f" {NO_PRICE_SET.capitalize()} for: {', '.join(self.unpriced)}."
        return "\n".join([head, *(line.text for line in self.lines)])


def _used(usage: ModelUsage) -> bool:
    return bool(usage.input_tokens or usage.output_tokens)


def estimate(table: Mapping[str, Price], usages: Iterable[ModelUsage]) -> CostEstimate:
    return CostEstimate(tuple(CostLine(u, price_for(table, u)) for u in usages))


def usage_summary(scope: str, usages: Iterable[ModelUsage], table: Mapping[str, Price]) -> tuple[str, str]:
    """(line, tooltip) for the tokens and estimated cost of every run in ``scope``."""
    usages = list(usages)
    if not usages:
        return f"{scope.capitalize()}: no model call reported token usage.", ""
    inp = sum(u.input_tokens for u in usages)
    out = sum(u.output_tokens for u in usages)
    cost = estimate(table, usages)
    money = f"est. {cost.label}" if cost.total is not None else f"est. cost {NO_PRICE} ({NO_PRICE_SET})"
    line = f"{scope.capitalize()}: {inp + out:,} tokens ({inp:,} in · {out:,} out) · {money}"
    return line, cost.tooltip


def format_cost(value: float) -> str:
    if value == 0:
        return "$0.00"
    if value < 0.01:
        return f"${value:.4f}"
    if value < 100:
        return f"${value:.2f}"
    return f"${value:,.0f}"


# -- storage (the caller keeps the text in the Studio's settings, not in the memory database) ----------
def dump_prices(table: Mapping[str, Price]) -> str:
    return json.dumps({m: [p.input_per_m, p.output_per_m] for m, p in sorted(table.items())})


def load_prices(text: object) -> dict[str, Price]:
    """The table saved by ``dump_prices``; defaults when nothing was saved. Bad rows are dropped."""
    if not isinstance(text, str) or not text.strip():
        return dict(DEFAULT_PRICES)
    try:
        raw = json.loads(text)
    except ValueError:
        return dict(DEFAULT_PRICES)
    out: dict[str, Price] = {}
    if isinstance(raw, dict):
        for model, pair in raw.items():
            if (isinstance(pair, list) and len(pair) == 2
                    and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in pair)):
                out[str(model)] = Price(float(pair[0]), float(pair[1]))
    return out


def check_rows(rows: Iterable[tuple[str, str, str]]) -> tuple[dict[str, Price], list[str]]:
    """Editor rows (model, input $/M, output $/M) → the table, and what is wrong (blocking Save)."""
    table: dict[str, Price] = {}
    problems: list[str] = []
    for n, (model, inp, out) in enumerate(rows, start=1):
        model = model.strip()
        if not model and not inp.strip() and not out.strip():
            continue  # an empty row is ignored
        if not model:
            problems.append(f"Row {n}: name the model.")
            continue
        if model in table:
            problems.append(f"Row {n}: {model} is listed twice.")
            continue
        try:
            pin, pout = float(inp.replace("$", "").strip() or "0"), float(out.replace("$", "").strip() or "0")
        except ValueError:
            pin = pout = math.nan
        if not (math.isfinite(pin) and math.isfinite(pout)):  # float() also reads "nan" and "inf"
            problems.append(f"Row {n}: prices must be numbers (US $ per million tokens).")
            continue
        if pin < 0 or pout < 0:
            problems.append(f"Row {n}: prices cannot be negative.")
            continue
        table[model] = Price(pin, pout)
    return table, problems


__all__ = [
    "DEFAULT_PRICES", "NO_PRICE", "NO_PRICE_SET", "CostEstimate", "CostLine", "Price", "bare_name", "check_rows",
    "dump_prices", "estimate", "format_cost", "is_local", "load_prices", "price_for", "usage_summary",
]
