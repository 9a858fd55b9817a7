"""Memory checks: pin what a stored turn's prompt must (not) contain, and test it offline in CI.

``model`` (the check record and its file), ``runner`` (rebuild each turn as replay does and test it),
``junit`` (the report CI systems read), ``cli`` (``memory-studio test``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.lazy_names import lazy_names as _lazy_names

if TYPE_CHECKING:  # pragma: no cover
    from core.checks.model import Check, CheckFileError, add_check, load_checks, parse_checks, save_checks
    from core.checks.runner import CheckResult, CheckRunner, Failure, run_checks, would_break

# Each name loads its module on first use (PEP 562): ``memory-studio``'s parser imports ``core.checks.cli``,
# and with it this package, for every command.
_LAZY = {
    **dict.fromkeys(("Check", "CheckFileError", "add_check", "load_checks", "parse_checks", "save_checks"),
                    "core.checks.model"),
    **dict.fromkeys(("CheckResult", "CheckRunner", "Failure", "run_checks", "would_break"), "core.checks.runner"),
}

__all__ = ["Check", "CheckFileError", "CheckResult", "CheckRunner", "Failure", "add_check", "load_checks",
           "parse_checks", "run_checks", "save_checks", "would_break"]

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals(), listed=__all__)
