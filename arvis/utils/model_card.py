"""The model card of a shipped folder (its ``README.md``): one structure, rendered to Markdown one way.

Every card writer — the trainers' exports (``arvis.training``) and the card builders of ``eval/cards.py`` that work
from evaluation records — supplies only its facts as a :class:`ModelCard`; the headings, their order, the code
fences, the tables and the atomic write live here. It sits in ``arvis.utils`` because ``arvis.training`` and
``arvis.eval`` are independent layers that may not import each other, and a card needs nothing above the file
helpers.

The rendered order is fixed: title, summary (what it is), licence, how to load it (a Python snippet and a note),
architecture, data, training (commands, then how), evaluation, further sections, limits.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from arvis.utils.files import atomic_path

__all__ = ["ModelCard", "Section", "Training", "measured", "table", "write_card"]

#: How a figure whose record is missing is shown (cards are built from records only, never typed in).
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Section:
    """A ``## heading`` and its Markdown body (the body starts on the line after the heading)."""

    heading: str
    body: str


@dataclass(frozen=True)
class Training:
    """How a model was made: the commands (one fenced block, in the order they ran), then the recipe in words.

    ``text`` follows the closing fence on the next line; start it with a newline for a blank line in between."""

    commands: Sequence[str]
    text: str = ""
    heading: str = "Training"

    def section(self) -> Section:
        return Section(self.heading, "```\n" + "\n".join(self.commands) + "\n```\n" + self.text)


@dataclass(frozen=True)
class ModelCard:
    """The facts of one card, in the order they are rendered."""

    title: str
    summary: str
    licence: str = ""
    usage: str = ""
    usage_note: str = ""
    architecture: Section | None = None
    data: Section | None = None
    training: Training | None = None
    evaluation: Section | None = None
    more: tuple[Section, ...] = field(default_factory=tuple)
    limits: str = ""

    def sections(self) -> list[Section]:
        """The ``##`` sections in their fixed order (the missing ones left out)."""
        found = [self.architecture, self.data, self.training.section() if self.training else None, self.evaluation,
                 *self.more, Section("Limits", self.limits) if self.limits else None]
        return [s for s in found if s is not None]

    def render(self) -> str:
        """The card as Markdown: blocks separated by one blank line, one newline at the end."""
        blocks = [f"# {self.title}", self.summary, self.licence]
        if self.usage:
            blocks.append(f"```python\n{self.usage}\n```")
        blocks.append(self.usage_note)
        blocks += [f"## {s.heading}\n{s.body}" for s in self.sections()]
        return "\n\n".join(b.strip("\n") for b in blocks if b.strip()) + "\n"


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table (no trailing newline); cells are written as given."""
    def line(cells: Sequence[object]) -> str:
        return "|" + "|".join(f" {cell} " if str(cell) else " " for cell in cells) + "|"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(row) for row in rows)])


def measured(value: float | None, digits: int = 2) -> str:
    """A figure from a record, or "not measured" when its record is missing."""
    return NOT_MEASURED if value is None else f"{value:.{digits}f}"


def write_card(folder: str | os.PathLike, card: ModelCard) -> Path:
    """Write ``card`` to ``folder/README.md`` atomically (a reader never sees half a card); returns the path."""
    path = Path(folder) / "README.md"
    with atomic_path(path) as tmp:
        tmp.write_bytes(card.render().encode("utf-8"))
    return path
