"""Type-check ``studio/`` against a baseline that may only shrink.

``core/`` is checked strictly and must be clean (``[tool.mypy]`` in pyproject.toml). The Studio is
checked with the same settings, but the errors it had when checking began are recorded per file in
``tools/mypy-studio-baseline.txt``. This script fails when a file has more errors than its
baseline (new code must be typed), and also when it has fewer (lower the baseline, so the gain is
kept): run ``python tools/mypy_baseline.py --update`` and commit the file.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tools" / "mypy-studio-baseline.txt"
ERROR = re.compile(r"^(?P<file>studio/[^:]+\.py):\d+: error:")


def current_counts() -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "studio"],
        cwd=ROOT, capture_output=True, text=True,
    )
    if proc.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash)
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"mypy could not check studio/ (exit {proc.returncode})")
    counts: dict[str, int] = collections.Counter()
    for line in proc.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            counts[match["file"]] += 1
    return dict(counts)


def read_baseline() -> dict[str, int]:
    if not BASELINE.exists():
        return {}
    out = {}
    for line in BASELINE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            count, path = line.split(maxsplit=1)
            out[path] = int(count)
    return out


def write_baseline(counts: dict[str, int]) -> None:
    lines = ["# mypy --strict errors per Studio file; may only shrink (see tools/mypy_baseline.py)"]
    lines += [f"{n} {path}" for path, n in sorted(counts.items())]
    BASELINE.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="record today's counts as the baseline")
    args = parser.parse_args(argv)
    counts = current_counts()
    if args.update:
        write_baseline(counts)
        print(f"baseline: {sum(counts.values())} errors in {len(counts)} files")
        return 0
    baseline = read_baseline()
    worse = {p: (baseline.get(p, 0), n) for p, n in counts.items() if n > baseline.get(p, 0)}
    better = {p: (n, counts.get(p, 0)) for p, n in baseline.items() if counts.get(p, 0) < n}
    for path, (was, now) in sorted(worse.items()):
        print(f"{path}: {now} mypy errors, baseline {was}: type the new code "
              f"(see: .venv/bin/mypy --strict --follow-imports=silent {path})")
    for path, (was, now) in sorted(better.items()):
        print(f"{path}: {now} mypy errors, baseline {was}: lower the baseline with "
              "`.venv/bin/python tools/mypy_baseline.py --update` and commit it")
    if worse or better:
        return 1
    print(f"studio/: {sum(counts.values())} mypy errors, as in the baseline")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
