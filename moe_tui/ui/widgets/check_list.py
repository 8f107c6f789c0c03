"""CheckList: a SelectionList whose boxes say their state in a glyph, not only in a colour.

Textual draws every box as the same "X" (selected and unselected differ in colour alone), which a
colour-blind user or a monochrome terminal cannot read. A selected box here shows "✓", an
unselected one a blank.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import SelectionList
from textual.widgets.option_list import OptionDoesNotExist

SELECTED, UNSELECTED = "✓", " "


class CheckList(SelectionList[str]):
    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        try:
            selection = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return strip  # no option on this line: no box was drawn
        segments = list(strip)
        if len(segments) < 2:
            return strip
        box = segments[1]  # [left edge, box, right edge, " ", prompt...] (SelectionList.render_line)
        glyph = SELECTED if selection.value in self._selected else UNSELECTED
        segments[1] = Segment(glyph, box.style, box.control)
        return Strip(segments, strip.cell_length)
