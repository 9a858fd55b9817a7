"""What a tool call's arguments are taken as, and the words of a refusal when they do not fit.

``MemoryMCPServer`` (``server``) calls these; nothing here touches a database or a transport:

- ``as_sent``: a tool whose arguments are validated as the client sent them. The SDK's ``pre_parse_json`` read a
  string argument that is whole JSON as that value; here a string is the text sent (``_AsSent``).
- ``arguments_unfit``: what the SDK would let through or take otherwise than sent (an argument name the tool does
  not have, true or false for an integer, a string for an integer that is no whole number written out).
- ``arguments_refused``: the one refusal for every tool whose arguments do not fit its input schema: which argument,
  what kind of value came (its size, never the value) and what the tool takes.
- ``arguments_not_an_object``: the refusal of a ``tools/call`` whose ``arguments`` is not a JSON object.
- ``over_limit``: a size limit's refusal as an MCP client reads it (what it can send, what the operator can change).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

from core.ids import shown
from core.json_kind import json_kind
from core.message_size import DEFAULT_MAX_MESSAGE_BYTES, MessageTooLargeError
from core.working_memory import DEFAULT_MAX_WORKING_MEMORY_BYTES, WorkingMemoryTooLargeError


class _AsSent(FuncMetadata):
    """A tool's argument model that validates the arguments as the client sent them.

    The SDK's ``pre_parse_json`` reads a string argument that is whole JSON as that value for any argument not
    typed exactly ``str`` (for clients that send objects as strings): a thread titled "null" was stored with no
    title, ``thread: "null"`` read every thread, '["a"]' was refused as an array, and ``update_working_memory``'s
    text '{"a": 1}' became an object. Here a string stays the text it is: ``update_working_memory`` reads a JSON
    text itself where the working memory is JSON (``parse_patch``), and a string for an integer is refused by
    ``arguments_unfit`` unless it is a whole number written out, which pydantic reads as the number."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        return dict(data)


def as_sent(tool: Tool) -> Tool:
    """``tool`` with its argument model's pre-parsing left out (``_AsSent``), everything else as the SDK made it."""
    made = tool.fn_metadata
    kept = {name: getattr(made, name) for name in type(made).model_fields}
    return tool.model_copy(update={"fn_metadata": _AsSent(**kept)})


def over_limit(exc: MessageTooLargeError | WorkingMemoryTooLargeError) -> str:
    """A size limit's refusal as an MCP client reads it: what it can send instead, and apart from that what the
    server's operator can change (the engine's own message names ``MemoryOptions``, which a client cannot set)."""
    if isinstance(exc, MessageTooLargeError):
        what, setting, default = "message", "max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES
        told = (f"The message is {exc.size:,} bytes as stored (UTF-8 JSON, which holds its text twice: as the "
                f"content and as its text part), over this server's limit of {exc.limit:,} bytes per message. Nothing "
                f"was written. Remember less: the part worth keeping (a summary, the facts), or the text split over "
                f"several remember calls, each under about {exc.limit // 2:,} bytes of text.")
    else:
        what, setting, default = "working memory", "max_working_memory_bytes", DEFAULT_MAX_WORKING_MEMORY_BYTES
        told = (f"The working memory would be {exc.size:,} bytes, over this server's limit of {exc.limit:,} bytes. "
                "Nothing was written. Make it shorter: what every conversation needs about the user (for JSON "
                "working memory, send null for the fields to drop); store the rest as messages with remember.")
    return (f"{told} For the server's operator: `memory-studio mcp` has no flag or setting for this limit. It comes "
            f"from the memory options of the agent it serves (--agent NAME, or the database's only registered agent): "
            f"{setting}, as that agent registered it, or the engine's default of {default:,} bytes when it serves "
            f"no agent's options; raise it there for a larger {what}.")


#: What a JSON Schema type of a tool's argument is called in a refusal.
_SCHEMA_KINDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
                 "object": "an object", "array": "an array", "null": "null"}
#: The validation errors that say a value is of the wrong kind (any other is named by its own words).
_KIND_ERRORS = frozenset({"string_type", "int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
                          "bool_type", "bool_parsing", "dict_type", "list_type", "none_required", "model_type"})


#: A string the SDK takes for an integer argument: a whole number written out (clients that send every argument as a
#: string write "5"); pydantic would also read " 5 ", "+5" and "5_0" (as 50).
_INTEGER_TEXT = re.compile(r"-?[0-9]+(\.0*)?")
#: How many unknown argument names a refusal repeats (each cut to ``_NAME_SHOWN`` characters).
_NAMES_SHOWN, _NAME_SHOWN = 3, 40


