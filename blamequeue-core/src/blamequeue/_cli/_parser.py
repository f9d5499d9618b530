"""The parser of ``blamequeue`` and of each of its commands: argparse's, with usage errors that
say what was expected (the command's synopsis and an example from its ``--help``) and a "did you
mean" for a mistyped command or option."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from blamequeue._suggest import did_you_mean

__all__ = ["ExclusiveOptions", "Parser"]

#: A command with more actions than this lists them in ``--help`` only, not in usage errors.
_MOST_LISTED = 8


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` that remembers what it was given (for its errors);
    the parsers of its commands are of this class too (argparse makes subparsers of their
    parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before argparse's own __init__, which adds -h/--help through add_argument.
        self._option_strings: list[str] = []
        self._flags: set[str] = set()
        self._synopsis: list[str] = []
        self._choices: dict[str, list[str]] = {}  # an option's choices, by its option strings
        self._commands: argparse.Action | None = None
        super().__init__(*args, **kwargs)

    # -- what it was given -----------------------------------------------------------------------
    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.note(action)
        return action

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        self._commands = action
        return action

    def note(self, action: argparse.Action) -> None:
        """Remember ``action`` (an argument added some other way, as :class:`ExclusiveOptions`
        does): its option strings for "did you mean", and its place in the synopsis."""
        self._option_strings.extend(action.option_strings)
        if action.nargs == 0:
            self._flags.update(action.option_strings)
        if action.choices is not None and action.nargs is None and action.type is None:
            choices = [str(choice) for choice in action.choices]
            self._choices.update({option: choices for option in action.option_strings})
        if not action.option_strings:
            self._synopsis.append(_positional(action))
        elif action.required:
            option = max(action.option_strings, key=len)
            self._synopsis.append(f"{option} {action.metavar or action.dest.upper()}")

    def commands(self) -> dict[str, Parser]:
        """The parsers of its commands (or actions), by name; empty when it has none."""
        choices = dict(self._commands.choices or {}) if self._commands is not None else {}
        return {name: parser for name, parser in choices.items() if isinstance(parser, Parser)}

    # -- parsing ---------------------------------------------------------------------------------
    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        """As argparse's, except that an unknown command or option is an error here, in the
        parser of the command it was given to (so the error names that command's options)."""
        arguments = sys.argv[1:] if args is None else list(args)
        if self._commands is not None:
            self._check_command(arguments)
        self._check_choices(arguments)
        namespace, extras = super().parse_known_args(arguments, namespace)
        if extras:
            self.error(self._unrecognised(extras))
        return namespace, extras

    def _check_command(self, arguments: Sequence[str]) -> None:
        """An unknown command (or action), with the closest ones; before argparse's own check,
        whose message lists every command instead."""
        assert self._commands is not None
        for argument in arguments:
            if argument == "--":
                return
            if argument.startswith("-"):
                if argument.partition("=")[0] in self._flags:
                    continue
                return  # an option that may take a value: argparse sorts it out
            names = self._names()
            if argument not in names:
                what = self._commands.metavar or "COMMAND"
                guess = did_you_mean(argument, names, n=3)
                self.error(
                    f"unknown {str(what).lower()} {argument!r}" + (f"; {guess}" if guess else "")
                )
            return

    def _check_choices(self, arguments: Sequence[str]) -> None:
        """A value an option does not take (``--backend reds``), with the closest ones; before
        argparse's own check, whose message only lists them.  Only the arguments before this
        parser's command (if any) are its own."""
        for i, argument in enumerate(arguments):
            if argument == "--" or (self._commands is not None and argument in self._names()):
                return
            option, sep, value = argument.partition("=")
            choices = self._choices.get(option)
            if choices is None:
                continue
            if not sep:
                value = arguments[i + 1] if i + 1 < len(arguments) else "-"
            # A missing value (the end, or an option next) is argparse's to report.
            if not value.startswith("-") and value not in choices:
                guess = did_you_mean(value, choices)
                self.error(
                    f"argument {option}: invalid choice: {value!r}{'; ' + guess if guess else ''} "
                    f"(choose from {', '.join(choices)})"
                )

    def _names(self) -> list[str]:
        assert self._commands is not None
        return list(self._commands.choices or ())

    def _unrecognised(self, extras: Sequence[str]) -> str:
        message = f"unrecognized arguments: {' '.join(extras)}"
        options = [extra.partition("=")[0] for extra in extras if extra.startswith("-")]
        guesses = {
            option: guess
            for option in options
            if (guess := did_you_mean(option, self._option_strings, show=str))
        }
        if len(options) == 1 and guesses:
            return f"{message} ({guesses[options[0]]})"
        if guesses:
            return f"{message} ({'; '.join(f'{o}: {g}' for o, g in guesses.items())})"
        return message

    # -- errors ----------------------------------------------------------------------------------
    def error(self, message: str) -> NoReturn:
        """argparse's usage and ``PROG: error: MESSAGE``, then ``expected: SYNOPSIS`` and an
        ``example:`` line from the command's ``--help``; exit code 2."""
        self.print_usage(sys.stderr)
        lines = [f"{self.prog}: error: {message}", f"expected: {self.synopsis()}"]
        example = self.example()
        if example:
            lines.append(f"example: {example}")
        self.exit(2, "\n".join(lines) + "\n")

    def synopsis(self) -> str:
        """``blamequeue worker MODULE:OBJECT --queue QUEUE``: the command and what it needs."""
        parts = [self.prog, *self._synopsis]
        if self._commands is not None:
            what = str(self._commands.metavar or "COMMAND")
            names = list(self._commands.choices or ())
            listed = (
                f"one of {', '.join(names)}"
                if len(names) <= _MOST_LISTED
                else f"`{self.prog} --help` lists them"
            )
            parts += [what, f"...  ({what}: {listed})"]
        return " ".join(parts)

    def example(self) -> str | None:
        """The first one-line example of this command in its ``--help``, without its comment."""
        return _first_example(self.prog, (self.epilog or "").splitlines())


class ExclusiveOptions:
    """Options of which at most one may be given (argparse's mutually exclusive group), noted
    by their :class:`Parser`."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self._parser = parser
        self._group = parser.add_mutually_exclusive_group()

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = self._group.add_argument(*args, **kwargs)
        if isinstance(self._parser, Parser):
            self._parser.note(action)
        return action


def _positional(action: argparse.Action) -> str:
    name = str(action.metavar or action.dest)
    if action.nargs == "?":
        return f"[{name}]"
    if action.nargs == "*":
        return f"[{name} ...]"
    if action.nargs == "+":
        return f"{name} [{name} ...]"
    return name


def _first_example(prog: str, lines: Iterable[str]) -> str | None:
    in_examples = False
    for line in lines:
        text = line.strip()
        if line.rstrip() == "examples:":
            in_examples = True
        elif in_examples and not line.startswith(" "):
            return None
        elif in_examples and (text == prog or text.startswith(prog + " ")):
            command = text.partition("  #")[0].rstrip()
            if not command.endswith("\\"):
                return command
    return None
