"""Memory checks: pin what a stored turn's prompt must (not) contain, and test it offline in CI.

``model`` (the check record and its file), ``runner`` (rebuild each turn as replay does and test it),
``junit`` (the report CI systems read), ``cli`` (``memory-studio test``).
"""

from core.checks.model import Check, CheckFileError, add_check, load_checks, parse_checks, save_checks
from core.checks.runner import CheckResult, CheckRunner, Failure, run_checks, would_break

__all__ = ["Check", "CheckFileError", "CheckResult", "CheckRunner", "Failure", "add_check", "load_checks",
           "parse_checks", "run_checks", "save_checks", "would_break"]
