"""Preferences for models: endpoints in QSettings, keys only in the environment or the OS keyring."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import keyring
import pytest
from keyring.backend import KeyringBackend
from PySide6.QtCore import QSettings

from core.llm import LoopbackServer
from studio.preferences import (
    SCRIPTED_NAME,
    Endpoint,
    ModelChoice,
    Preferences,
    check_connection,
    key_status,
    provider_after_edit,
    provider_note,
    validate,
)
from studio.widgets.preferences_dialog import PreferencesDialog

SECRET = "sk-test-0123456789abcdef"


class MemoryKeyring(KeyringBackend):
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


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)


@pytest.fixture
def no_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "keyring", None)
    monkeypatch.setitem(sys.modules, "keyring.errors", None)


def ollama(**kw: Any) -> Endpoint:
    data = {"name": "Ollama", "base_url": "http://localhost:11434/v1", "model": "llama3.1", "key_source": "none",
            "key_name": ""}
    data.update(kw)
    return Endpoint.from_dict(data)


# -- pure rules ---------------------------------------------------------------------------------------
def test_validate_says_what_to_fix() -> None:
    assert validate([ollama()]) == []
    problems = " ".join(validate([
        ollama(name=""), ollama(name="A", base_url="localhost:11434"), ollama(name="B", model=""),
        ollama(name="C", key_source="env", key_name="not a name"), ollama(name="D", key_source="keyring"),
        ollama(name=SCRIPTED_NAME), ollama(name="E", base_url="https://me:sk-123@api.example.com/v1"),
        ollama(name="e"),
    ]))
    assert "give it a name" in problems
    assert "http:// or https://" in problems
    assert "name the model" in problems
    assert "environment variable" in problems
    assert "keyring entry" in problems
    assert "taken by the built-in offline model" in problems
    assert "user name or password" in problems
    assert "names must differ" in problems


def test_saved_and_read_back_without_any_key(tmp_path: Path, qapp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", SECRET)
    path = tmp_path / "prefs.ini"
    prefs = Preferences(QSettings(str(path), QSettings.Format.IniFormat))
    seen: list[bool] = []
    prefs.changed.connect(lambda: seen.append(True))
    remote = Endpoint("Remote", "https://api.example.com/v1", "gpt-x", "env", "MY_KEY")
    prefs.save([ollama(), remote], default="Remote")
    assert seen == [True]

    again = Preferences(QSettings(str(path), QSettings.Format.IniFormat))
    assert again.endpoints == [ollama(), remote]
    assert again.default_model().name == "Remote"
    assert [m.name for m in again.models()] == [SCRIPTED_NAME, "Ollama", "Remote"]  # offline model always there
    assert SECRET not in path.read_text()


def test_an_unknown_default_or_broken_value_falls_back_to_the_offline_model(tmp_path: Path, qapp: Any) -> None:
    settings = QSettings(str(tmp_path / "p.ini"), QSettings.Format.IniFormat)
    settings.setValue("models/endpoints", "{not json")
    settings.setValue("models/default", "Gone")
    prefs = Preferences(settings)
    assert prefs.endpoints == []
    assert prefs.default_model().scripted
    with pytest.raises(ValueError, match="give it a name"):
        prefs.save([ollama(name="")])


def test_self_hosted_is_saved_read_back_and_given_to_the_model(tmp_path: Path, qapp: Any,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    # A self-hosted server behind a public name, and a hosted API reached on a private address (a LiteLLM proxy in
    # front of OpenAI): the base URL alone decides each the wrong way, which only the endpoint's setting corrects.
    from core.llm.yielding import self_hosted

    path = tmp_path / "prefs.ini"
    prefs = Preferences(QSettings(str(path), QSettings.Format.IniFormat))
    public = ollama(name="Own GPU", base_url="https://llm.example.com/v1", self_hosted=True)
    proxy = ollama(name="Proxy", base_url="http://10.0.0.7:4000/v1", self_hosted="no")
    prefs.save([ollama(), public, proxy])
    again = Preferences(QSettings(str(path), QSettings.Format.IniFormat))
    assert [e.self_hosted for e in again.endpoints] == [None, True, False]
    built = [again.model(name).build() for name in ("Ollama", "Own GPU", "Proxy")]  # type: ignore[union-attr]
    assert [m.self_hosted for m in built] == [None, True, False]
    assert [self_hosted(m) for m in built] == [True, True, False]  # localhost by its URL; the other two as said

    # A value edited by hand into the settings file: the model is kept, decided from its URL, and the log says why.
    settings = QSettings(str(path), QSettings.Format.IniFormat)
    settings.setValue("models/endpoints", again.state.to_json().replace("false", '"maybe"'))
    settings.sync()
    with caplog.at_level("WARNING", logger="studio.preferences"):
        edited = Preferences(QSettings(str(path), QSettings.Format.IniFormat))
    assert [e.name for e in edited.endpoints] == ["Ollama", "Own GPU", "Proxy"]
    assert edited.endpoints[2].self_hosted is None
    assert "self_hosted of model 'Proxy' must be auto" in caplog.text and "'maybe'" in caplog.text


def test_key_status_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = Endpoint("R", "https://api.example.com/v1", "m", "env", "MY_KEY")
    shown = key_status(ep, environ={"MY_KEY": SECRET})
    assert shown.present and shown.text.startswith("•••• set") and SECRET not in shown.text
    missing = key_status(ep, environ={})
    assert not missing.present and missing.text.startswith("not set") and "MY_KEY" in missing.text
    assert key_status(ollama()).text == "no key needed"


def test_keyring_key_status(memory_keyring: MemoryKeyring) -> None:
    ep = Endpoint("R", "https://api.example.com/v1", "m", "keyring", "remote")
    assert key_status(ep).text.startswith("not set")
    memory_keyring.set_password("memory-studio", "remote", SECRET)
    status = key_status(ep)
    assert status.present and SECRET not in status.text and "OS keyring" in status.text


def test_keyring_missing_is_said_clearly(no_keyring: None) -> None:
    ep = Endpoint("R", "https://api.example.com/v1", "m", "keyring", "remote")
    status = key_status(ep)
    assert not status.present and "pip install 'memory-studio[keyring]'" in status.text
    result = check_connection(ModelChoice("R", ep))
    assert not result.ok and "keyring package is not installed" in result.text


# -- connection ---------------------------------------------------------------------------------------
def test_check_connection_against_the_loopback_server() -> None:
    with LoopbackServer(["OK"], require_api_key=SECRET) as server:
        ep = Endpoint("Loop", server.base_url, "loopback-chat", "env", "LOOP_KEY")
        good = check_connection(ModelChoice("Loop", ep), environ={"LOOP_KEY": SECRET})
        assert good.ok and "OK" in good.text and good.latency_ms is not None
        bad = check_connection(ModelChoice("Loop", ep), environ={})
        assert not bad.ok and "401" in bad.text and "LOOP_KEY" in bad.text
        assert SECRET not in bad.text


def test_offline_model_is_always_ready() -> None:
    result = check_connection(ModelChoice(SCRIPTED_NAME))
    assert result.ok and "Offline scripted reply" in result.text


# -- the dialog ---------------------------------------------------------------------------------------
@pytest.fixture
def prefs(tmp_path: Path, qapp: Any) -> Preferences:
    return Preferences(QSettings(str(tmp_path / "prefs.ini"), QSettings.Format.IniFormat))


def test_dialog_adds_edits_and_saves(qtbot: Any, prefs: Preferences, no_leaked_widgets: None) -> None:
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    assert dialog.list.count() == 1 and dialog.stack.currentIndex() == 0  # the offline model, nothing to edit
    dialog.add_endpoint("Ollama")
    assert dialog.stack.currentIndex() == 1
    assert dialog.url_edit.text() == "http://localhost:11434/v1"
    qtbot.waitUntil(lambda: dialog.key_status.text() == "no key needed")
    dialog.model_edit.clear()
    qtbot.keyClicks(dialog.model_edit, "qwen2.5")
    dialog.make_default()
    dialog.save()
    assert dialog.problems.text() == ""
    assert prefs.endpoints[0].model == "qwen2.5"
    assert prefs.default_model().name == "Ollama"


def test_dialog_sets_whether_the_server_is_self_hosted(qtbot: Any, prefs: Preferences,
                                                      no_leaked_widgets: None) -> None:
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.add_endpoint("vLLM")
    assert dialog.hosting_combo.currentData() is None  # auto, from the base URL
    dialog.hosting_combo.setCurrentIndex(dialog.hosting_combo.findData(False))
    dialog.model_string_edit.setText("vllm/served-model")
    assert dialog.fill_from_model_string()  # filling in the URL and model keeps the choice
    assert dialog.hosting_combo.currentData() is False
    dialog.save()
    assert dialog.problems.text() == "" and prefs.endpoints[0].self_hosted is False

    reopened = PreferencesDialog(prefs)
    qtbot.addWidget(reopened)
    reopened.list.setCurrentRow(1)
    assert reopened.hosting_combo.currentText() == "Hosted API"
    reopened.hosting_combo.setCurrentIndex(reopened.hosting_combo.findData(True))
    reopened.save()
    assert prefs.endpoints[0].self_hosted is True


def test_dialog_refuses_to_save_a_broken_endpoint(qtbot: Any, prefs: Preferences, no_leaked_widgets: None) -> None:
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.add_endpoint("vLLM")
    dialog.url_edit.clear()
    qtbot.keyClicks(dialog.url_edit, "localhost:8000")
    dialog.save()
    assert "http:// or https://" in dialog.problems.text()
    assert prefs.endpoints == []


def test_dialog_stores_a_keyring_key_only_in_the_keyring(qtbot: Any, prefs: Preferences, tmp_path: Path,
                                                          memory_keyring: MemoryKeyring,
                                                          no_leaked_widgets: None) -> None:
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.add_endpoint("OpenAI")
    dialog.source_combo.setCurrentIndex(dialog.source_combo.findData("keyring"))
    dialog.key_name_edit.setText("openai-work")
    dialog.key_name_edit.textEdited.emit("openai-work")
    qtbot.waitUntil(lambda: dialog.key_status.text().startswith("not set"))
    assert dialog.store_key_btn.isEnabled()
    dialog.key_value_edit.setText(SECRET)
    dialog.store_key_btn.click()
    assert dialog.key_value_edit.text() == ""  # gone from the widget at once
    qtbot.waitUntil(lambda: dialog.key_status.text().startswith("•••• set"))
    assert memory_keyring.entries[("memory-studio", "openai-work")] == SECRET
    dialog.save()
    assert prefs.endpoints[0].key_source == "keyring" and prefs.endpoints[0].key_name == "openai-work"
    assert SECRET not in (tmp_path / "prefs.ini").read_text()


def test_dialog_without_keyring_package_explains(qtbot: Any, prefs: Preferences, no_keyring: None,
                                                  no_leaked_widgets: None) -> None:
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.add_endpoint("OpenAI")
    dialog.source_combo.setCurrentIndex(dialog.source_combo.findData("keyring"))
    assert not dialog.store_key_btn.isEnabled()
    assert "pip install 'memory-studio[keyring]'" in dialog.keyring_note.text()
    qtbot.waitUntil(lambda: "pip install" in dialog.key_status.text())


def test_dialog_test_connection_runs_in_a_worker(qtbot: Any, prefs: Preferences, no_leaked_widgets: None) -> None:
    with LoopbackServer(["OK"]) as server:
        dialog = PreferencesDialog(prefs)
        qtbot.addWidget(dialog)
        dialog.add_endpoint("LM Studio")
        dialog.url_edit.setText(server.base_url)
        dialog.url_edit.textEdited.emit(server.base_url)
        dialog.test_btn.click()
        qtbot.waitUntil(lambda: dialog.test_result.text().startswith(("✓", "✗")), timeout=20_000)
        assert dialog.test_result.text().startswith("✓ Connected")
        dialog.pool.wait(5000)


def test_preferences_command_opens_the_dialog(make_window: Any, qtbot: Any) -> None:
    window = make_window()
    command = window.commands.command("app.preferences")
    assert command.title == "Preferences…" and command.shortcut == "Ctrl+,"
    assert "Preferences…" in [a.text() for a in window.menus["File"].actions()]
    window.commands.run("app.preferences")
    dialog = window.preferences_dialog
    assert isinstance(dialog, PreferencesDialog) and dialog.isVisible()
    assert dialog.preferences is window.preferences
    dialog.reject()
    qtbot.waitUntil(lambda: window.preferences_dialog is None)


def test_a_model_filled_in_from_its_name_reads_the_providers_context_window(
        qtbot: Any, prefs: Preferences, monkeypatch: pytest.MonkeyPatch, no_leaked_widgets: None) -> None:
    # A model named "llamacpp/…" in Preferences got no context window from LLAMACPP_CONTEXT_WINDOW, which the
    # engine's Agent(model="llamacpp/…") and serve --model read: the Chat sent a thread that had outgrown the
    # server's context whole, and failed on every turn. It is now read by the engine's own code, when the model is
    # built for a turn (so a changed variable counts at the next Studio start, as for agents).
    from core.errors import ConfigurationError
    from core.llm.providers import resolve_model

    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.add_endpoint("OpenAI")
    dialog.model_string_edit.setText("llamacpp/smollm2")
    assert dialog.fill_from_model_string()
    dialog.timeout_spin.setValue(120.0)  # an edit of the form keeps where the model came from
    dialog.add_endpoint("Ollama")  # a preset names its provider too
    dialog.save()
    assert dialog.problems.text() == ""
    again = Preferences(QSettings(prefs.settings.fileName(), QSettings.Format.IniFormat))
    assert [(e.name, e.provider, e.timeout) for e in again.endpoints] == [("OpenAI", "llamacpp", 120.0),
                                                                          ("Ollama", "ollama", 60.0)]
    choice = again.model("OpenAI")
    assert choice is not None
    environ = {"LLAMACPP_CONTEXT_WINDOW": "4096", "OLLAMA_CONTEXT_WINDOW": "8192"}
    model = choice.build(environ=environ)
    engine = resolve_model("llamacpp/smollm2", environ=environ)
    try:
        assert (model.context_window, model.context_window_env) == (4096, "LLAMACPP_CONTEXT_WINDOW")
        assert (engine.context_window, engine.context_window_env) == (model.context_window, model.context_window_env)
    finally:
        model.close()
        engine.close()
    ollama_model = again.model("Ollama").build(environ=environ)  # type: ignore[union-attr]
    assert ollama_model.context_window == 8192
    ollama_model.close()
    unset = choice.build(environ={})
    assert unset.context_window is None and unset.context_window_env == "LLAMACPP_CONTEXT_WINDOW"
    unset.close()
    # A bad value is refused as the engine refuses it, before anything is sent.
    with pytest.raises(ConfigurationError) as said:
        choice.build(environ={"LLAMACPP_CONTEXT_WINDOW": "4k"})
    with pytest.raises(ConfigurationError) as engine_said:
        resolve_model("llamacpp/smollm2", environ={"LLAMACPP_CONTEXT_WINDOW": "4k"})
    assert str(said.value) == str(engine_said.value) and "LLAMACPP_CONTEXT_WINDOW" in str(said.value)
    # A model entered by hand names no provider: no provider's variable applies to it.
    by_hand = ModelChoice("Box", ollama(name="Box", base_url="http://box:8080/v1")).build(environ=environ)
    assert by_hand.context_window is None and by_hand.context_window_env is None
    by_hand.close()


def test_a_provider_edited_by_hand_into_the_settings_is_read_as_none(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="studio.preferences"):
        ep = ollama(provider="llama-cpp")
    assert ep.provider == "" and ep.model == "llama3.1"
    assert "names the provider 'llama-cpp'" in caplog.text and "llamacpp" in caplog.text
    assert ollama(provider=["x"]).provider == ""


def test_models_saved_before_endpoints_named_their_provider_read_the_one_their_base_url_is(
        qtbot: Any, tmp_path: Path, qapp: Any, no_leaked_widgets: None) -> None:
    """A preferences file of an earlier version has no "provider" in its models: a llama.cpp server's model read no
    LLAMACPP_CONTEXT_WINDOW, said nowhere, so the Chat could send a 4,096-token server a longer prompt (found by
    s35-walk11). Where the base URL is one provider's (its default, or its <PROVIDER>_BASE_URL), that provider's
    variables are read, and Preferences says so; where it is none's, Preferences says plainly that none is read.
    Reading the file changes nothing in it."""
    import json

    path = tmp_path / "old-prefs.ini"
    old = QSettings(str(path), QSettings.Format.IniFormat)
    old.setValue("models/endpoints", json.dumps([  # (the shape before "provider": no such key)
        {"name": "Local llama", "base_url": "http://127.0.0.1:8080/v1/", "model": "smollm2", "key_source": "none",
         "key_name": "", "timeout": 60.0, "self_hosted": None},
        {"name": "Work box", "base_url": "http://box.lan:9000/v1", "model": "qwen", "key_source": "none",
         "key_name": "", "timeout": 60.0, "self_hosted": None},
        {"name": "Box vLLM", "base_url": "http://box.lan:8000/v1", "model": "qwen", "key_source": "none",
         "key_name": "", "timeout": 60.0, "self_hosted": None}]))
    old.setValue("models/default", "Local llama")
    old.sync()
    before = path.read_bytes()
    prefs = Preferences(QSettings(str(path), QSettings.Format.IniFormat))
    local, unknown, moved = (prefs.model(n) for n in ("Local llama", "Work box", "Box vLLM"))
    assert local is not None and unknown is not None and moved is not None
    assert local.endpoint is not None and local.endpoint.provider == ""  # (as saved)
    assert local.endpoint.variables_provider({}) == ("llamacpp", True)
    environ = {"LLAMACPP_CONTEXT_WINDOW": "4096", "VLLM_BASE_URL": "http://box.lan:8000/v1",
               "VLLM_CONTEXT_WINDOW": "32768"}
    for choice, window, env in ((local, 4096, "LLAMACPP_CONTEXT_WINDOW"), (unknown, None, None),
                                (moved, 32768, "VLLM_CONTEXT_WINDOW")):  # (vLLM's base URL by its variable)
        model = choice.build(environ=environ)
        try:
            assert (model.context_window, model.context_window_env) == (window, env), choice.name
        finally:
            model.close()
    assert "LLAMACPP_CONTEXT_WINDOW is read" in provider_note(local.endpoint, {})
    assert "inferred" in provider_note(local.endpoint, {})
    assert provider_note(unknown.endpoint, {}).startswith("None: its base URL is no provider's")  # type: ignore[arg-type]

    dialog = PreferencesDialog(prefs)  # the form says it
    qtbot.addWidget(dialog)
    dialog.list.setCurrentRow(1)
    assert dialog.provider_note.text() == provider_note(local.endpoint)
    dialog.list.setCurrentRow(2)
    assert dialog.provider_note.text().startswith("None:")
    dialog.url_edit.setText("http://localhost:11434/v1")  # a provider's URL typed: inferred as it is typed
    dialog.url_edit.textEdited.emit("http://localhost:11434/v1")
    assert dialog.provider_note.text().startswith("Ollama (inferred")
    dialog.reject()
    assert path.read_bytes() == before  # (nothing written by reading or by a dialog cancelled)


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_the_variables_note_reads_whole_in_the_dialog(qtbot: Any, prefs: Preferences, no_leaked_widgets: None,
                                                      themed: str | None, theme: str | None) -> None:
    """The note under Timeout (``provider_note``), at the dialog's own size: a longer one was cut at its third line."""
    prefs.save([Endpoint("Box", "http://box.lan:9000/v1", "qwen", "none", ""),
                Endpoint("Local", "http://localhost:8080/v1", "smollm2", "none", "")])
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.show()
    note = dialog.provider_note
    for row in (1, 2):
        dialog.list.setCurrentRow(row)
        qtbot.waitUntil(lambda: note.height() >= note.heightForWidth(note.width()) > 0, timeout=5_000)
        assert note.visibleRegion().boundingRect().height() >= note.heightForWidth(note.width())
    dialog.reject()


