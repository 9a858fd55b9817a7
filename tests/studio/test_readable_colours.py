"""Colours chosen once for both themes, read on either: the Working Memory diff's inserted and deleted
lines (studio.widgets.diff_view) and the priority marks of a prose viewer (studio.widgets.code_editor),
each at WCAG AA (4.5:1) on what it is drawn on, in the theme shown and after a switch of theme."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette

from studio.theme import AA_BODY_TEXT, apply_theme, contrast

from .conftest import theme_restored

OTHER = {"dark": "light", "light": "dark"}


def _diff_lines_read(view: Any) -> dict[str, float]:
    """Each changed line's kind -> the least contrast of its text on its tinted background."""
    from studio.widgets.diff_view import _over

    base = view.palette().color(QPalette.ColorRole.Base)
    least: dict[str, float] = {}
    block = view.document().firstBlock()
    for line in view.lines:
        if line.kind != "equal":
            background = _over(block.blockFormat().background().color(), base)
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                if fragment.text().startswith(("+", "−")):
                    ratio = contrast(fragment.charFormat().foreground().color(), background)
                    least[line.kind] = min(least.get(line.kind, 99.0), ratio)
                it += 1
        block = block.next()
    return least


@pytest.mark.parametrize("first", ["light", "dark"])
def test_the_diffs_inserted_and_deleted_lines_read_on_either_theme(qapp: Any, qtbot: Any, first: str) -> None:
    """The Working Memory diff wrote its inserted lines in one green and its deleted ones in one red for
    both themes: 2.4:1 and 3.0:1 on their tinted lines in the light theme, the red 3.8:1 in the dark one
    (measured 2026-12-06). Each is shaded for the theme shown, and a switch of theme shades them again."""
    from studio.logic.diffing import line_diff
    from studio.widgets.diff_view import DiffView

    with theme_restored(qapp):
        apply_theme(qapp, first)
        view = DiffView()
        qtbot.addWidget(view)
        view.set_diff(line_diff("# Ada\n- likes: tea\n- city: Lyon\n", "# Ada\n- likes: coffee\n- city: Lyon\n"))
        for theme in (first, OTHER[first]):
            if theme != first:
                apply_theme(qapp, theme)
                qapp.processEvents()
            least = _diff_lines_read(view)
            assert set(least) == {"insert", "delete"}, least
            assert min(least.values()) >= AA_BODY_TEXT, (theme, least)


@pytest.mark.parametrize("first", ["light", "dark"])
def test_a_prose_viewers_priority_marks_read_on_either_theme(qapp: Any, qtbot: Any, first: str) -> None:
    """A prose viewer (the Prompt Inspector's and Replay's fragment text) draws observational memory's
    🔴 🟡 🟢 ✅ as coloured marks, one colour for both themes: the amber read 2.2:1, the green 2.5:1 and
    the red 3.7:1 on the light theme's white. Each is shaded for the theme shown, again on a switch."""
    from studio.widgets.code_editor import CodeEditor

    def marks() -> dict[str, float]:
        base = editor.palette().color(QPalette.ColorRole.Base)
        found: dict[str, float] = {}
        block = editor.document().firstBlock()
        while block.isValid():
            for piece in block.layout().formats():
                text = block.text()[piece.start:piece.start + piece.length]
                if text in ("●", "✔"):
                    found[block.text()[piece.start + 2:]] = contrast(piece.format.foreground().color(), base)
            block = block.next()
        return found

    with theme_restored(qapp):
        apply_theme(qapp, first)
        editor = CodeEditor("prose", read_only=True)
        qtbot.addWidget(editor)
        editor.load("🔴 Ada is allergic to peanuts\n🟡 Ada moves in May\n🟢 Ada likes tea\n✅ Ada booked Lyon")
        for theme in (first, OTHER[first]):
            if theme != first:
                apply_theme(qapp, theme)
                qapp.processEvents()
            ratios = marks()
            assert len(ratios) == 4, ratios
            assert min(ratios.values()) >= AA_BODY_TEXT, (theme, ratios)
        assert editor.text().startswith("🔴 Ada")  # (copying and reading give the emoji back)


