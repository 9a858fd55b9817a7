"""The typed seam between the main window and its panes.

A pane kind is declared by a ``PaneSpec``: its key, the tab's title, the shortcut that shows it,
and a factory. The factory builds the pane over a ``StudioSession`` and connects what the pane
emits (its Qt signals) to the ``PaneHost`` slots it needs, one typed ``connect`` per signal, so mypy
checks both ends; nothing is looked up by name. A built pane satisfies ``Pane``: the session it
shows, ``set_selection`` (what the user is looking at) and the commands it adds to the palette.

The main window keeps one ordered tuple of specs (``studio.main_window.PANES``) and builds a pane
the first time its tab is shown, or when a command needs it (``MainWindow.pane(spec)``). Factories
import their pane module when they run, so a pane nobody opens is never imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Protocol, TypeVar, runtime_checkable

from PySide6.QtWidgets import QWidget

from studio.selection import Selection

if TYPE_CHECKING:
    # Types only: the main window imports this module before its first paint, and the command
    # palette and the session (with the engine's names) are not needed for that.
    from studio.commands import Command
    from studio.logic.checks_layout import PinTarget
    from studio.session import StudioSession


@runtime_checkable
class Pane(Protocol):
    """A built pane (a ``QWidget``): the session it shows, told what is selected."""

    @property
    def session(self) -> StudioSession: ...

    def set_selection(self, selection: Selection) -> None:
        """What the user is looking at changed (a resource, a thread, a stored turn). Called once
        when the pane is built, if something was selected before it existed."""

    def palette_commands(self) -> list[Command]:
        """The pane's own commands, listed in the command palette while the pane exists."""


@runtime_checkable
class FilteringPane(Protocol):
    """A pane with a filter of its own (Traces: by trace or agent name). View > Filter (Ctrl+F) goes to it
    while the focus is inside the pane, and to the thread filter otherwise: one shortcut, so Qt never
    finds two for the key (an ambiguous shortcut runs neither)."""

    def focus_own_filter(self) -> None:
        """Put the keyboard focus in the pane's filter field."""


@runtime_checkable
class EditingPane(Protocol):
    """A pane that can hold edits the user typed and has not saved: the window asks before closing
    them away (closing the window, opening another database)."""

    def unsaved_edits(self) -> int:
        """How many edits would be lost now."""


class PaneHost(Protocol):
    """What a pane may ask of the window around it (``MainWindow`` implements it). A spec's factory
    connects the pane's signals to these slots; a slot that needs another pane builds it."""

    def show_message(self, message_id: str) -> None:
        """Open a stored message in the message view, in its own thread."""

    def show_prompt(self, selection: Selection) -> None:
        """The prompt inspector on a stored turn (``selection.message_id``: its user message)."""

    def select_thread(self, selection: Selection) -> None:
        """Select a thread (in the tree and in every pane)."""

    def select_in_tree(self, selection: Selection) -> None:
        """Select a thread in the tree; the tree's own signal then tells every pane."""

    def select_message(self, message_id: str | None) -> None:
        """The message view's current message changed."""

    def show_trace(self, trace_id: str) -> None:
        """Show a trace in the Traces tab; Back returns to where the user was."""

    def replay_turn(self, thread_id: str, message_id: str) -> None:
        """Show the turn holding ``message_id`` in Replay."""

    def run_command(self, command_id: str) -> None:
        """Run one of the window's commands (a pane's button for Migrate Database…, Edit…)."""

    def pin_fragment(self, target: PinTarget) -> None:
        """Pin…: write a memory check of a stored turn (the Checks pane asks for the details)."""

    def edit_message(self, message_id: str) -> None:
        """Edit Stored Message… on the message behind a fragment."""

    def run_checks_what_if(self, options: Mapping[str, Any]) -> None:
        """Show Checks and run every memory check under a what-if's option overrides."""

    def change_observation(self, record_id: str, thread_id: str | None, resource_id: str, old: str,
                           new: str | None) -> None:
        """Change (``new``) or delete (``new`` None) one observation line."""


P = TypeVar("P", bound=Pane, covariant=True)


@dataclass(frozen=True)
class PaneSpec(Generic[P]):
    """One tab of the main window: built by ``build(session, parent, host)`` when first needed."""

    name: str  # its key: object name ``<name>Pane``, command ``view.tab.<name>``
    title: str  # the tab's title
    shortcut: str  # the key that shows it (View > Show <title>)
    build: Callable[[StudioSession, QWidget, PaneHost], P]
