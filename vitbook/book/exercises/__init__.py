"""Exercises a student can check, in the manner of Kaggle Learn: each has ``check(answer)``,
which runs the answer against the reference and says in words what is wrong, ``hint()`` and
``solution()``.

A chapter imports its exercises (``from vitbook.book.exercises.ch03 import ex1``) and the
blank ``____`` that its starter cells leave for the student to fill in. ``check`` never
raises: it prints (and returns) a verdict. A hint and a solution display folded
(``<details>``), so a stored output gives nothing away on Colab or on the page until clicked.

Each exercise carries its reference answer and its typical mistakes, each with the words its
check must say; ``tests/book/test_exercises.py`` holds every check to them.
"""

from __future__ import annotations

import html
import importlib
import inspect
import pkgutil
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Answer",
    "Blank",
    "Exercise",
    "Mistake",
    "Verdict",
    "____",
    "chapter_exercises",
    "check_letter",
    "reference_source",
]

Answer = Callable[[], tuple]  # builds the arguments passed to check()


class Blank:
    """The ``____`` of a starter cell: arithmetic and calls on it give a blank again, so a
    starter cell runs, and :meth:`Exercise.check` says "fill in the blanks" instead of
    failing somewhere inside the student's code."""

    def __repr__(self) -> str:
        return "____"

    def _same(self, *args, **kwargs) -> Blank:
        return self

    __call__ = __getattr__ = __getitem__ = _same
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _same
    __neg__ = _same


____ = Blank()


class Mistake(Exception):
    """Raised by a checker with the words a student reads: what is wrong, not a bare
    ``AssertionError``."""


def _uses_blank(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is, holds or (a function) refers to the blank."""
    if isinstance(value, Blank):
        return True
    if depth > 2:
        return False
    if isinstance(value, (list, tuple, set)):
        return any(_uses_blank(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_uses_blank(v, depth + 1) for v in value.values())
    code = getattr(value, "__code__", None)
    if code is None and callable(value):  # a class: its methods
        code = getattr(getattr(value, "forward", None), "__code__", None)
    return code is not None and "____" in _names(code)


def _names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


@dataclass
class Verdict:
    """What a check found: ``correct``, and the words shown."""

    correct: bool
    message: str

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return f"{'Correct' if self.correct else 'Not yet'}: {self.message}"

    def _repr_html_(self) -> str:
        colour, word = (
            ("#2e7d32", "Correct") if self.correct else ("#c62828", "Not yet")
        )
        return (
            f'<p style="border-left: 3px solid {colour}; padding-left: 0.6em">'
            f'<b style="color: {colour}">{word}:</b> {html.escape(self.message)}</p>'
        )


@dataclass
class _Folded:
    """A hint or solution: folded until clicked (HTML), or plain text."""

    label: str
    text: str
    code: str = ""

    def __repr__(self) -> str:
        return f"{self.label}:\n{self.code}\n{self.text}".strip()

    def _repr_html_(self) -> str:
        code = f"<pre><code>{html.escape(self.code)}</code></pre>" if self.code else ""
        text = "".join(f"<p>{html.escape(p)}</p>" for p in self.text.split("\n\n") if p)
        return (
            '<details class="vx-exercise" style="margin: 0.4em 0; padding: 0.2em 0.6em; '
            f'border-left: 3px solid #1f77b4"><summary><b>{html.escape(self.label)}</b> '
            f"(click to show)</summary>{code}{text}</details>"
        )


@dataclass
class Exercise:
    """One exercise: ``checker(*answer)`` raises :class:`Mistake` when the answer is wrong
    and may return a sentence for a right one. ``reference`` builds the reference answer;
    ``mistakes`` are typical wrong answers, each with words its check must say."""

    title: str
    checker: Callable[..., str | None]
    hint_text: str
    solution_code: str
    explanation: str
    reference: Answer
    mistakes: Sequence[tuple[Answer, str]] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if len(self.mistakes) < 2:
            raise ValueError(f"{self.title}: give at least two typical mistakes.")

    def verdict(self, *answer) -> Verdict:
        """The check's verdict on ``answer``, without printing."""
        if not answer or _uses_blank(answer):
            return Verdict(
                False, "fill in the blanks (____) first, then run this again."
            )
        try:
            said = self.checker(*answer)
        except Mistake as mistake:
            return Verdict(False, str(mistake))
        except Exception as error:  # the student's code failed inside the check
            where = traceback.extract_tb(error.__traceback__)[-1]
            return Verdict(
                False,
                f"your answer raised {type(error).__name__}: {error} "
                f"(in {where.name}, line {where.lineno}).",
            )
        return Verdict(True, said or "that is the reference answer.")

    def check(self, *answer) -> None:
        """Check ``answer`` and show the verdict: correct, or what is wrong."""
        _show(self.verdict(*answer))

    def hint(self) -> None:
        """Show the hint, folded."""
        _show(_Folded(f"Hint: {self.title}", self.hint_text))

    def solution(self) -> None:
        """Show the reference solution and why it is right, folded."""
        code = self.solution_code.strip()
        _show(_Folded(f"Solution: {self.title}", self.explanation, code))


def _show(shown: object) -> None:
    """Display in a notebook (HTML there), print elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(shown)
    else:
        print(repr(shown))


def check_letter(answer: object, right: str, wrong: dict[str, str]) -> None:
    """Check a one-letter answer: raise :class:`Mistake` with the words for a wrong one."""
    letter = str(answer).strip().strip("\"'()").lower()
    if letter in wrong:
        raise Mistake(f"({letter}) {wrong[letter]}")
    if letter != right:
        raise Mistake(f"answer with one letter among {sorted([right, *wrong])}.")


def reference_source(function: Callable, answer: str | None = None) -> str:
    """A reference function's source (and the letter answer) as solution code."""
    code = inspect.getsource(function)
    return code + (f'\n\nanswer = "{answer}"\n' if answer else "")


def chapter_exercises() -> dict[str, dict[str, Exercise]]:
    """Every chapter module's exercises, ``{"ch03": {"ex1": Exercise, ...}, ...}``."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[info.name] = {
            name: value
            for name, value in vars(module).items()
            if isinstance(value, Exercise)
        }
    return found
