"""Exercises a student can check (issue 49): every check accepts its reference answer and
rejects each typical mistake with the words meant for it; each chapter's notebook offers a
starter, check, hint and solution for every exercise it imports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vitbook.book.exercises import Exercise, Mistake, ____, chapter_exercises

BOOK = Path(__file__).resolve().parents[2] / "book"
EXERCISES = chapter_exercises()
ALL = [
    pytest.param(exercise, id=f"{chapter}.{name}")
    for chapter, found in EXERCISES.items()
    for name, exercise in found.items()
]


def _square(reference=lambda: (lambda n: n * n,)):
    def checker(f):
        if f(3) != 9:
            raise Mistake(f"square(3) should be 9, not {f(3)}.")
        return "squares are right."

    return Exercise(
        "Squares", checker, "Multiply.", "def f(n): return n * n", "n times n.",
        reference, [(lambda: (lambda n: n + n,), "not 6"), (lambda: (abs,), "not 3")],
    )  # fmt: skip


def test_a_check_says_what_is_wrong_and_never_raises():
    square = _square()
    assert square.verdict(lambda n: n * n).correct
    assert "not 6" in square.verdict(lambda n: n + n).message
    raised = square.verdict(lambda n: 1 / 0)
    assert not raised and "ZeroDivisionError" in raised.message


def test_blanks_ask_to_be_filled_in_first():
    def starter(n):
        return n * ____

    for answer in (____, starter, [1, ____]):
        verdict = _square().verdict(answer)
        assert not verdict and "fill in the blanks" in verdict.message
    assert ____ + 1 is ____ and ____(3).x is ____  # a starter cell runs


def test_hint_and_solution_are_folded_and_escaped(capsys):
    square = _square()
    square.solution()
    assert "def f(n): return n * n" in capsys.readouterr().out
    folded = type(square).solution.__globals__["_Folded"]("Solution", "a < b", "x<y")
    assert (
        folded._repr_html_().startswith("<details") and "x&lt;y" in folded._repr_html_()
    )


def test_an_exercise_needs_two_typical_mistakes():
    with pytest.raises(ValueError, match="two typical mistakes"):
        Exercise("T", print, "h", "s", "e", lambda: (), [(lambda: (), "m")])


@pytest.mark.parametrize("exercise", ALL)
def test_the_reference_answer_passes(exercise):
    verdict = exercise.verdict(*exercise.reference())
    assert verdict.correct, verdict.message


@pytest.mark.parametrize("exercise", ALL)
def test_each_typical_mistake_gets_its_message(exercise):
    for wrong, words in exercise.mistakes:
        verdict = exercise.verdict(*wrong())
        assert not verdict.correct and words in verdict.message, verdict.message


@pytest.mark.parametrize("chapter", sorted(EXERCISES))
def test_the_notebook_offers_check_hint_and_solution(chapter):
    (notebook,) = BOOK.glob(f"{chapter[2:]}_*.ipynb")
    code = "\n".join(
        "".join(c["source"])
        for c in json.loads(notebook.read_text())["cells"]
        if c["cell_type"] == "code"
    )
    for name in EXERCISES[chapter]:
        for call in ("check(", "hint()", "solution()"):
            assert re.search(rf"\b{name}\.{re.escape(call)}", code), f"{name}.{call}"
    assert "____" in code  # a starter cell with blanks


# Chapters converted with issue 51's rebuild (until then without checked exercises)
NOT_YET = {
    n for n in ("06", "07", "09", "10", "11", "12", "13") if f"ch{n}" not in EXERCISES
}


@pytest.mark.parametrize(
    "number",
    [
        pytest.param(
            path.name[:2],
            marks=pytest.mark.xfail(
                path.name[:2] in NOT_YET, reason="issue 51 rebuilds it", strict=True
            ),
        )
        for path in sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
    ],
)
def test_every_chapter_has_exercises_with_checks(number):
    assert len(EXERCISES.get(f"ch{number}", {})) >= 3
