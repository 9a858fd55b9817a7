"""Preferences > Models: add, edit and test the models a re-run or a chat can use.

Edits are staged in the dialog and written by Save (``Preferences.save`` validates first). The key is
never shown: the status line says "•••• set" or "not set", computed on a worker (a keyring read may
block), and a key typed for the OS keyring goes straight to the keyring, never into QSettings.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from core.llm.keys import DEFAULT_KEYRING_SERVICE, KEYRING_INSTALL, keyring_available
from studio.preferences import (
    FROM_THE_URL,
    KEY_SOURCES,
    PRESETS,
    PROVIDER_NOTE_TIP,
    SCRIPTED_NAME,
    SELF_HOSTED_CHOICES,
    ConnectionResult,
    Endpoint,
    KeyStatus,
    ModelChoice,
    Preferences,
    check_connection,
    endpoint_from_model_string,
    key_status,
    provider_after_edit,
    provider_note,
    save_key,
    validate,
)
from studio.widgets.pane_header import alive_only
from studio.widgets.plain_tip import plain_tip
from studio.workers import WorkerPool
from studio.theme import set_tone
from studio.widgets.a11y import named
from studio.widgets.scroll_fit import dialog_body

_DIM = "color: palette(placeholder-text);"


class PreferencesDialog(QDialog):
    def __init__(self, preferences: Preferences, parent: QWidget | None = None,
                 pool: WorkerPool | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("preferencesDialog")
        self.setWindowTitle("Preferences")
        self.preferences = preferences
        self.pool = pool or WorkerPool(self, max_threads=2)
        state = preferences.state
        self.endpoints: list[Endpoint] = list(state.endpoints)
        # Each model's provider and base URL as saved, added from a preset or filled in: a base URL typed over keeps
        # that provider only while it is still that provider's server (``provider_after_edit``), decided from here
        # on every key typed, so a URL half typed loses nothing.
        # (A provider chosen in the Provider box is no origin: back at "From the base URL", the URL decides.)
        self.origins: list[tuple[str, str]] = [("" if e.provider_chosen else e.provider, e.base_url)
                                               for e in self.endpoints]
        self.default = state.default
        self._syncing = False
        self._build()
        self._fill_list()
        self.list.setCurrentRow(0)
        self.resize(780, 460)

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = QVBoxLayout(dialog_body(self))
        intro = QLabel("Models for re-running a turn (Replay) and for chatting (playground). Keys are read from "
                       "an environment variable or the OS keyring; they are never stored in the settings or the "
                       "database, and never shown.")
        intro.setWordWrap(True)
        intro.setStyleSheet(_DIM)
        root.addWidget(intro)
        body = QHBoxLayout()
        left = QVBoxLayout()
        self.list = QListWidget(self)
        self.list.setObjectName("modelList")
        named(self.list, "Models")
        self.list.setMinimumWidth(220)
        left.addWidget(self.list, 1)
        buttons = QHBoxLayout()
        self.add_btn = QToolButton(self)
        self.add_btn.setText("Add")
        self.add_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.add_btn)
        for preset in PRESETS:
            menu.addAction(preset, partial(self.add_endpoint, preset))
        self.add_btn.setMenu(menu)
        self.remove_btn = QPushButton("Remove", self)
        self.default_btn = QPushButton("Make Default", self)
        for b in (self.add_btn, self.remove_btn, self.default_btn):
            buttons.addWidget(b)
        left.addLayout(buttons)
        body.addLayout(left)

        self.stack = QStackedWidget(self)
        scripted = QLabel(
            f"<b>{SCRIPTED_NAME}</b><br><br>Always available, no network, no key. It answers every request "
            "with a short deterministic note saying how many messages the prompt had and quoting the last user "
            "message, so a re-run or a chat works offline and is never mistaken for a language model.")
        scripted.setWordWrap(True)
        scripted.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.stack.addWidget(scripted)
        self.stack.addWidget(self._build_form())
        body.addWidget(self.stack, 1)
        root.addLayout(body, 1)

        test_row = QHBoxLayout()
        self.test_btn = QPushButton("Test Connection", self)
        self.test_result = QLabel("")
        self.test_result.setObjectName("testResult")
        self.test_result.setWordWrap(True)
        self.test_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        test_row.addWidget(self.test_btn)
        test_row.addWidget(self.test_result, 1)
        root.addLayout(test_row)
        self.problems = QLabel("")
        self.problems.setObjectName("preferencesProblems")
        self.problems.setWordWrap(True)
        set_tone(self.problems, "error")
        root.addWidget(self.problems)
        self.box = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        root.addWidget(self.box)

        self.list.currentRowChanged.connect(self._show_row)
        self.remove_btn.clicked.connect(self.remove_current)
        self.default_btn.clicked.connect(self.make_default)
        self.test_btn.clicked.connect(self.test_current)
        self.box.accepted.connect(self.save)
        self.box.rejected.connect(self.reject)

    def _build_form(self) -> QWidget:
        page = QWidget(self)
        form = self.form = QFormLayout(page)
        form.setContentsMargins(8, 0, 0, 0)
        self.name_edit = QLineEdit()
        # A model by name, as agents take it ("openai/gpt-4o-mini", "ollama/llama3.1"): fills in the rest.
        self.model_string_edit = QLineEdit()
        self.model_string_edit.setObjectName("modelString")
        named(self.model_string_edit, "Model name")
        self.model_string_edit.setPlaceholderText("provider/model, e.g. groq/llama-3.1-8b-instant")
        self.model_string_btn = QPushButton("Fill In")
        self.model_string_btn.setToolTip("Set the base URL, model and key variable from a provider/model name, as "
                                         "Agent(model=...) and memory-studio serve --model resolve it; its "
                                         "<PROVIDER>_CONTEXT_WINDOW is read too")
        string_row = QWidget()
        string_layout = QHBoxLayout(string_row)
        string_layout.setContentsMargins(0, 0, 0, 0)
        string_layout.addWidget(self.model_string_edit, 1)
        string_layout.addWidget(self.model_string_btn)
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("http://localhost:11434/v1")
        self.model_edit = QLineEdit()
        self.model_edit.setPlaceholderText("llama3.1")
        self.source_combo = QComboBox()
        for key, title in KEY_SOURCES.items():
            self.source_combo.addItem(title, key)
        self.key_name_edit = QLineEdit()
        self.key_name_label = QLabel("Variable")  # (its text follows the key's source: its buddy's name too)
        self.key_name_label.setBuddy(self.key_name_edit)
        self.key_status = QLabel("")
        self.key_status.setObjectName("keyStatus")
        self.key_status.setWordWrap(True)
        self.key_value_edit = QLineEdit()
        self.key_value_edit.setObjectName("keyValue")
        named(self.key_value_edit, "Key to store in the OS keyring")
        self.key_value_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_value_edit.setPlaceholderText("paste a key to store it in the OS keyring")
        self.store_key_btn = QPushButton("Store in Keyring")
        self.key_row = QWidget()
        key_row = QHBoxLayout(self.key_row)
        key_row.setContentsMargins(0, 0, 0, 0)
        key_row.addWidget(self.key_value_edit, 1)
        key_row.addWidget(self.store_key_btn)
        self.keyring_note = QLabel("")
        self.keyring_note.setWordWrap(True)
        self.keyring_note.setStyleSheet(_DIM)
        self.timeout_spin = QDoubleSpinBox()
        self.timeout_spin.setRange(1, 600)
        self.timeout_spin.setSuffix(" s")
        # core.llm.yielding.self_hosted: where a stopped call's connection is closed (the server stops generating)
        # and background calls give way to turns (yield_to_turns="auto").
        self.hosting_combo = QComboBox()
        for text, value in SELF_HOSTED_CHOICES:
            self.hosting_combo.addItem(text, value)
        self.hosting_combo.setToolTip(
            "Self-hosted (llama.cpp, Ollama, vLLM on your machine or network): background calls give way to your "
            "turns and a stopped call's connection is closed, so the server stops generating. Hosted API: calls run "
            "side by side; a cancelled call's tokens are paid for. Auto: self-hosted when the base URL's host is "
            "localhost, *.local, or is or resolves to a private address.")
        # Whose variables (<PROVIDER>_CONTEXT_WINDOW) the model reads where its base URL does not say it (a server
        # behind a proxy): "From the base URL" (``Endpoint.variables_provider``), or a provider, kept as URLs are typed.
        from core.llm.providers import PROVIDERS

        self.provider_combo = QComboBox()
        self.provider_combo.setObjectName("providerChoice")
        self.provider_combo.addItem(FROM_THE_URL, "")
        for provider in PROVIDERS.values():
            self.provider_combo.addItem(provider.label or provider.name, provider.name)
        self.provider_combo.setToolTip(plain_tip(
            "Which provider's server this is, for its variables (<PROVIDER>_CONTEXT_WINDOW). From the base URL: the "
            "provider whose address it is, or the preset's or Fill In's while the URL is still that provider's. "
            "Choose one for a server the URL does not name, such as one behind a proxy or a gateway."))
        form.addRow("Name", self.name_edit)
        form.addRow("Model name", string_row)
        form.addRow("Base URL", self.url_edit)
        form.addRow("Provider", named(self.provider_combo, "Provider"))
        form.addRow("Server", named(self.hosting_combo, "Server"))
        form.addRow("Model", self.model_edit)
        form.addRow("Key from", named(self.source_combo, "Key from"))
        form.addRow(self.key_name_label, self.key_name_edit)
        form.addRow("Key", self.key_status)
        form.addRow("", self.key_row)
        form.addRow("", self.keyring_note)
        form.addRow("Timeout", self.timeout_spin)
        # Which provider's variables the model reads (``preferences.provider_note``): a model saved before endpoints
        # named their provider read none, silently (its <PROVIDER>_CONTEXT_WINDOW unread).
        self.provider_note = QLabel("")
        self.provider_note.setObjectName("providerNote")
        self.provider_note.setWordWrap(True)
        self.provider_note.setTextFormat(Qt.TextFormat.PlainText)
        self.provider_note.setStyleSheet(_DIM)
        self.provider_note.setToolTip(plain_tip(PROVIDER_NOTE_TIP))
        form.addRow("Variables", self.provider_note)
        for edit in (self.name_edit, self.url_edit, self.model_edit, self.key_name_edit):
            edit.textEdited.connect(self._form_edited)
        self.source_combo.currentIndexChanged.connect(self._form_edited)
        self.timeout_spin.valueChanged.connect(self._form_edited)
        self.hosting_combo.currentIndexChanged.connect(self._form_edited)
        self.provider_combo.currentIndexChanged.connect(self._form_edited)
        self.store_key_btn.clicked.connect(self.store_key)
        self.model_string_btn.clicked.connect(self.fill_from_model_string)
        self.model_string_edit.returnPressed.connect(self.fill_from_model_string)
        return page

    def fill_from_model_string(self) -> bool:
        """Fill the form from the ``provider/model`` name typed above it; False (and the reason shown)
        when the name cannot be resolved."""
        ep = self.current_endpoint()
        text = self.model_string_edit.text().strip()
        if ep is None or not text:
            return False
        try:
            filled = endpoint_from_model_string(text, name=ep.name)
        except ValueError as exc:  # ConfigurationError: unknown provider (with the nearest), no model
            self.problems.setText(str(exc))
            return False
        row = self.list.currentRow()
        self.endpoints[row - 1] = replace(filled, timeout=ep.timeout, self_hosted=ep.self_hosted)
        self.origins[row - 1] = (filled.provider, filled.base_url)
        self._show_row(row)
        self.problems.setText("")
        return True

    # -- list ------------------------------------------------------------------------------------
    def _fill_list(self) -> None:
        row = self.list.currentRow()
        self._syncing = True
        self.list.clear()
        for choice in [ModelChoice(SCRIPTED_NAME), *(ModelChoice(e.name, e) for e in self.endpoints)]:
            mark = "  (default)" if choice.name == self.default else ""
            item = QListWidgetItem((choice.name or "(unnamed)") + mark)
            item.setToolTip(choice.label)
            self.list.addItem(item)
        self._syncing = False
        if 0 <= row < self.list.count():
            self.list.setCurrentRow(row)

    def current_endpoint(self) -> Endpoint | None:
        row = self.list.currentRow()
        return self.endpoints[row - 1] if 1 <= row <= len(self.endpoints) else None

    def current_choice(self) -> ModelChoice:
        ep = self.current_endpoint()
        return ModelChoice(ep.name, ep) if ep is not None else ModelChoice(SCRIPTED_NAME)

    def _show_row(self, row: int) -> None:
        if self._syncing:
            return
        ep = self.current_endpoint()
        self.remove_btn.setEnabled(ep is not None)
        self.test_result.setText("")
        self.stack.setCurrentIndex(0 if ep is None else 1)
        if ep is None:
            return
        self._syncing = True
        self.name_edit.setText(ep.name)
        self.url_edit.setText(ep.base_url)
        self.model_edit.setText(ep.model)
        self.source_combo.setCurrentIndex(max(0, self.source_combo.findData(ep.key_source)))
        self.key_name_edit.setText(ep.key_name)
        self.timeout_spin.setValue(ep.timeout)
        self.hosting_combo.setCurrentIndex(max(0, [v for _t, v in SELF_HOSTED_CHOICES].index(ep.self_hosted)))
        self.provider_combo.setCurrentIndex(max(0, self.provider_combo.findData(ep.provider))
                                            if ep.provider_chosen else 0)
        self.provider_note.setText(provider_note(ep))
        self._syncing = False
        self._update_key_widgets()

    def add_endpoint(self, preset: str = "OpenAI") -> None:
        base = PRESETS.get(preset, PRESETS["OpenAI"])
        names = {e.name for e in self.endpoints}
        name, n = preset, 2
        while name in names:
            name, n = f"{preset} {n}", n + 1
        self.endpoints.append(Endpoint.from_dict({"name": name, **base}))
        self.origins.append((self.endpoints[-1].provider, self.endpoints[-1].base_url))
        self._fill_list()
        self.list.setCurrentRow(len(self.endpoints))

    def remove_current(self) -> None:
        ep = self.current_endpoint()
        if ep is None:
            return
        row = self.list.currentRow()
        del self.endpoints[row - 1]
        del self.origins[row - 1]
        if self.default == ep.name:
            self.default = SCRIPTED_NAME
        self._fill_list()
        self.list.setCurrentRow(min(row, len(self.endpoints)))

    def make_default(self) -> None:
        self.default = self.current_choice().name
        self._fill_list()

    # -- form ------------------------------------------------------------------------------------
    def _form_edited(self, *_: Any) -> None:
        if self._syncing:
            return
        row = self.list.currentRow()
        old = self.current_endpoint()
        if old is None:
            return
        source = self.source_combo.currentData()
        key_name = self.key_name_edit.text().strip()
        if source != old.key_source and not key_name:
            key_name = "OPENAI_API_KEY" if source == "env" else self.name_edit.text().strip() or "default"
            self._syncing = True
            self.key_name_edit.setText(key_name)
            self._syncing = False
        base_url = self.url_edit.text().strip()
        origin, origin_url = self.origins[row - 1]
        chosen = self.provider_combo.currentData() or ""
        new = Endpoint(self.name_edit.text().strip(), base_url, self.model_edit.text().strip(),
                       source, "" if source == "none" else key_name, self.timeout_spin.value(),
                       self.hosting_combo.currentData(),
                       chosen or (origin if base_url == origin_url else provider_after_edit(origin, base_url)),
                       provider_chosen=bool(chosen))
        self.endpoints[row - 1] = new
        if self.default == old.name:
            self.default = new.name
        item = self.list.item(row)
        item.setText((new.name or "(unnamed)") + ("  (default)" if new.name == self.default else ""))
        self.provider_note.setText(provider_note(new))  # (a base URL typed: inferred again)
        self.problems.setText("")
        if (new.key_source, new.key_name) != (old.key_source, old.key_name):
            self._update_key_widgets()

    def _update_key_widgets(self) -> None:
        ep = self.current_endpoint()
        if ep is None:
            return
        keyring = ep.key_source == "keyring"
        self.key_name_label.setText({"env": "Variable", "keyring": "Keyring entry"}.get(ep.key_source, "Key name"))
        self.key_name_edit.setEnabled(ep.key_source != "none")
        have_keyring = keyring_available()
        self.form.setRowVisible(self.key_row, keyring)
        self.key_value_edit.setEnabled(keyring and have_keyring)
        self.store_key_btn.setEnabled(keyring and have_keyring)
        if keyring and not have_keyring:
            self.keyring_note.setText(f"The OS keyring is an optional extra and is not installed: run "
                                      f"{KEYRING_INSTALL}, or choose 'Environment variable'.")
        elif keyring:
            self.keyring_note.setText(f"Stored under service {DEFAULT_KEYRING_SERVICE!r}, user {ep.key_name!r}.")
        elif ep.key_source == "env":
            self.keyring_note.setText("Read from the Studio's environment when the model is used.")
        else:
            self.keyring_note.setText("Local servers (Ollama, LM Studio, vLLM) usually need no key.")
        self.refresh_key_status()

    def refresh_key_status(self) -> None:
        ep = self.current_endpoint()
        if ep is None:
            return
        self.key_status.setText("checking…")
        self.pool.submit(lambda: key_status(ep), key="key-status",
                         on_result=alive_only(self, lambda s: self._on_key_status(ep, s)),
                         on_error=alive_only(self, lambda e: self.key_status.setText(f"not set — {e}")))

    def _on_key_status(self, ep: Endpoint, status: KeyStatus) -> None:
        cur = self.current_endpoint()
        if cur is not None and (cur.key_source, cur.key_name) == (ep.key_source, ep.key_name):
            self.key_status.setText(status.text)

    def store_key(self) -> None:
        ep = self.current_endpoint()
        value = self.key_value_edit.text()
        self.key_value_edit.clear()  # the key leaves the widget at once; only the keyring keeps it
        if ep is None:
            return
        self.key_status.setText("storing…")
        self.pool.submit(lambda: save_key(ep, value), key="store-key",
                         on_result=alive_only(self, lambda _r: self.refresh_key_status()),
                         on_error=alive_only(self, lambda e: self.key_status.setText(f"not stored — {e}")))

    # -- test and save ---------------------------------------------------------------------------
    def test_current(self) -> None:
        choice = self.current_choice()
        if choice.endpoint is not None:
            problems = validate([choice.endpoint])
            if problems:
                self.test_result.setText(" ".join(problems))
                return
        self.test_result.setText(f"Testing {choice.name}…")
        self.test_btn.setEnabled(False)
        self.pool.submit(lambda: check_connection(choice), key="test-connection",
                         on_result=alive_only(self, self._on_tested),
                         on_error=alive_only(self, lambda e: self._on_tested(ConnectionResult(False, str(e)))))

    def _on_tested(self, result: ConnectionResult) -> None:
        self.test_btn.setEnabled(True)
        set_tone(self.test_result, None if result.ok else "error")
        self.test_result.setText(("✓ " if result.ok else "✗ ") + result.text)

    def save(self) -> None:
        problems = validate(self.endpoints)
        if problems:
            self.problems.setText(" ".join(problems))
            return
        self.preferences.save(self.endpoints, self.default)
        self.accept()

    def done(self, result: int) -> None:
        self.pool.shutdown()  # late worker answers are dropped, never painted on a closed dialog
        super().done(result)
