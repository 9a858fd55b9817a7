from __future__ import annotations

from collections.abc import Iterator

import keyring
import keyring.errors
import pytest
from keyring.backend import KeyringBackend

from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel, Secret, resolve_api_key, store_api_key


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
