"""Models by name: ``"openai/gpt-4o-mini"``, ``"ollama/llama3.1"``, ``"groq/llama-3.1-8b-instant"``...

Mastra's model router takes a ``provider/model`` string; so do ``Agent(model=...)``, the memory's
observer, reflector and title models, the Studio's Preferences and ``memory-studio serve --model``.
Every provider here speaks OpenAI's chat-completions protocol, so a name resolves to an
``OpenAICompatibleModel`` at the provider's endpoint:

- the key comes from the provider's usual variable (``OPENAI_API_KEY``, ``GROQ_API_KEY``...), or the
  OS keyring under that name; local servers (Ollama, LM Studio, vLLM, llama.cpp) need none;
- the endpoint is ``<PROVIDER>_BASE_URL`` when set (``OLLAMA_BASE_URL=http://gpu-box:11434/v1``),
  else the provider's default;
- the server's context size is ``<PROVIDER>_CONTEXT_WINDOW`` when set (``LLAMACPP_CONTEXT_WINDOW=4096``), unless
  ``resolve_model`` is given ``context_window`` (``serve --context-window``): the agent then fits every prompt
  into it (``core.context_window``).

An unknown provider, or a provider whose key is missing, is a ``ConfigurationError`` when the model
is built, naming the variable to set (not a failure at the first turn).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigurationError


@dataclass(frozen=True)
class Provider:
    """One OpenAI-compatible endpoint family. ``key_env``: the variable holding its key (None: no
    key is used); ``key_required``: whether a request without one can work."""

    name: str
    base_url: str
    key_env: str | None
    key_required: bool = True
    label: str = ""

    @property
    def _env_prefix(self) -> str:
        """The provider's name as its variables begin (``LMSTUDIO`` for "lmstudio": every character not a letter or digit an underscore)."""
        return re.sub(r"[^A-Z0-9]", "_", self.name.upper())

    @property
    def base_url_env(self) -> str:
        return self._env_prefix + "_BASE_URL"

    def endpoint(self, environ: Mapping[str, str] | None = None) -> str:
        env = os.environ if environ is None else environ
        return (env.get(self.base_url_env) or "").strip() or self.base_url

    @property
    def context_window_env(self) -> str:
        """The variable giving this provider's models, built from a name, their ``context_window``."""
        return self._env_prefix + "_CONTEXT_WINDOW"

    def context_window(self, environ: Mapping[str, str] | None = None) -> int | None:
        """``<PROVIDER>_CONTEXT_WINDOW`` as a number of tokens (None: not set); ``ConfigurationError`` when it is
        not a positive whole number."""
        env = os.environ if environ is None else environ
        text = (env.get(self.context_window_env) or "").strip()
        if not text:
            return None
        if not text.isascii() or not text.isdigit() or int(text) < 1:
            raise ConfigurationError(
                f"{self.context_window_env} must be the model server's context size as a positive whole number of "
                f"tokens (llama.cpp --ctx-size, vLLM --max-model-len, Ollama num_ctx; e.g. 4096), got "
                f"{env.get(self.context_window_env)!r}. Fix or unset it; nothing was sent to the model.")
        return int(text)

    def model_keywords(self, environ: Mapping[str, str] | None = None, *,
                       context_window: int | None = None) -> dict[str, Any]:
        """What a model of this provider takes from the provider's variables besides its endpoint and key, as
        ``OpenAICompatibleModel`` keywords: ``context_window`` (the one given, else ``<PROVIDER>_CONTEXT_WINDOW``
        when set) and ``context_window_env`` (the variable its context-overflow advice names). The one reading of
        them, for ``resolve_model`` and for the Studio's Preferences models filled in from a ``provider/model``
        name; ``ConfigurationError`` when the variable is not a positive whole number."""
        keywords: dict[str, Any] = {"context_window_env": self.context_window_env}
        window = context_window if context_window is not None else self.context_window(environ)
        if window is not None:
            keywords["context_window"] = window
        return keywords


PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    Provider("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", label="OpenAI"),
    Provider("anthropic", "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY", label="Anthropic (OpenAI-compatible API)"),
    Provider("google", "https://generativelanguage.googleapis.com/v1beta/openai", "GOOGLE_GENERATIVE_AI_API_KEY",
             label="Google Gemini (OpenAI-compatible API)"),
    Provider("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", label="OpenRouter"),
    Provider("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY", label="Groq"),
    Provider("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", label="DeepSeek"),
    Provider("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY", label="Mistral"),
    Provider("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY", label="Together AI"),
    Provider("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY", label="Fireworks"),
    Provider("xai", "https://api.x.ai/v1", "XAI_API_KEY", label="xAI"),
    Provider("cerebras", "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY", label="Cerebras"),
    Provider("perplexity", "https://api.perplexity.ai", "PERPLEXITY_API_KEY", label="Perplexity"),
    Provider("ollama", "http://localhost:11434/v1", "OLLAMA_API_KEY", key_required=False, label="Ollama"),
    Provider("lmstudio", "http://localhost:1234/v1", "LMSTUDIO_API_KEY", key_required=False, label="LM Studio"),
    Provider("vllm", "http://localhost:8000/v1", "VLLM_API_KEY", key_required=False, label="vLLM"),
    Provider("llamacpp", "http://localhost:8080/v1", "LLAMACPP_API_KEY", key_required=False,
             label="llama.cpp server"),
)}