def test_a_presets_provider_follows_the_base_url_typed_over_it() -> None:
    """``provider_after_edit``: the provider a preset (or Fill In) named is kept while the base URL typed is still
    that provider's server, and left to the URL (``variables_provider``) once it is another's or none's."""
    env = {"LLAMACPP_BASE_URL": "http://box.lan:9000/v1"}
    assert provider_after_edit("ollama", "http://localhost:1234/v1", {}) == ""  # LM Studio's: inferred from the URL
    assert provider_after_edit("ollama", "http://127.0.0.1:11434/v1/", {}) == "ollama"  # its own, written otherwise
    assert provider_after_edit("ollama", "http://gpu-box.lan:11434/v1", {}) == "ollama"  # on another machine
    assert provider_after_edit("ollama", "http://localhost:8081/v1", {}) == ""  # another server on this machine
    assert provider_after_edit("openai", "https://api.openai.com/v2", {}) == "openai"  # the same hosted API
    assert provider_after_edit("openai", "https://llm-proxy.example.com/v1", {}) == ""  # (port 443 says nothing)
    assert provider_after_edit("llamacpp", "http://box.lan:9000/v1", env) == "llamacpp"  # by its <PROVIDER>_BASE_URL
    assert provider_after_edit("ollama", "http://box.lan:9000/v1", env) == ""  # llama.cpp's, by its variable
    assert provider_after_edit("", "http://localhost:11434/v1", {}) == ""  # none named: the URL decides, as before
    assert provider_after_edit("ollama", "", {}) == "" and provider_after_edit("ollama", "not a url", {}) == ""