def test_the_diff_keeps_its_place_on_a_switch_of_theme(qapp: Any, qtbot: Any) -> None:
    """Shading again on a switch of theme rewrites the view: the line a user scrolled to stays in sight."""
    from studio.logic.diffing import line_diff
    from studio.widgets.diff_view import DiffView

    with theme_restored(qapp):
        apply_theme(qapp, "dark")
        view = DiffView()
        qtbot.addWidget(view)
        view.resize(300, 120)
        view.show()
        view.set_diff(line_diff("\n".join(f"line {i}" for i in range(200)),
                                "\n".join(f"line {i}" if i % 7 else f"changed {i}" for i in range(200))))
        view.verticalScrollBar().setValue(150)
        apply_theme(qapp, "light")
        qapp.processEvents()
        assert view.verticalScrollBar().value() == 150
        assert QColor(view.palette().color(QPalette.ColorRole.Base)).lightness() > 128


def test_readable_html_shades_text_colours_and_leaves_backgrounds(qapp: Any, qtbot: Any) -> None:
    """``readable_html`` shades ``color:`` only: a ``background-color:`` shaded away from the background
    it sits on would be a darker patch under the text, not a readable text."""
    from PySide6.QtWidgets import QLabel

    from studio.theme import readable_html

    with theme_restored(qapp):
        apply_theme(qapp, "light")
        label = QLabel()
        qtbot.addWidget(label)
        html = readable_html("<span style='background-color:#fff8c5; color:#d9a441'>x</span>", label)
        assert "background-color:#fff8c5" in html and "color:#d9a441" not in html


def _centre(image: Any) -> QColor:
    """The colour at the middle of a drawn mark (a disc's fill, the check mark's square beside its tick)."""
    return image.pixelColor(image.width() // 2, image.height() // 4)


@pytest.mark.parametrize("first", ["light", "dark"])
def test_the_observation_logs_drawn_priority_marks_read_on_either_theme(qapp: Any, qtbot: Any, first: str) -> None:
    """The Observations pane draws the priorities as discs (and a ticked square for done) in its log and in
    its editable list, one colour for both themes: on the light theme's white the amber disc read 2.1:1 and
    the green 2.6:1, below the 3:1 a mark needs when its colour is all that tells high, medium and low apart
    (WCAG 1.4.11). Each is drawn for the theme shown, and drawn again on a switch."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QTextDocument

    from studio.logic.observations_layout import MARK_URL
    from studio.theme import AA_GRAPHICS
    from studio.widgets.observation_editor import ObservationLinesModel
    from studio.widgets.priority_marks import ObservationLogView

    names = ("high", "medium", "low", "done")
    lines = ["* 🔴 Ada is allergic to peanuts", "* 🟡 Ada moves in May", "* 🟢 Ada likes tea", "* ✅ Ada booked Lyon"]
    with theme_restored(qapp):
        apply_theme(qapp, first)
        log = ObservationLogView()
        qtbot.addWidget(log)
        log.show_log([f'<p><img src="{MARK_URL}{n}" width="11" height="11"> {n}</p>' for n in names])
        log.show()
        qtbot.waitUntil(lambda: not log.filling)
        model = ObservationLinesModel()
        model.set_lines(lines)
        for theme in (first, OTHER[first]):
            if theme != first:
                apply_theme(qapp, theme)
                qapp.processEvents()
            pal = log.palette()
            rows = (pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.AlternateBase))
            in_log = {n: log.document().resource(QTextDocument.ResourceType.ImageResource.value,
                                                 QUrl(MARK_URL + n)) for n in names}
            assert all(not image.isNull() for image in in_log.values()), theme
            in_list = [model.data(model.index(r, 0), Qt.ItemDataRole.DecorationRole).pixmap(22).toImage()
                       for r in range(len(lines))]
            for where, images in (("log", list(in_log.values())), ("list", in_list)):
                ratios = [min(contrast(_centre(image), bg) for bg in rows) for image in images]
                assert min(ratios) >= AA_GRAPHICS, (theme, where, ratios)
