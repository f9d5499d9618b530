"""The "did you mean" of a mistyped name (a command, an option, a protocol, a task, a backend
option): the closest known names, by :func:`difflib.get_close_matches`."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

__all__ = ["close_matches", "did_you_mean", "did_you_mean_protocol"]


def close_matches(word: str, known: Iterable[str], *, n: int = 1) -> list[str]:
    """At most ``n`` of ``known`` that ``word`` looks like a typo of, closest first."""
    return difflib.get_close_matches(word, list(known), n=n)


def did_you_mean(
    word: str, known: Iterable[str], *, n: int = 1, show: Callable[[str], str] = repr
) -> str:
    """``"did you mean 'worker'?"`` (``show`` renders each name), or ``""`` when nothing in
    ``known`` is close to ``word``."""
    close = close_matches(word, known, n=n)
    return f"did you mean {' or '.join(map(show, close))}?" if close else ""


def did_you_mean_protocol(given: str, known: Iterable[str]) -> str:
    """:func:`did_you_mean` for a protocol (``reds`` → ``'redis'``) or a URL's scheme
    (``reds://host`` → ``'redis://'``); for a URL whose scheme is right, says that a protocol
    is a bare name."""
    scheme, sep, _ = given.partition("://")
    known = list(known)
    if sep and scheme in known:
        return f"a protocol is a bare name such as {scheme!r}; give the URL in its own option"
    return did_you_mean(scheme, known, show=lambda name: repr(name + sep))
