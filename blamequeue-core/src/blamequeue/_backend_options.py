"""Base kit: reading a backend's options (:class:`OptionReader`).

Every backend checks its options at construction, without I/O, and refuses anything wrong with
``queue/invalid-config`` naming the option.  :class:`OptionReader` is that check written once:
unknown keys (with a did-you-mean), and typed reads that refuse a wrong type or an out-of-range
value with a message naming the option, what it must be and what it got.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._suggest import did_you_mean
from .errors import ConfigError

__all__ = ["OptionReader"]


def _shown(value: object) -> str:
    """What a message shows of a value it refuses: text and numbers as written (cut short),
    anything else by its type, so an object's repr (which may hold a secret) stays out."""
    if isinstance(value, str):
        return repr(value) if value.strip() else "an empty string"
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)[:40]
    return type(value).__name__


class OptionReader:
    """The options of one backend, read and checked at construction.

    Build it first thing in ``__init__``; it refuses keys not in ``known`` at once (naming the
    closest known key when one is near).  Then read each option with the typed method that
    fits.  A value of ``None`` counts as not given (configuration from the environment or a
    file often spells "unset" so), so the default applies::

        class MyBackend(Backend):
            def __init__(self, options, context):
                super().__init__(options, context)
                read = OptionReader(
                    options, backend=f"backend {context.name!r}", known=("url", "timeout")
                )
                self._url = read.text("url", required="e.g. 'my://host:1234'")
                self._timeout = read.seconds("timeout", 5.0)

    Every refusal is a :class:`~blamequeue.errors.ConfigError` (``queue/invalid-config``)
    whose message starts with ``backend`` (how messages name the backend, e.g.
    ``"local backend"``).  :meth:`invalid` makes one for a check of the backend's own.
    """

    def __init__(self, options: Mapping[str, Any], *, backend: str, known: Iterable[str]) -> None:
        self.options = options
        self.backend = backend
        self.known: tuple[str, ...] = tuple(known)
        unknown = sorted(str(key) for key in options if key not in self.known)
        if unknown:
            raise self.invalid(
                f"unknown option(s) {', '.join(self._guess(name) for name in unknown)}; "
                f"it accepts {', '.join(map(repr, self.known))}"
            )

    def _guess(self, name: str) -> str:
        guess = did_you_mean(name, self.known)
        return f"{name!r} ({guess})" if guess else repr(name)

    def invalid(self, message: str) -> ConfigError:
        """The ``queue/invalid-config`` error for ``message`` (name the option in it)."""
        return ConfigError("queue/invalid-config", f"{self.backend}: {message}")

    def raw(self, name: str) -> Any:
        """The value of ``name`` as given, ``None`` when not given; for checks of your own."""
        return self.options.get(name)

    def given(self, names: Sequence[str]) -> list[str]:
        """Which of ``names`` were given a value (not ``None``), in that order."""
        return [name for name in names if self.options.get(name) is not None]

    def refuse_with(self, name: str, others: Sequence[str], reason: str) -> None:
        """Refuse ``others`` given along with ``name`` (options that contradict it)."""
        clash = self.given(others)
        if clash:
            raise self.invalid(
                f"option(s) {', '.join(map(repr, clash))} cannot be combined with {name!r}: "
                f"{reason}"
            )

    def text(self, name: str, default: str | None = None, *, required: str = "") -> str | None:
        """A non-blank string (returned as given); ``default`` when not given.  With
        ``required`` (an example of a good value) the option must be given."""
        value = self.options.get(name)
        if value is None:
            if required:
                raise self.invalid(f"option {name!r} is required, {required}")
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.invalid(f"option {name!r} must be a non-empty string, got {_shown(value)}")
        return value

    def path(self, name: str, default: str) -> str:
        """A filesystem path: a non-empty ``str`` or ``os.PathLike`` of text, as ``str``."""
        value = self.options.get(name)
        if value is None:
            return default
        text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
        if not isinstance(text, str) or not text:
            raise self.invalid(
                f"option {name!r} must be a non-empty text path (str or os.PathLike), like "
                f"'jobs.db', got {_shown(value)}"
            )
        return text

    def flag(self, name: str, default: bool | None, *, words: bool = False) -> bool | None:
        """True or False; with ``words``, also the strings ``"1"``/``"true"`` and
        ``"0"``/``"false"`` (any case), as environment variables spell them."""
        value = self.options.get(name)
        if value is None or isinstance(value, bool):
            return default if value is None else value
        if words and isinstance(value, str):
            word = value.strip().lower()
            if word in ("1", "true", "0", "false"):
                return word in ("1", "true")
        raise self.invalid(f"option {name!r} must be True or False, got {_shown(value)}")

    def integer(self, name: str, default: int, *, low: int, high: int, meaning: str = "") -> int:
        """A whole number from ``low`` to ``high`` (a float without a fraction counts, as JSON
        or TOML may give one).  ``meaning`` replaces "between low and high" in the message
        (say what it counts and what the ends mean, e.g. "of microseconds from 0 (off) to
        100")."""
        value = self.options.get(name)
        if value is None:
            return default
        whole = (
            not isinstance(value, bool)
            and isinstance(value, int | float)
            and (isinstance(value, int) or (math.isfinite(value) and value.is_integer()))
        )
        if not whole or not low <= value <= high:
            raise self.invalid(
                f"option {name!r} must be a whole number {meaning or f'between {low} and {high}'}"
                f", got {_shown(value)}"
            )
        return int(value)

    def seconds(self, name: str, default: float, *, low: float = 0.0, high: float) -> float:
        """A finite number of seconds from ``low`` to ``high``, as a float."""
        value = self.options.get(name)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high  # NaN fails, and so does a too large int
        ):
            raise self.invalid(
                f"option {name!r} must be a number of seconds >= {low:g} and at most "
                f"{high:.0f}, got {_shown(value)}"
            )
        return float(value)

    def choice(self, name: str, default: str, choices: Mapping[str, str]) -> str:
        """One of the keys of ``choices``, whose values say what each choice does."""
        value = self.options.get(name)
        if value is None:
            return default
        if not isinstance(value, str) or value not in choices:
            spelled = " or ".join(f"{key!r} ({meaning})" for key, meaning in choices.items())
            raise self.invalid(f"option {name!r} must be {spelled}, got {_shown(value)}")
        return value