def _dialog_adding(qtbot: Any, prefs: Preferences, monkeypatch: pytest.MonkeyPatch, preset: str) -> PreferencesDialog:
    """Preferences shown, a model added from ``preset``; no ``<PROVIDER>_BASE_URL`` of the machine's moves a
    provider's address."""
    from core.llm.providers import PROVIDERS

    for provider in PROVIDERS.values():
        monkeypatch.delenv(provider.base_url_env, raising=False)
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.add_endpoint(preset)
    return dialog


def test_a_base_url_typed_over_a_presets_reads_the_providers_variables_it_is(
        qtbot: Any, prefs: Preferences, monkeypatch: pytest.MonkeyPatch, no_leaked_widgets: None) -> None:
    """A model added from the Ollama preset, its base URL typed over with LM Studio's, read OLLAMA_* (the preset's
    provider was kept): its Variables line and its model follow what was typed, key by key; nothing is written
    until Save."""
    dialog = _dialog_adding(qtbot, prefs, monkeypatch, "Ollama")
    note = dialog.provider_note

    def type_url(url: str) -> None:
        dialog.url_edit.selectAll()
        qtbot.keyClicks(dialog.url_edit, url)
        assert dialog.current_endpoint().base_url == url  # type: ignore[union-attr]

    assert note.text() == "Ollama: OLLAMA_CONTEXT_WINDOW is read as its context size."
    type_url("http://localhost:1234/v1")
    assert note.text() == "LM Studio (inferred from its base URL): LMSTUDIO_CONTEXT_WINDOW is read as its context size."
    type_url("http://gpu-box.lan:11434/v1")  # an Ollama on another machine, at Ollama's port
    assert note.text().startswith("Ollama: OLLAMA_CONTEXT_WINDOW")
    type_url("http://localhost:8081/v1")  # a llama.cpp server started on another port
    assert note.text().startswith("None: its base URL is no provider's") and "<PROVIDER>_BASE_URL" in note.toolTip()
    monkeypatch.setenv("LLAMACPP_BASE_URL", "http://localhost:8081/v1")  # as the note's tooltip says
    type_url("http://localhost:8081/v1")
    assert note.text().startswith("llama.cpp server (inferred from its base URL)"), note.text()
    monkeypatch.delenv("LLAMACPP_BASE_URL")
    assert not Path(prefs.settings.fileName()).exists()  # nothing written by typing
    type_url("http://localhost:1234/v1")
    dialog.save()
    again = Preferences(QSettings(prefs.settings.fileName(), QSettings.Format.IniFormat))
    (saved,) = again.endpoints
    assert (saved.name, saved.provider, saved.base_url) == ("Ollama", "", "http://localhost:1234/v1")
    model = again.model("Ollama").build(environ={"OLLAMA_CONTEXT_WINDOW": "8192",  # type: ignore[union-attr]
                                                 "LMSTUDIO_CONTEXT_WINDOW": "4096"})
    try:
        assert (model.context_window, model.context_window_env) == (4096, "LMSTUDIO_CONTEXT_WINDOW")
    finally:
        model.close()


