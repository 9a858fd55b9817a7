"""Text no installed font can draw (Chinese, Japanese, Korean on a bare Linux): the window says so once, with
the package to install, as soon as it shows such text. The machine's own fonts are not what is tested: the
font lookup is given (``has_font``), or replaced for the window tests, so they pass on any machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import Memory, Message, open_store
from studio import fonts
from studio.selection import Selection

from .conftest import at, seed_small


def test_scripts_without_a_font_are_named_in_order() -> None:
    none = lambda _s: False  # noqa: E731
    assert fonts.undrawable(["Weekly groceries", "plain ASCII"], none) == []
    assert fonts.undrawable(["下周去上海出差"], none) == ["Chinese"]
    assert fonts.undrawable(["안녕하세요", "ひらがな", "上海"], none) == ["Chinese", "Japanese", "Korean"]
    assert fonts.undrawable(["上海", "안녕"], lambda _s: True) == []  # every script has a font


def test_a_japanese_font_draws_chinese_characters_too() -> None:
    japanese_only = lambda system: system == fonts.QFontDatabase.WritingSystem.Japanese  # noqa: E731
    assert fonts.undrawable(["上海出差", "ひらがな"], japanese_only) == []
    assert fonts.undrawable(["上海出差", "안녕"], japanese_only) == ["Korean"]


def test_the_notice_names_the_scripts_and_the_packages() -> None:
    text = fonts.notice(["Chinese", "Korean"])
    assert "Chinese and Korean text" in text and "fonts-noto-cjk" in text and "google-noto-sans-cjk-fonts" in text
    assert "Chinese text" in fonts.notice(["Chinese"])


def test_the_self_checks_note_names_what_is_missing() -> None:
    assert fonts.machine_note(lambda _s: True) == ""
    korean_only = lambda system: system == fonts.QFontDatabase.WritingSystem.Korean  # noqa: E731
    note = fonts.machine_note(korean_only)
    assert note.startswith("no font here draws Chinese and Japanese text") and "fonts-noto-cjk" in note


def _english_db(path: Path, *, chinese_message: bool) -> Path:
    store = open_store(path)
    memory = Memory(store)
    memory.create_thread(thread_id="t-trip", resource_id="li", title="Business trip")
    memory.save_messages([
        Message.user("Book me a hotel for next week", thread_id="t-trip", resource_id="li", created_at=at(0)),
        Message.assistant("好的，我来查一下浦东的酒店。" if chinese_message else "Looking at hotels in Pudong.",
                          thread_id="t-trip", resource_id="li", created_at=at(1)),
    ])
    store.close()
    return path


def _open(qtbot: Any, make_window: Any, path: Path) -> Any:
    window = make_window()
    window.open_database(str(path))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) >= 1, timeout=15_000)
    return window


def test_a_chinese_thread_title_on_a_machine_without_cjk_fonts_is_explained(
        qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fonts, "installed_font_for", lambda _system: False)
    path = tmp_path / "small.db"
    seed_small(path)  # one thread is titled 上海出差
    window = _open(qtbot, make_window, path)
    qtbot.waitUntil(lambda: window.font_banner.isVisible(), timeout=15_000)
    assert "draw Chinese text" in window.font_banner.text() and "fonts-noto-cjk" in window.font_banner.text()
    # The banner shows plain text (it quotes paths and errors too): markup in the notice would show as tags.
    assert "<" not in window.font_banner.text() and ">" not in window.font_banner.text()
    window.font_banner.buttons[0].click()  # Dismiss
    assert not window.font_banner.isVisible()
    window.resources.refresh()  # said once: another load does not bring it back
    qtbot.wait(300)
    assert not window.font_banner.isVisible()


def test_chinese_message_text_is_explained_when_its_thread_is_shown(
        qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fonts, "installed_font_for", lambda _system: False)
    # The thread's title and ids are English (the tree alone says nothing: the last test); its reply is not.
    window = _open(qtbot, make_window, _english_db(tmp_path / "trip.db", chinese_message=True))
    window.resources.set_selection(Selection("li", "t-trip"))
    pane = window.messages_pane
    qtbot.waitUntil(lambda: pane.model.rowCount() == 2, timeout=15_000)
    qtbot.waitUntil(lambda: window.font_banner.isVisible(), timeout=15_000)
    assert "draw Chinese text" in window.font_banner.text()


def test_no_notice_when_a_font_draws_it_or_there_is_nothing_to_draw(
        qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fonts, "installed_font_for", lambda _system: True)
    path = tmp_path / "small.db"
    seed_small(path)
    window = _open(qtbot, make_window, path)
    window.resources.set_selection(Selection("li", "t-trip"))
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() == 2, timeout=15_000)
    qtbot.wait(300)
    assert not window.font_banner.isVisible()

    monkeypatch.setattr(fonts, "installed_font_for", lambda _system: False)
    english = _open(qtbot, make_window, _english_db(tmp_path / "en.db", chinese_message=False))
    english.resources.set_selection(Selection("li", "t-trip"))
    qtbot.waitUntil(lambda: english.messages_pane.model.rowCount() == 2, timeout=15_000)
    qtbot.wait(300)
    assert not english.font_banner.isVisible()
