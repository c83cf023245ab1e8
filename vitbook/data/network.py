"""Whether the data code may use the network, and whether online sources are test fixtures.

The library never reads the book's environment: whoever runs it says so here. The book's
settings (``BOOK_OFFLINE``, ``BOOK_FIXTURES``) and the CLI's options call
:func:`set_offline`, :func:`set_fixtures` and :func:`set_stand_ins`; the getters in
:mod:`vitbook.data` ask :func:`is_offline`, :func:`uses_fixtures` and
:func:`stand_ins_allowed`.
"""

from __future__ import annotations

__all__ = [
    "OFFLINE",
    "announce_fixture",
    "is_offline",
    "set_fixtures",
    "set_offline",
    "set_stand_ins",
    "stand_ins_allowed",
    "uses_fixtures",
]

_state = {"offline": False, "fixtures": False, "stand_ins": True}

# How error messages name this switch, set by the book's settings, the CLI's --offline or
# a reader's own call.
OFFLINE = "offline (vitbook.data.network.set_offline(True))"


def set_offline(offline: bool) -> None:
    """Never touch the network from now on (True), or allow it again (False)."""
    _state["offline"] = bool(offline)


def is_offline() -> bool:
    """True when the data code must not use the network (default False)."""
    return _state["offline"]


def set_fixtures(fixtures: bool) -> None:
    """Say that the online datasets and weights are small local test fixtures."""
    _state["fixtures"] = bool(fixtures)


def uses_fixtures() -> bool:
    """True when online data and weights come from local test fixtures."""
    return _state["fixtures"]


def set_stand_ins(allowed: bool) -> None:
    """Allow a dataset that cannot be had to be replaced by its labelled stand-in (True,
    the default), or make that an error (False: the book's CI, which must test real data)."""
    _state["stand_ins"] = bool(allowed)


def stand_ins_allowed() -> bool:
    """Whether a missing dataset may fall back to its stand-in."""
    return _state["stand_ins"]


def announce_fixture(name: str, detail: str) -> None:
    """Print the loud one-line notice that ``name`` is a test fixture, not the real thing."""
    print(f"[FIXTURE] {name}: {detail} (test fixtures; results mean nothing)")