@dataclass(frozen=True)
class ModelName:
    """A ``provider/model`` string taken apart (the model part may hold more slashes:
    ``openrouter/anthropic/claude-3.5-sonnet``)."""

    provider: Provider
    model: str

    @property
    def text(self) -> str:
        return f"{self.provider.name}/{self.model}"


# The provider part of the names our own model objects give themselves when no provider entry can
# rebuild them: ``OpenAICompatibleModel`` at an endpoint of its own ("openai-compatible/<model>") and
# ``ScriptedModel`` ("scripted/<name>"). Registered options keep such a name as a label of the model that
# ran; it cannot be resolved again (the endpoint or the script is not in it).
LABEL_ONLY_PROVIDERS = frozenset({"openai-compatible", "scripted"})


def is_label_only(value: Any) -> bool:
    """Whether ``value`` is a ``provider/model`` name that only labels a model object (see above)."""
    return is_model_name(value) and value.strip().partition("/")[0] in LABEL_ONLY_PROVIDERS


def is_model_name(value: Any) -> bool:
    """Whether ``value`` looks like a ``provider/model`` string (not whether the provider is known)."""
    return isinstance(value, str) and "/" in value.strip("/ ")


def parse_model_name(text: str) -> ModelName:
    """``provider/model`` → its provider entry and model; ``ConfigurationError`` naming the known
    providers (and the nearest one) otherwise."""
    if not isinstance(text, str) or "/" not in text.strip():
        raise ConfigurationError(
            f"A model name is written provider/model (for example 'openai/gpt-4o-mini' or 'ollama/llama3.1'), "
            f"got {text!r}.")
    provider_name, _, model = text.strip().partition("/")
    provider = PROVIDERS.get(provider_name.lower())
    if provider is None:
        near = difflib.get_close_matches(provider_name.lower(), PROVIDERS, n=1)
        hint = f" Did you mean '{near[0]}/{model}'?" if near else ""
        raise ConfigurationError(
            f"Unknown model provider {provider_name!r} in {text!r}.{hint} Known providers: "
            f"{', '.join(sorted(PROVIDERS))}. For another OpenAI-compatible server, pass "
            "OpenAICompatibleModel(<model>, base_url=<its /v1 URL>) instead of a name.")
    if not model.strip():
        raise ConfigurationError(f"{text!r} names no model after '{provider.name}/'.")
    return ModelName(provider, model.strip())


def resolve_model(spec: Any, *, environ: Mapping[str, str] | None = None, what: str = "model",
                  **kwargs: Any) -> Any:
    """A chat model from ``spec``: a ``ChatModel`` is returned as it is; a ``provider/model`` string
    becomes an ``OpenAICompatibleModel`` at the provider's endpoint with its key.

    ``what`` names the setting in errors (``"observer model"``). ``kwargs`` go to
    ``OpenAICompatibleModel`` (``timeout``, ``context_window``...). Raises ``ConfigurationError``
    for an unknown provider or a missing key."""
    if not isinstance(spec, str):
        if callable(getattr(spec, "generate", None)):
            return spec
        raise ConfigurationError(
            f"The {what} must be a chat model or a provider/model name such as 'openai/gpt-4o-mini', "
            f"got {type(spec).__name__}.")
    from core.llm.openai_compatible import OpenAICompatibleModel

    name = parse_model_name(spec)
    provider = name.provider
    # (an explicit context_window wins over the variable)
    kwargs.update(provider.model_keywords(environ, context_window=kwargs.pop("context_window", None)))
    model = OpenAICompatibleModel(
        name.model, base_url=provider.endpoint(environ), api_key_env=provider.key_env, provider=provider.name,
        environ=environ, **kwargs)
    if provider.key_required and model.api_key_source == "none":
        model.close()
        raise ConfigurationError(
            f"The {what} {spec!r} needs an API key for {provider.label or provider.name}: set the environment "
            f"variable {provider.key_env} (or store it in the OS keyring under that name), or choose a local "
            "provider such as 'ollama/<model>'.")
    return model


def model_label(spec: Any) -> str | None:
    """What a model setting is called in records and the Studio: the name as given, or a model's id."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return spec
    return str(getattr(spec, "model_id", None) or type(spec).__name__)


__all__ = ["LABEL_ONLY_PROVIDERS", "PROVIDERS", "ModelName", "Provider", "is_label_only", "is_model_name",
           "model_label", "parse_model_name", "resolve_model"]
