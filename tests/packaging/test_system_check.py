"""Missing system libraries give a message naming the packages to install, never a stack trace.

The decision is a pure function of the environment and of which libraries load; two subprocess
tests check the real entry points: the pre-Qt check (a library made to fail to load) and Qt's own
"could not load the platform plugin" abort, turned into advice and a clean exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from studio.system_check import (
    BASE,
    EXIT_NO_WINDOW,
    XCB,
    check,
    diagnose,
    library_loads,
    platform_failure_message,
    platforms_to_try,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("env", "expected"), [
    ({"QT_QPA_PLATFORM": "offscreen"}, ["offscreen"]),
    ({"QT_QPA_PLATFORM": "xcb:nomitshm", "WAYLAND_DISPLAY": "wayland-0"}, ["xcb"]),
    ({"QT_QPA_PLATFORM": "wayland;xcb"}, ["wayland", "xcb"]),
    ({"DISPLAY": ":0"}, ["xcb"]),
    ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, ["wayland", "xcb"]),
    ({}, []),
])
def test_platforms_follow_qts_choice(env: dict[str, str], expected: list[str]) -> None:
    assert platforms_to_try(env, "linux") == expected


def test_no_check_outside_linux() -> None:
    assert platforms_to_try({}, "darwin") is None
    assert diagnose(None, {}) is None


def test_everything_found_starts() -> None:
    assert diagnose(["xcb"], {}) is None
    assert diagnose(["offscreen"], {"libxcb-cursor.so.0": False}) is None  # offscreen needs no xcb


def test_missing_xcb_library_names_debian_and_fedora_packages() -> None:
    message = diagnose(["xcb"], {"libxcb-cursor.so.0": False, "libxkbcommon-x11.so.0": False})
    assert message is not None
    assert "xcb platform: libxkbcommon-x11.so.0, libxcb-cursor.so.0" in message
    assert "sudo apt-get install libxcb-cursor0 libxkbcommon-x11-0" in message
    assert "sudo dnf install libxkbcommon-x11 xcb-util-cursor" in message
    assert "--self-check" in message  # offscreen still works: only the xcb plugin is affected


def test_wayland_session_falls_back_to_xcb_like_qt() -> None:
    assert diagnose(["wayland", "xcb"], {"libwayland-cursor.so.0": False}) is None
    both = diagnose(["wayland", "xcb"], {"libwayland-cursor.so.0": False, "libxcb-icccm.so.4": False})
    assert both is not None
    assert "wayland platform: libwayland-cursor.so.0" in both and "xcb platform: libxcb-icccm.so.4" in both
    assert "libwayland-cursor0 libxcb-icccm4" in both


def test_missing_base_library_does_not_promise_the_self_check() -> None:
    message = diagnose(["offscreen"], {"libEGL.so.1": False})
    assert message is not None and "sudo apt-get install libegl1" in message
    assert "--self-check" not in message


def test_no_display_says_where_to_run() -> None:
    message = diagnose([], {})
    assert message is not None and "no display was found" in message and "--self-check" in message


def test_every_library_names_a_package_for_both_families() -> None:
    for lib in BASE + XCB:
        assert lib.soname.startswith("lib") and ".so." in lib.soname
        assert lib.debian and lib.fedora


def test_platform_failure_message_names_packages_or_explains() -> None:
    missing = platform_failure_message(["Could not load the Qt platform plugin \"xcb\""], {"DISPLAY": ":0"},
                                       found=lambda name: name != "libxcb-keysyms.so.1")
    assert "Qt: Could not load" in missing and "libxcb-keysyms1" in missing and "xcb-util-keysyms" in missing
    nothing_missing = platform_failure_message(["x"], {"DISPLAY": ":0"}, found=lambda name: True)
    assert "DISPLAY" in nothing_missing and "QT_QPA_PLATFORM" in nothing_missing


def test_real_probe_uses_the_dynamic_loader() -> None:
    assert library_loads("libc.so.6")
    assert not library_loads("libmemory-studio-no-such-library.so.7")
    assert check({"QT_QPA_PLATFORM": "offscreen"}) is None  # the test machine renders offscreen


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "DISPLAY")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def test_gui_start_with_a_missing_library_prints_packages_and_never_loads_qt(tmp_path: Path) -> None:
    # Simulate a machine without libxcb-cursor0: that one library fails to load, as on a bare system.
    script = textwrap.dedent("""
        import ctypes, sys
        real = ctypes.CDLL
        def fake(name, *a, **k):
            if name == "libxcb-cursor.so.0":
                raise OSError(name + ": cannot open shared object file: No such file or directory")
            return real(name, *a, **k)
        ctypes.CDLL = fake
        from studio.cli import main
        rc = main([])
        assert "PySide6" not in sys.modules, "Qt was loaded before the check"
        sys.exit(rc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(DISPLAY=":0"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_NO_WINDOW, proc.stderr
    assert "libxcb-cursor.so.0" in proc.stderr and "apt-get install" in proc.stderr and "libxcb-cursor0" in proc.stderr
    assert "xcb-util-cursor" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_qt_platform_plugin_abort_becomes_advice(tmp_path: Path) -> None:
    # Skip our pre-check and let Qt fail for real: the xcb plugin with no X server behind DISPLAY
    # (or without its libraries) ends in qFatal, which would abort with a core dump.
    script = "from studio.app import make_app; make_app(); print('window system started')"
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                          env=_env(QT_QPA_PLATFORM="xcb", DISPLAY=":987"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_NO_WINDOW, (proc.returncode, proc.stderr)
    assert "Memory Studio cannot open its window" in proc.stderr
    assert "Traceback" not in proc.stderr and "window system started" not in proc.stdout