@pytest.mark.parametrize("theme", ["dark"])
def test_a_model_behind_a_proxy_names_its_provider_in_the_provider_box(
        qtbot: Any, prefs: Preferences, monkeypatch: pytest.MonkeyPatch, no_leaked_widgets: None,
        themed: str | None, theme: str, tmp_path: Path) -> None:
    """The base URL alone decided whose variables a model reads: an LM Studio reached through a proxy
    (``https://llm-gw.example.com/lmstudio/v1``) or OpenAI through a company gateway read none, and Preferences could
    not be told (Fill In put the provider's own URL back; a URL typed over it dropped the provider again). The
    Provider box says it: "From the base URL" (as before, the default) or a provider, kept whatever URL is typed,
    saved, read back, read by the model built for a turn, and named in the model pickers' labels."""
    dialog = _dialog_adding(qtbot, prefs, monkeypatch, "LM Studio")
    combo, note = dialog.provider_combo, dialog.provider_note
    assert combo.currentText() == "From the base URL" and note.text().startswith("LM Studio: LMSTUDIO_CONTEXT_WINDOW")
    dialog.url_edit.selectAll()
    qtbot.keyClicks(dialog.url_edit, "https://llm-gw.example.com/lmstudio/v1")
    assert note.text().startswith("None: its base URL is no provider's")
    combo.setCurrentIndex(combo.findData("lmstudio"))
    assert note.text() == "LM Studio (chosen): LMSTUDIO_CONTEXT_WINDOW is read as its context size."
    qtbot.keyClicks(dialog.url_edit, "2")  # a URL typed after the choice keeps it
    assert dialog.current_endpoint().base_url.endswith("/v12")  # type: ignore[union-attr]
    assert note.text().startswith("LM Studio (chosen)")
    qtbot.waitUntil(lambda: note.height() >= note.heightForWidth(note.width()) > 0, timeout=5_000)
    assert note.visibleRegion().boundingRect().height() >= note.heightForWidth(note.width())  # (whole, the row added)
    dialog.grab().save(str(tmp_path / "provider-chosen.png"))
    dialog.save()
    assert dialog.problems.text() == ""

    again = Preferences(QSettings(prefs.settings.fileName(), QSettings.Format.IniFormat))
    (saved,) = again.endpoints
    assert (saved.provider, saved.provider_chosen) == ("lmstudio", True)
    choice = again.model("LM Studio")
    assert choice is not None and choice.label.endswith("(LM Studio)")
    model = choice.build(environ={"LMSTUDIO_CONTEXT_WINDOW": "4096"})
    try:
        assert (model.context_window, model.context_window_env) == (4096, "LMSTUDIO_CONTEXT_WINDOW")
    finally:
        model.close()

    reopened = PreferencesDialog(again)
    qtbot.addWidget(reopened)
    reopened.list.setCurrentRow(1)
    assert reopened.provider_combo.currentData() == "lmstudio"
    reopened.provider_combo.setCurrentIndex(0)  # back to the URL's rule: none for this URL
    assert reopened.provider_note.text().startswith("None: its base URL is no provider's")
    reopened.save()
    assert (again.endpoints[0].provider, again.endpoints[0].provider_chosen) == ("", False)
    assert not again.model("LM Studio").label.endswith(")")  # type: ignore[union-attr]
