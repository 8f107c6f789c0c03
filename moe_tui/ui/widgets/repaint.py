"""Repaint only what changed: a live feed repeats itself far more often than it changes.

Textual repaints a `Static` on every `update` and a widget on every border title or subtitle set,
even when the new value equals the one shown. The 1 Hz GPU samples, /metrics scrapes, controller
status and the 1 s clock tick call the panels' `show` with mostly the same picture, so every
widget here is written through `put` / `titles`, which compare with what the widget shows first.
"""

from __future__ import annotations

import weakref
from typing import Any

from textual.widget import Widget
from textual.widgets import Static

_shown: weakref.WeakKeyDictionary[Static, Any] = weakref.WeakKeyDictionary()


def put(widget: Static, content: Any, *, layout: bool = False) -> bool:
    """`widget.update(content)` unless it already shows equal content; True when repainted.
    (Rich Text compares by text and spans: an equal Text looks the same.)"""
    if widget in _shown and _shown[widget] == content:
        return False
    _shown[widget] = content
    widget.update(content, layout=layout)
    return True


def titles(widget: Widget, title: Any = None, subtitle: Any = None) -> None:
    """Set the border title and/or subtitle (None: leave it) only when they differ."""
    if title is not None and widget.border_title != title:
        widget.border_title = title
    if subtitle is not None and widget.border_subtitle != subtitle:
        widget.border_subtitle = subtitle
