"""Before Qt starts: can this machine open a window? If not, say which packages to install.

On a bare Linux Qt's xcb platform plugin is present but its system libraries (libxcb-cursor0,
libxkbcommon-x11-0, …) are not; Qt then prints a hint nobody reads and aborts with a core dump. So
``memory-studio`` probes the libraries first, the way the dynamic loader will look for them, and
prints the Debian/Ubuntu and Fedora packages that provide the missing ones. Qt's own abort is the
second net (``studio.app`` catches it with a message handler and prints ``platform_failure_message``).

This module imports no Qt: it must run when Qt itself cannot load. ``diagnose`` is pure (it takes
what was found); ``check`` feeds it the real probe.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

EXIT_NO_WINDOW = 3  # distinct from argparse's 2 so scripts can tell "cannot open a window" apart


@dataclass(frozen=True)
class Library:
    soname: str
    debian: str  # Debian/Ubuntu package
    fedora: str  # Fedora package


# What libQt6Gui loads on any platform (offscreen included): without these `import PySide6.QtGui` fails.
BASE: tuple[Library, ...] = (
    Library("libEGL.so.1", "libegl1", "libglvnd-egl"),
    Library("libGL.so.1", "libgl1", "libglvnd-glx"),
    Library("libfontconfig.so.1", "libfontconfig1", "fontconfig"),
    Library("libfreetype.so.6", "libfreetype6", "freetype"),
    Library("libX11.so.6", "libx11-6", "libX11"),
    Library("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
    Library("libglib-2.0.so.0", "libglib2.0-0", "glib2"),
    Library("libdbus-1.so.3", "libdbus-1-3", "dbus-libs"),
)

# What Qt's xcb plugin (libqxcb.so → libQt6XcbQpa) loads beyond BASE; from `ldd` on Qt 6.7–6.11.
XCB: tuple[Library, ...] = (
    Library("libxcb.so.1", "libxcb1", "libxcb"),
    Library("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    Library("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11"),
    Library("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor"),
    Library("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm"),
    Library("libxcb-image.so.0", "libxcb-image0", "xcb-util-image"),
    Library("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms"),
    Library("libxcb-randr.so.0", "libxcb-randr0", "libxcb"),
    Library("libxcb-render.so.0", "libxcb-render0", "libxcb"),
    Library("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil"),
    Library("libxcb-shape.so.0", "libxcb-shape0", "libxcb"),
    Library("libxcb-shm.so.0", "libxcb-shm0", "libxcb"),
    Library("libxcb-sync.so.1", "libxcb-sync1", "libxcb"),
    Library("libxcb-util.so.1", "libxcb-util1", "xcb-util"),
    Library("libxcb-xfixes.so.0", "libxcb-xfixes0", "libxcb"),
    Library("libxcb-xkb.so.1", "libxcb-xkb1", "libxcb"),
)

WAYLAND: tuple[Library, ...] = (
    Library("libwayland-client.so.0", "libwayland-client0", "libwayland-client"),
    Library("libwayland-cursor.so.0", "libwayland-cursor0", "libwayland-cursor"),
    Library("libwayland-egl.so.1", "libwayland-egl1", "libwayland-egl"),
)

PLATFORM_LIBS: dict[str, tuple[Library, ...]] = {"xcb": BASE + XCB, "wayland": BASE + WAYLAND}


def platforms_to_try(env: Mapping[str, str], sys_platform: str = sys.platform) -> list[str] | None:
    """The Qt platform plugins Qt will try, in order; None when no check applies; [] for no display.

    Mirrors Qt's choice: ``QT_QPA_PLATFORM`` wins (its first entry, options after ``:`` dropped), else
    a Wayland session tries wayland and falls back to xcb, else xcb needs ``DISPLAY``.
    """
    if not sys_platform.startswith("linux"):
        return None
    forced = env.get("QT_QPA_PLATFORM", "").strip()
    if forced:
        names = [part.split(":", 1)[0].strip() for part in forced.split(";") if part.strip()]
        return names or None
    found: list[str] = []
    if env.get("WAYLAND_DISPLAY"):
        found.append("wayland")
    if env.get("DISPLAY"):
        found.append("xcb")
    return found


def libraries_for(platform: str) -> tuple[Library, ...]:
    if platform.startswith("wayland"):
        return PLATFORM_LIBS["wayland"]
    return PLATFORM_LIBS.get(platform, BASE)


def missing_for(platform: str, found: Callable[[str], bool]) -> list[Library]:
    return [lib for lib in libraries_for(platform) if not found(lib.soname)]


def diagnose(candidates: Sequence[str] | None, found: Mapping[str, bool] | Callable[[str], bool]) -> str | None:
    """None when Qt can start one of ``candidates``; else the message to print instead of starting.

    ``found`` says whether a library (by soname) loads: a mapping (absent means found) or a probe.
    """
    if candidates is None:
        return None
    probe: Callable[[str], bool] = (lambda name: found.get(name, True)) if isinstance(found, Mapping) else found
    if not candidates:
        return no_display_message()
    missing_by_platform: list[tuple[str, list[Library]]] = []
    for platform in candidates:
        missing = missing_for(platform, probe)
        if not missing:
            return None
        missing_by_platform.append((platform, missing))
    return missing_libraries_message(missing_by_platform)


def no_display_message() -> str:
    return (
        "Memory Studio cannot open its window: no display was found (neither DISPLAY nor WAYLAND_DISPLAY "
        "is set).\n"
        "Start it from a desktop session (or over SSH with X forwarding: ssh -X). Without a display, "
        "`memory-studio --self-check` checks the installation, and the subcommands (`memory-studio "
        "--help`) work as usual.\n"
    )


def install_commands(libraries: Iterable[Library]) -> tuple[str, str]:
    debian = sorted({lib.debian for lib in libraries})
    fedora = sorted({lib.fedora for lib in libraries})
    return "sudo apt-get install " + " ".join(debian), "sudo dnf install " + " ".join(fedora)


def missing_libraries_message(missing_by_platform: Sequence[tuple[str, Sequence[Library]]]) -> str:
    lines = ["Memory Studio cannot open its window: system libraries that Qt needs are missing."]
    everything: list[Library] = []
    for platform, missing in missing_by_platform:
        lines.append(f"  for Qt's {platform} platform: " + ", ".join(lib.soname for lib in missing))
        everything.extend(missing)
    apt, dnf = install_commands(everything)
    lines += [
        "Install them, then start Memory Studio again:",
        f"  Debian/Ubuntu: {apt}",
        f"  Fedora:        {dnf}",
    ]
    base = {lib.soname for lib in BASE}
    if not any(lib.soname in base for lib in everything):
        lines.append("(Without them `memory-studio --self-check` still runs: it renders offscreen.)")
    return "\n".join(lines) + "\n"


def platform_failure_message(qt_said: Sequence[str], env: Mapping[str, str] | None = None,
                             found: Callable[[str], bool] | None = None) -> str:
    """What to print when Qt gives up loading its platform plugin (the abort path)."""
    env = os.environ if env is None else env
    probe = found or library_loads
    candidates = platforms_to_try(env) or ["xcb"]
    said = "".join(f"  Qt: {line.strip()}\n" for line in qt_said if line.strip())
    missing = [(p, m) for p in candidates if (m := missing_for(p, probe))]
    if missing:
        return said + missing_libraries_message(missing)
    return (
        said
        + "Memory Studio cannot open its window: Qt could not start its platform plugin although the "
        "libraries it needs are installed.\n"
        "Check that DISPLAY (X11) or WAYLAND_DISPLAY (Wayland) names a running display, or choose the "
        "plugin with QT_QPA_PLATFORM=xcb or QT_QPA_PLATFORM=wayland. QT_DEBUG_PLUGINS=1 shows what Qt "
        "tried.\n"
    )


def library_loads(soname: str) -> bool:
    """Whether the dynamic loader finds and loads ``soname`` (same search as Qt's, LD_LIBRARY_PATH too)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def check(env: Mapping[str, str] | None = None, found: Callable[[str], bool] = library_loads) -> str | None:
    """The message to print instead of starting the GUI, or None when it can start."""
    return diagnose(platforms_to_try(os.environ if env is None else env), found)
