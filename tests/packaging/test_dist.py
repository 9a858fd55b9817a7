"""`make dist`: the wheel and the sdist install cleanly in a fresh venv, and `memory-studio` runs.

Skipped unless MEMORY_STUDIO_TEST_BUNDLE=1 (`make test-bundle`): it builds with `python -m build`
(isolated, so setuptools comes from the package index) and installs the dependencies into a new venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from core.version import __version__

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bundle,
    pytest.mark.skipif(os.environ.get("MEMORY_STUDIO_TEST_BUNDLE") != "1",
                       reason="builds and installs the wheel and sdist; run with `make test-bundle`"),
]

ROOT = Path(__file__).resolve().parents[2]
SDIST_ROOT = f"memory_studio-{__version__}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz"))}


def test_sdist_has_resources_and_no_local_state(built: dict[str, Path]) -> None:
    with tarfile.open(built["sdist"]) as tar:
        names = [n.removeprefix(SDIST_ROOT + "/") for n in tar.getnames()]
    for needed in ["resources/themes/dark.qss", "resources/icons/memory-studio.svg", "resources/icons/memory-studio-256.png",
                   "resources/memory-studio.desktop", "setup.py", "packaging/memory-studio.spec",
                   "packaging/install-desktop.sh", "core/version.py", "studio/cli.py"]:
        assert needed in names, needed
    for name in names:
        top = name.split("/")[0]
        assert top not in (".temp", ".venv", "build", "dist", ".git"), name
        assert "__pycache__" not in name and not name.endswith((".db", ".duckdb", ".pyc", ".onnx")), name
        if top == "tests" and "." in name.rsplit("/", 1)[-1]:
            assert name.endswith(".py"), f"test data in the sdist: {name}"


def test_wheel_carries_resources_not_tests(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as whl:
        names = whl.namelist()
    assert "studio/resources/themes/dark.qss" in names and "studio/resources/icons/memory-studio-48.png" in names
    assert "core/version.py" in names
    assert not [n for n in names if n.startswith("tests/")]


def _venv(root: Path) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(root)], check=True, timeout=300)
    return root / "bin"


def _clean_env() -> dict[str, str]:
    drop = ("PYTHONPATH", "MEMORY_STUDIO_DB", "VIRTUAL_ENV", "QT_QPA_PLATFORM")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _check_installed(bin_dir: Path, cwd: Path) -> None:
    env = _clean_env()
    version = subprocess.run([str(bin_dir / "memory-studio"), "--version"], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"memory-studio {__version__}"
    models = subprocess.run([str(bin_dir / "memory-studio"), "models", "install"], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=900)
    assert models.returncode == 0, models.stdout + models.stderr
    check = subprocess.run([str(bin_dir / "memory-studio"), "--self-check"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "self-check (Python package;" in check.stdout and "Self-check passed" in check.stdout
    # The code that ran is the installed copy, not this checkout.
    where = subprocess.run([str(bin_dir / "python"), "-c", "import studio.assets as a; print(a.resources_dir())"],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().endswith("site-packages/studio/resources"), where.stdout + where.stderr


def test_wheel_then_sdist_install_in_a_fresh_venv_and_run(built: dict[str, Path], tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "venv")
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet"]
    proc = subprocess.run([*pip, str(built["wheel"])], env=_clean_env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    work = tmp_path / "work"
    work.mkdir()
    _check_installed(bin_dir, work)
    # The sdist builds its own wheel (setup.py copies resources/ in) over the same dependencies.
    proc = subprocess.run([*pip, "--force-reinstall", "--no-deps", str(built["sdist"])], env=_clean_env(),
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    _check_installed(bin_dir, work)