def arguments_unfit(schema: dict[str, Any], arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """What the SDK would let through, or take otherwise than sent, in ``arguments`` of a tool with input ``schema``,
    as validation errors for ``arguments_refused``: an argument the schema does not have (``unknown``: the SDK drops
    it and the default applies), a required one missing (named beside the others), true or false where the schema
    takes no boolean (``kind``: taken as 1 or 0), and a string for an integer that is not a whole number written out
    (``kind``). A number with no fraction (5.0) is an integer (JSON Schema's rule), and "5" is taken as 5, as the SDK
    does; the SDK's validation checks the rest."""
    properties = schema.get("properties") or {}
    errors: list[dict[str, Any]] = [{"type": "unknown", "loc": (name,)} for name in arguments if name not in properties]
    errors += [{"type": "missing", "loc": (name,)} for name in schema.get("required") or () if name not in arguments]
    for name, value in arguments.items():
        kinds = _kinds(properties.get(name) or {})
        if name not in properties or not kinds:
            continue
        if isinstance(value, bool) and "boolean" not in kinds:
            errors.append({"type": "kind", "loc": (name,)})
        elif (isinstance(value, str) and "string" not in kinds and "integer" in kinds
              and not _INTEGER_TEXT.fullmatch(value)):
            errors.append({"type": "kind", "loc": (name,)})
    return errors


def _kinds(prop: dict[str, Any]) -> set[str]:
    """The JSON Schema types an argument's schema takes (empty: any)."""
    kinds: set[str] = set()
    for option in prop.get("anyOf") or [prop]:
        kind = option.get("type") if isinstance(option, dict) else None
        if kind is None:  # ($ref, or no type: anything)
            return set()
        kinds.update(kind if isinstance(kind, list) else [kind])
    return {str(kind) for kind in kinds}


def arguments_refused(tool: str, schema: dict[str, Any], arguments: dict[str, Any], errors: list[Any]) -> str:
    """Why a call to ``tool`` was refused before it ran, from the validation ``errors`` of ``arguments`` against the
    tool's input ``schema`` (the SDK's, or ``arguments_unfit``'s): each argument at fault by name, what kind of value
    it got (its length or size, never the value itself: a client's argument may be megabytes, or hold control
    characters) and what it takes; names the tool does not have, with the names it has."""
    properties = schema.get("properties") or {}
    found: dict[str, list[Any]] = {}
    unknown: list[str] = []
    for error in errors:
        loc = error.get("loc") or ()
        if error.get("type") == "unknown" and loc and isinstance(loc[0], str) and loc[0] not in properties:
            unknown.append(loc[0])
            continue
        name = loc[0] if loc and isinstance(loc[0], str) and loc[0] in properties else ""
        found.setdefault(name, []).append(error)
    order = list(properties)
    problems = [_unknown(tool, unknown, schema)] if unknown else []
    for name in sorted(found, key=lambda n: order.index(n) if n in order else len(order)):
        kinds = {e.get("type") for e in found[name]}
        said = "; ".join(_one_line(str(e.get("msg", ""))).strip()[:200] for e in found[name])
        if not name:  # (not one of the schema's arguments: the SDK's own words, which hold no value)
            problems.append(f"the arguments were refused ({said})")
        elif "missing" in kinds:
            problems.append(f"'{name}' ({_takes(properties[name])}) is required and was not given")
        elif kinds <= _KIND_ERRORS | {"kind"}:
            problems.append(f"'{name}' must be {_takes(properties[name])}, not {json_kind(arguments.get(name))}")
        else:
            problems.append(f"'{name}' got {json_kind(arguments.get(name))}, which was refused: {said}")
    return "; ".join(problems) + ". " + _not_run(tool)


def arguments_not_an_object(tool: Any, arguments: Any, schemas: dict[str, dict[str, Any]]) -> str:
    """Why a ``tools/call`` of ``tool`` whose ``arguments`` is not a JSON object (an array, a string, a number) was
    refused, in ``arguments_refused``'s words: what came (its kind and size, never its text) and the argument names
    the tool takes (``schemas``: each tool's input schema by name), or the tools there are for a name that is none."""
    came = json_kind(arguments)
    if isinstance(tool, str) and tool in schemas:
        return (f"The arguments of {tool} must be a JSON object of argument names and values, not {came}: {tool} takes "
                f"{_argument_names(schemas[tool])}. " + _not_run(tool))
    named = (f"{shown(tool, _NAME_SHOWN)} is not a tool of this server" if isinstance(tool, str)
             else "'name' must be the tool's name")
    return (f"The arguments of a tools/call must be a JSON object of argument names and values, not {came}, and "
            f"{named}; its tools are {', '.join(schemas)}. " + _not_run("the tool"))


def _not_run(tool: str) -> str:
    return (f"Nothing was run or saved: call {tool} again with each argument as its input schema (tools/list) "
            "describes it.")


def _unknown(tool: str, names: list[str], schema: dict[str, Any]) -> str:
    """Argument names ``tool`` does not have (the first few, cut, never a whole name of any length) and the names it
    has, the required ones marked, with the one meant when a name is a near miss of one."""
    properties = schema.get("properties") or {}
    said = ", ".join(shown(name, _NAME_SHOWN) for name in names[:_NAMES_SHOWN])
    said += f" and {len(names) - _NAMES_SHOWN:,} more" if len(names) > _NAMES_SHOWN else ""
    near = [m for name in names[:_NAMES_SHOWN] for m in difflib.get_close_matches(name, properties, n=1)
            if m not in names]
    return (f"{said} {'is not an argument' if len(names) == 1 else 'are not arguments'} of {tool}"
            + (f" (did you mean {', '.join(repr(m) for m in dict.fromkeys(near))}?)" if near else "")
            + f", which takes {_argument_names(schema)}")


def _argument_names(schema: dict[str, Any]) -> str:
    """A tool's argument names, in its schema's order, the required ones marked."""
    required = set(schema.get("required") or ())
    return ", ".join(f"{name} (required)" if name in required else name
                     for name in schema.get("properties") or {}) or "no arguments"


def _takes(prop: dict[str, Any]) -> str:
    """What a tool argument's schema takes, in words ("a string", "an integer (or be left out)")."""
    options = [option.get("type") for option in prop.get("anyOf") or [prop]]
    kinds = [_SCHEMA_KINDS.get(str(kind), "a JSON value") for kind in options if kind != "null" or len(options) == 1]
    return " or ".join(dict.fromkeys(kinds)) + (" (or be left out)" if "default" in prop else "")


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)
