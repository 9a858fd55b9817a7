from __future__ import annotations

import sys
from collections.abc import Iterator

import keyring
import keyring.errors
import pytest
from keyring.backend import KeyringBackend

from core.llm import (
    KeyringMissingError,
    LoopbackServer,
    ModelError,
    OpenAICompatibleModel,
    ScriptedModel,
    Secret,
    resolve_api_key,
    store_api_key,
)
from core.llm.keys import keyring_available


class MemoryKeyring(KeyringBackend):
    """A keyring held in a dict: the OS keyring interface, without the OS."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.entries.pop((service, username), None)


class LockedKeyring(MemoryKeyring):
    def get_password(self, service: str, username: str) -> str | None:
        raise keyring.errors.KeyringLocked("locked")


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)


def test_secret_never_prints_itself() -> None:
    secret = Secret("sk-hidden")
    assert "sk-hidden" not in repr(secret)
    assert "sk-hidden" not in f"{secret}"
    assert secret.reveal() == "sk-hidden"


def test_precedence_explicit_then_env_then_keyring(memory_keyring: MemoryKeyring) -> None:
    store_api_key("from-keyring", username="MY_KEY")
    env = {"MY_KEY": "from-env"}

    explicit = resolve_api_key(explicit="from-arg", env_var="MY_KEY", environ=env)
    assert explicit.source == "explicit" and explicit.secret == Secret("from-arg")

    from_env = resolve_api_key(env_var="MY_KEY", environ=env)
    assert from_env.source == "env:MY_KEY" and from_env.secret == Secret("from-env")

    from_keyring = resolve_api_key(env_var="MY_KEY", environ={})
    assert from_keyring.source == "keyring:memory-studio/MY_KEY"
    assert from_keyring.secret == Secret("from-keyring")
    assert "from-keyring" not in repr(from_keyring)


def test_no_key_anywhere_is_not_an_error(memory_keyring: MemoryKeyring) -> None:
    resolved = resolve_api_key(env_var="ABSENT", environ={})
    assert resolved.secret is None and resolved.source == "none"


def test_locked_keyring_is_reported_not_raised() -> None:
    previous = keyring.get_keyring()
    keyring.set_keyring(LockedKeyring())
    try:
        resolved = resolve_api_key(env_var="ABSENT", environ={})
    finally:
        keyring.set_keyring(previous)
    assert resolved.secret is None
    assert "keyring unavailable" in resolved.note


def test_model_uses_keyring_key_as_bearer_token(memory_keyring: MemoryKeyring) -> None:
    secret = "sk-keyring-9876543210"
    memory_keyring.set_password("memory-studio", "LOCAL_LLM_KEY", secret)
    with LoopbackServer(ScriptedModel(["from keyring"]), require_api_key=secret) as server:
        with OpenAICompatibleModel("loopback-chat", base_url=server.base_url,
                                   api_key_env="LOCAL_LLM_KEY", environ={}) as model:
            assert model.generate([{"role": "user", "content": "hi"}]).text == "from keyring"
    assert server.requests[0].headers["authorization"] == f"Bearer {secret}"
    assert model.describe()["api_key_source"] == "keyring:memory-studio/LOCAL_LLM_KEY"
    assert secret not in repr(model) and secret not in str(model.describe())


# -- without the optional keyring package ------------------------------------------------------------

@pytest.fixture
def no_keyring_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import keyring`` fails, as on an install without the ``keyring`` extra."""
    monkeypatch.setitem(sys.modules, "keyring", None)
    monkeypatch.setitem(sys.modules, "keyring.errors", None)


def test_without_keyring_env_and_explicit_keys_still_work(no_keyring_package: None) -> None:
    assert not keyring_available()
    assert resolve_api_key(explicit="sk-x", environ={}).source == "explicit"
    assert resolve_api_key(env_var="MY_KEY", environ={"MY_KEY": "k"}).source == "env:MY_KEY"
    missing = resolve_api_key(env_var="MY_KEY", environ={})
    assert missing.secret is None and missing.source == "none"
    assert "memory-studio[keyring]" in missing.note


def test_without_keyring_asking_for_it_by_name_says_what_to_install(no_keyring_package: None) -> None:
    with pytest.raises(KeyringMissingError, match=r"pip install 'memory-studio\[keyring\]'.*MY_KEY"):
        resolve_api_key(env_var="MY_KEY", keyring_username="me", environ={})
    with pytest.raises(KeyringMissingError, match=r"memory-studio\[keyring\]"):
        store_api_key("sk-x", username="MY_KEY")


def test_without_keyring_a_local_model_runs_and_a_401_names_the_install(no_keyring_package: None) -> None:
    with LoopbackServer(ScriptedModel(["hi"]), require_api_key="sk-right") as server:
        with OpenAICompatibleModel("m", base_url=server.base_url, environ={}) as model:
            assert model.describe()["api_key_source"] == "none"
            assert "keyring not installed" in model.describe()["api_key_note"]
            with pytest.raises(ModelError, match=r"memory-studio\[keyring\]"):
                model.generate([{"role": "user", "content": "hi"}])
