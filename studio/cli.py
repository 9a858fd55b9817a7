"""The ``memory-studio`` entry point.

With a subcommand (``prompt``, ``threads``, ``reindex``, ``models``, ``traces``, ``migrate``,
``vacuum``, ``where``, ``demo``, ``export``, ``import``, ``serve``, ``mcp``) it runs the engine's command line
and never imports Qt, so it works on machines without a display. Without one it opens the Studio,
after checking that the system libraries Qt needs are there (``studio.system_check``). ``--version``
and ``--self-check`` (``studio.self_check``) need no display.

The desktop app's own options are all flags, so a first argument that is not one names a subcommand
and goes to ``core.cli`` (which lists the valid ones if it is not). The app's start imports neither
``core.cli`` nor the engine a command loads (SQLAlchemy, the memory, the transfer and check machinery): that
would cost more than everything up to the window's first paint (``studio/app.py``). Qt is loaded
through ``studio.qt_boot`` (shiboken's signature module compiled from a cache).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence


class _AppParser(argparse.ArgumentParser):
    """The app's options. Its help names the subcommands too, read from ``core.cli`` only when the
    help is printed."""

    def format_help(self) -> str:
        from core.cli import COMMANDS

        self.description = "Open the Memory Studio desktop app. Subcommands: " + ", ".join(COMMANDS) + "."
        return super().format_help()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    from core.version import __version__

    if args and not args[0].startswith("-"):
        from core.cli import main as core_main

        return core_main(args)
    parser = _AppParser(prog="memory-studio")
    parser.add_argument("--db", help="database to open (default: the project's .temp/memory.db)")
    parser.add_argument("--allow-writes", action="store_true",
                        help="open a database the Studio did not create with writes allowed")
    parser.add_argument("--no-demo", action="store_true", help="do not seed demo data into an empty database")
    parser.add_argument("--version", action="version", version=f"memory-studio {__version__}")
    parser.add_argument("--self-check", action="store_true",
                        help="check this installation end to end, offscreen, in a temporary folder; exit 0 if it works")
    opts = parser.parse_args(args)
    from studio.system_check import EXIT_NO_WINDOW, check

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"} if opts.self_check else os.environ
    problem = check(env)  # before Qt loads: a missing system library gets a message, not an abort
    if problem:
        sys.stderr.write(problem)
        return EXIT_NO_WINDOW
    if opts.self_check:
        from studio.self_check import run

        return run()
    from studio.qt_boot import import_qt

    import_qt()  # Qt, with shiboken's signature module compiled from a cache (studio/qt_boot.py)
    from studio.app import main as app_main

    return app_main(db=opts.db, allow_writes=opts.allow_writes, seed_demo=not opts.no_demo)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
