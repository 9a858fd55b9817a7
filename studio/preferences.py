"""Preferences for models: the endpoints a re-run (Replay) or a chat (playground) can use.

An endpoint is an OpenAI-compatible server (OpenAI, Ollama, LM Studio, vLLM, …): a name, a base URL,
a model and *where its key comes from*: an environment variable, the OS keyring (service
``memory-studio``, optional ``keyring`` extra) or nowhere (a local server). The key itself is never
stored here, in QSettings or in the database, and never shown: the Studio only says "•••• set" or
"not set". The offline scripted model is always available and needs no configuration.

``Preferences`` is the one home of this list (QSettings keys ``models/endpoints`` and
``models/default``); panes ask it for ``models()`` and build a ``ChatModel`` from a ``ModelChoice``
on a worker thread (a keyring lookup may block).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence
from urllib.parse import urlsplit

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import QWidget

from core.llm.keys import (
    DEFAULT_KEYRING_SERVICE,
    KEYRING_INSTALL,
    KeyringMissingError,
    keyring_available,
    resolve_api_key,
    store_api_key,
)

if TYPE_CHECKING:  # pragma: no cover - the model classes load where a model is built (a worker)
    from core.llm import ScriptedModel
    from core.llm.base import ChatModel

logger = logging.getLogger(__name__)

KeySource = Literal["env", "keyring", "none"]
KEY_SOURCES: dict[KeySource, str] = {
    "env": "Environment variable",
    "keyring": "OS keyring",
    "none": "No key (local server)",
}
SCRIPTED_NAME = "Scripted (offline)"
#: The Provider box's first choice (``Endpoint.provider_chosen`` False): the base URL decides.
FROM_THE_URL = "From the base URL"
#: The choices of an endpoint's ``self_hosted`` in Preferences, as shown: None first (the default).
SELF_HOSTED_CHOICES: tuple[tuple[str, bool | None], ...] = (
    ("Auto: decided from the base URL", None),
    ("Self-hosted: on your machine or network", True),
    ("Hosted API", False),
)
SETTINGS_ENDPOINTS = "models/endpoints"
SETTINGS_DEFAULT = "models/default"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Starting points for "Add"; the user edits them.
PRESETS: dict[str, dict[str, Any]] = {
    "OpenAI": {"base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini", "key_source": "env",
               "key_name": "OPENAI_API_KEY", "provider": "openai"},
    "Ollama": {"base_url": "http://localhost:11434/v1", "model": "llama3.1", "key_source": "none", "key_name": "",
               "provider": "ollama"},
    "LM Studio": {"base_url": "http://localhost:1234/v1", "model": "local-model", "key_source": "none",
                  "key_name": "", "provider": "lmstudio"},
    "vLLM": {"base_url": "http://localhost:8000/v1", "model": "served-model", "key_source": "none", "key_name": "",
             "provider": "vllm"},
}


@dataclass(frozen=True)
class Endpoint:
    """One configured OpenAI-compatible model. ``key_name`` is the environment variable's name, or the
    keyring user under service ``memory-studio``; empty for ``key_source="none"``."""

    name: str
    base_url: str
    model: str
    key_source: KeySource = "env"
    key_name: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    #: Whether the server runs on your machine or network (True) or is a hosted API (False); None: decided from
    #: the base URL (``core.llm.yielding.self_hosted``). Passed to the model as ``OpenAICompatibleModel(self_hosted=)``.
    self_hosted: bool | None = None
    #: The provider (``core.llm.providers.PROVIDERS``) whose variables its model reads, as a model named
    #: ``provider/model`` does: ``<PROVIDER>_CONTEXT_WINDOW`` (``LLAMACPP_CONTEXT_WINDOW=4096``). Set by a preset or
    #: by Fill In from a ``provider/model`` name, or chosen in the Provider box; empty: none (a model entered by hand,
    #: or saved before).
    provider: str = ""
    #: Whether the user chose ``provider`` in Preferences' Provider box (a server behind a proxy, whose URL is no
    #: provider's): kept whatever base URL is typed, where a preset's or Fill In's follows the URL
    #: (``provider_after_edit``). False: "From the base URL".
    provider_chosen: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Endpoint":
        """An endpoint as saved. A ``self_hosted`` that is not True, False, null or one of the words
        ``parse_self_hosted`` takes (a settings file edited by hand) is read as None (decided from the base URL),
        with a warning in the log saying so, and so is a ``provider`` that names none as ""; the rest of the
        endpoint is kept."""
        from core.llm.providers import PROVIDERS
        from core.llm.yielding import parse_self_hosted

        source = data.get("key_source", "env")
        name = str(data.get("name", "")).strip()
        try:
            said = parse_self_hosted(data.get("self_hosted"), what=f"self_hosted of model {name!r}")
        except ValueError as exc:
            logger.warning("%s It is decided from the base URL until you choose in Preferences.", exc)
            said = None
        provider = data.get("provider") or ""
        if not isinstance(provider, str) or (provider and provider not in PROVIDERS):
            logger.warning("Model %r names the provider %r, which is none of %s; its variables (such as "
                           "<PROVIDER>_CONTEXT_WINDOW) are not read.", name, provider, ", ".join(sorted(PROVIDERS)))
            provider = ""
        return cls(
            name=name, base_url=str(data.get("base_url", "")).strip(),
            model=str(data.get("model", "")).strip(),
            key_source=source if source in KEY_SOURCES else "env",
            key_name=str(data.get("key_name", "") or "").strip(), timeout=float(data.get("timeout", 60.0) or 60.0),
            self_hosted=said, provider=provider, provider_chosen=bool(provider) and data.get("provider_chosen") is True,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def variables_provider(self, environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
        """The provider whose variables (``<PROVIDER>_CONTEXT_WINDOW``) its model reads, and whether it was inferred:
        its ``provider``, else the one provider whose base URL its base URL is (``provider_for_url``): a model saved
        before endpoints named their provider, or entered by hand with a provider's URL (found by s35-walk11: such a
        model read no ``LLAMACPP_CONTEXT_WINDOW``, so a turn could overflow a 4,096-token llama.cpp server). ("",
        False): none. Nothing is saved by asking: the preferences change only when the user saves them."""
        if self.provider:
            return self.provider, False
        inferred = provider_for_url(self.base_url, environ)
        return inferred, bool(inferred)

    @property
    def key_where(self) -> str:
        if self.key_source == "env":
            return f"environment variable {self.key_name}"
        if self.key_source == "keyring":
            return f"OS keyring ({DEFAULT_KEYRING_SERVICE!r}, user {self.key_name!r})"
        return "no key"


_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def _url_key(url: str) -> tuple[str, str, int | None, str] | None:
    """What two base URLs are compared by: scheme, host (the loopback names as one), port (the scheme's by default)
    and path without its last "/"; None for no URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if not parts.scheme or not host:
        return None
    return parts.scheme.lower(), "localhost" if host in _LOOPBACK_HOSTS else host, port, parts.path.rstrip("/")


def provider_for_url(base_url: str, environ: Mapping[str, str] | None = None) -> str:
    """The provider (``core.llm.providers.PROVIDERS``) whose base URL ``base_url`` is, its default one or the one its
    ``<PROVIDER>_BASE_URL`` gives; "" where none is, or more than one (no guess)."""
    from core.llm.providers import PROVIDERS

    key = _url_key(base_url)
    if key is None:
        return ""
    found = [p.name for p in PROVIDERS.values() if key in (_url_key(p.base_url), _url_key(p.endpoint(environ)))]
    return found[0] if len(found) == 1 else ""


def provider_after_edit(origin: str, base_url: str, environ: Mapping[str, str] | None = None) -> str:
    """The provider a model names once its base URL was typed over: ``origin`` (its preset's, Fill In's, or as
    saved) while ``base_url`` is still that provider's server, else "" (its base URL then decides,
    ``Endpoint.variables_provider``: another provider's URL reads that provider's variables, no provider's none).

    An LM Studio URL typed into the Ollama preset read OLLAMA_* (found 2026-12-07 by a walk of the app). Still that
    provider's server: a URL that is its own (its default or ``<PROVIDER>_BASE_URL``), or one on the same host (a
    hosted API's other path), or at the same port other than 80 and 443 (an Ollama on another machine, at 11434).
    A loopback URL at another port is another server: a llama.cpp started on 8081 is no Ollama."""
    from core.llm.providers import PROVIDERS

    provider = PROVIDERS.get(origin)
    if provider is None:
        return ""
    found = provider_for_url(base_url, environ)
    if found:
        return origin if found == origin else ""
    key = _url_key(base_url)
    for url in {provider.base_url, provider.endpoint(environ)}:
        own = _url_key(url)
        if key is None or own is None:
            continue
        if (key[1] == own[1] and key[1] != "localhost") or (key[2] == own[2] and key[2] not in (80, 443)):
            return origin
    return ""


def provider_note(ep: Endpoint, environ: Mapping[str, str] | None = None) -> str:
    """What Preferences says of the variables ``ep``'s model reads (``Endpoint.variables_provider``)."""
    from core.llm.providers import PROVIDERS

    name, inferred = ep.variables_provider(environ)
    provider = PROVIDERS.get(name)
    if provider is None:
        return "None: its base URL is no provider's, so no <PROVIDER>_CONTEXT_WINDOW is read; Fill In names one."
    how = " (inferred from its base URL)" if inferred else " (chosen)" if ep.provider_chosen else ""
    return f"{provider.label or provider.name}{how}: {provider.context_window_env} is read as its context size."


#: The Variables line's tooltip: how a provider's server at an address of its own is named (two lines of the form
#: hold the line itself, not this too).
PROVIDER_NOTE_TIP = ("A provider's server at another address than its own (a llama.cpp server on port 8081) is named "
                     "by its <PROVIDER>_BASE_URL (LLAMACPP_BASE_URL=http://localhost:8081/v1), as for "
                     "Agent(model=\"llamacpp/…\"); Fill In then uses that address.")


def endpoint_from_model_string(text: str, *, name: str | None = None,
                               environ: Mapping[str, str] | None = None) -> Endpoint:
    """An endpoint for a ``provider/model`` name (``"groq/llama-3.1-8b-instant"``), as ``Agent(model=...)``
    resolves it: the provider's base URL (or ``<PROVIDER>_BASE_URL``) and key variable. Raises
    ``ConfigurationError`` (an unknown provider, with the nearest known one) for anything else."""
    from core.llm.providers import parse_model_name

    parsed = parse_model_name(text.strip())
    provider = parsed.provider
    return Endpoint(
        name=name or parsed.text, base_url=provider.endpoint(environ), model=parsed.model,
        key_source="env" if provider.key_required else "none",
        key_name=provider.key_env or "" if provider.key_required else "", provider=provider.name,
    )


def validate(endpoints: Sequence[Endpoint]) -> list[str]:
    """What is wrong with a list of endpoints, in words that say what to fix (empty: fine)."""
    problems: list[str] = []
    seen: set[str] = set()
    for i, ep in enumerate(endpoints, start=1):
        label = f"Model {ep.name!r}" if ep.name else f"Model #{i}"
        if not ep.name:
            problems.append(f"{label}: give it a name.")
        elif ep.name.casefold() == SCRIPTED_NAME.casefold():
            problems.append(f"{label}: this name is taken by the built-in offline model; choose another.")
        elif ep.name.casefold() in seen:
            problems.append(f"{label}: two models have this name; names must differ.")
        seen.add(ep.name.casefold())
        parts = urlsplit(ep.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append(f"{label}: the base URL must start with http:// or https:// "
                            "(for example http://localhost:11434/v1).")
        elif parts.username or parts.password:
            problems.append(f"{label}: the base URL holds a user name or password; remove it and put the key "
                            "in an environment variable or the OS keyring.")
        if not ep.model:
            problems.append(f"{label}: name the model the server should run (for example llama3.1).")
        if ep.key_source == "env" and not _ENV_NAME.match(ep.key_name):
            problems.append(f"{label}: name the environment variable that holds the key (for example "
                            "OPENAI_API_KEY), or choose 'No key' for a local server.")
        if ep.key_source == "keyring" and not ep.key_name:
            problems.append(f"{label}: name the keyring entry (the user under service "
                            f"{DEFAULT_KEYRING_SERVICE!r}).")
    return problems


# -- keys --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyStatus:
    present: bool
    text: str  # never contains the key: "•••• set (…)" or "not set — …"


def key_status(ep: Endpoint, environ: Mapping[str, str] | None = None) -> KeyStatus:
    """Whether the endpoint's key can be found, without revealing it (may read the keyring: a worker)."""
    if ep.key_source == "none":
        return KeyStatus(True, "no key needed")
    if ep.key_source == "env":
        resolved = resolve_api_key(env_var=ep.key_name or None, keyring_service=None, environ=environ)
        if resolved.secret:
            return KeyStatus(True, f"•••• set (environment variable {ep.key_name})")
        return KeyStatus(False, f"not set — set the environment variable {ep.key_name} before starting the Studio")
    if not keyring_available():
        return KeyStatus(False, f"not set — the OS keyring needs the keyring package ({KEYRING_INSTALL}); "
                                "or use an environment variable")
    try:
        resolved = resolve_api_key(env_var=None, keyring_service=DEFAULT_KEYRING_SERVICE,
                                   keyring_username=ep.key_name, environ={})
    except KeyringMissingError as exc:  # raced with an uninstall; say the same thing
        return KeyStatus(False, f"not set — {exc}")
    if resolved.secret:
        return KeyStatus(True, f"•••• set (OS keyring, user {ep.key_name})")
    note = f" ({resolved.note})" if resolved.note else ""
    return KeyStatus(False, f"not set in the OS keyring{note} — type the key below and choose Store in Keyring")


def save_key(ep: Endpoint, value: str) -> None:
    """Put a key in the OS keyring under this endpoint's entry (never anywhere else)."""
    if ep.key_source != "keyring" or not ep.key_name:
        raise ValueError("Choose 'OS keyring' as the key source and name the entry first.")
    if not value.strip():
        raise ValueError("Type the key first.")
    store_api_key(value.strip(), username=ep.key_name)


# -- models ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelChoice:
    """One entry of a model picker: the offline scripted model, or a configured endpoint."""

    name: str
    endpoint: Endpoint | None = None  # None: the offline scripted model

    @property
    def scripted(self) -> bool:
        return self.endpoint is None

    @property
    def label(self) -> str:
        if self.endpoint is None:
            return f"{SCRIPTED_NAME} — no language model"
        return f"{self.name} — {self.endpoint.model} @ {self.endpoint.base_url}" + self._chosen_provider()

    def _chosen_provider(self) -> str:
        """" (LM Studio)" for a provider chosen in Preferences (its base URL does not say it), else ""."""
        from core.llm.providers import PROVIDERS

        ep = self.endpoint
        provider = PROVIDERS.get(ep.provider) if ep is not None and ep.provider_chosen else None
        return f" ({provider.label or provider.name})" if provider is not None else ""

    def build(self, *, environ: Mapping[str, str] | None = None) -> ChatModel:
        """The chat model (call on a worker: a keyring lookup may block). A keyring source without the
        keyring package raises ``KeyringMissingError`` naming the install command."""
        from core.llm import OpenAICompatibleModel
        from core.llm.providers import PROVIDERS

        ep = self.endpoint
        if ep is None:
            return offline_model()
        # The provider's variables, read as for a model named provider/model (a bad value: ConfigurationError).
        provider = PROVIDERS.get(ep.variables_provider(environ)[0])
        keywords = provider.model_keywords(environ) if provider is not None else {}
        return OpenAICompatibleModel(
            ep.model, base_url=ep.base_url, timeout=ep.timeout, environ=environ,
            api_key_env=ep.key_name if ep.key_source == "env" else None,
            keyring_service=DEFAULT_KEYRING_SERVICE if ep.key_source == "keyring" else None,
            keyring_username=ep.key_name if ep.key_source == "keyring" else None, self_hosted=ep.self_hosted,
            **keywords,
        )


def offline_reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The scripted model's answer: deterministic, and plainly not from a language model."""
    from core.llm.scripted import prompt_estimate

    last_user = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    quoted = last_user if len(last_user) <= 160 else last_user[:160] + "…"
    size = prompt_estimate(messages, tools)  # what the model reports as the prompt's tokens (the footer's count)
    return (f"Offline scripted reply (no language model was called). The prompt had {len(messages)} "
            f"message(s), about {size:,} tokens" + (f" and {len(tools)} tool(s)" if tools else "")
            + (f"; the last user message was: “{quoted}”" if quoted else "") + ".")


def offline_model() -> ScriptedModel:
    from core.llm import ScriptedModel

    return ScriptedModel(offline_reply, name="offline")


@dataclass(frozen=True)
class ConnectionResult:
    ok: bool
    text: str
    latency_ms: float | None = None


def check_connection(choice: ModelChoice, *, environ: Mapping[str, str] | None = None) -> ConnectionResult:
    """A tiny request to the model (run on a worker). Never raises: the result says what happened."""
    from core.llm import ModelError

    started = time.perf_counter()
    try:
        model = choice.build(environ=environ)
    except (KeyringMissingError, ValueError) as exc:
        return ConnectionResult(False, str(exc))
    try:
        wait = min(choice.endpoint.timeout, 30.0) if choice.endpoint else None
        result = model.generate([{"role": "user", "content": "Reply with the single word OK."}], max_tokens=8,
                                timeout=wait)
    except ModelError as exc:
        return ConnectionResult(False, str(exc))
    except Exception as exc:  # noqa: BLE001 - shown to the user, who can act on it
        logger.warning("test connection to %s failed: %s", choice.name, type(exc).__name__)
        return ConnectionResult(False, f"{type(exc).__name__}: {exc}")
    finally:
        close = getattr(model, "close", None)
        if callable(close):
            close()
    ms = (time.perf_counter() - started) * 1000
    reply = (result.text or "").strip().replace("\n", " ")
    reply = reply if len(reply) <= 60 else reply[:60] + "…"
    return ConnectionResult(True, f"Connected: {result.model_id or choice.name} replied “{reply}” in {ms:,.0f} ms.",
                            ms)


# -- the store ---------------------------------------------------------------------------------------
@dataclass
class ModelPreferences:
    """Plain state: the endpoints and which model is the default."""

    endpoints: list[Endpoint] = field(default_factory=list)
    default: str = SCRIPTED_NAME

    def models(self) -> list[ModelChoice]:
        return [ModelChoice(SCRIPTED_NAME), *(ModelChoice(ep.name, ep) for ep in self.endpoints)]

    def model(self, name: str | None) -> ModelChoice | None:
        return next((m for m in self.models() if m.name == name), None)

    def default_model(self) -> ModelChoice:
        return self.model(self.default) or ModelChoice(SCRIPTED_NAME)

    def to_json(self) -> str:
        return json.dumps([ep.to_dict() for ep in self.endpoints])

    @classmethod
    def from_settings_values(cls, endpoints_json: Any, default: Any) -> "ModelPreferences":
        endpoints: list[Endpoint] = []
        try:
            raw = json.loads(endpoints_json) if isinstance(endpoints_json, str) and endpoints_json else []
            for item in raw if isinstance(raw, list) else []:
                if isinstance(item, dict):
                    endpoints.append(Endpoint.from_dict(item))
        except (ValueError, TypeError) as exc:
            logger.warning("model preferences are unreadable and were ignored: %s", exc)
        prefs = cls(endpoints, str(default) if default else SCRIPTED_NAME)
        if prefs.model(prefs.default) is None:
            prefs.default = SCRIPTED_NAME
        return prefs


class Preferences(QObject):
    """The Studio's preferences for models, kept in QSettings (never a key: see the module doc)."""

    changed = Signal()

    def __init__(self, settings: QSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self._state = ModelPreferences.from_settings_values(settings.value(SETTINGS_ENDPOINTS),
                                                            settings.value(SETTINGS_DEFAULT))

    @property
    def state(self) -> ModelPreferences:
        return replace(self._state, endpoints=list(self._state.endpoints))

    @property
    def endpoints(self) -> list[Endpoint]:
        return list(self._state.endpoints)

    def models(self) -> list[ModelChoice]:
        return self._state.models()

    def model(self, name: str | None) -> ModelChoice | None:
        return self._state.model(name)

    def default_model(self) -> ModelChoice:
        return self._state.default_model()

    def save(self, endpoints: Sequence[Endpoint], default: str | None = None) -> None:
        problems = validate(endpoints)
        if problems:
            raise ValueError(" ".join(problems))
        state = ModelPreferences(list(endpoints), default or SCRIPTED_NAME)
        if state.model(state.default) is None:
            state.default = SCRIPTED_NAME
        self._state = state
        self.settings.setValue(SETTINGS_ENDPOINTS, state.to_json())
        self.settings.setValue(SETTINGS_DEFAULT, state.default)
        self.settings.sync()
        self.changed.emit()


def preferences_for(widget: QWidget | None) -> Preferences:
    """The window's preferences (``MainWindow.preferences``), else ones over the default QSettings
    (a pane shown on its own, as in tests and screenshots)."""
    host = widget.window() if widget is not None else None
    prefs = getattr(host, "preferences", None)
    if isinstance(prefs, Preferences):
        return prefs
    return Preferences(QSettings(), widget)
