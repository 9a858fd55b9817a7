"""The bundle's entry point: the same ``memory-studio`` command line as the installed package."""

from studio.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
