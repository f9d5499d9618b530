"""Where the CLI's queue comes from: ``BLAMEQUEUE_*`` variables (``Queue.from_env``), ``--path``
for the SQLite file, or ``--config FILE.toml``.

The TOML file holds what ``Queue(...)`` takes::

    default_backend = "primary"        # required with several backends
    sweep_interval = 30                # optional
    seal = false                       # optional: false, or a [seal.keys] table

    [backends.primary]                 # one table per backend, the keys of Queue(backends=...)
    protocol = "local"
    path = "/var/lib/app/jobs.db"      # relative paths are relative to the current directory
    max_attempts = 3

    [backends.primary.retry]
    attempts = 5

A file that is not TOML, or holds anything ``Queue(...)`` refuses, is a ``queue/invalid-config``
error (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import tomllib
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from blamequeue import Queue
from blamequeue._environment import config_from_env
from blamequeue.errors import ConfigError, UnsupportedError

from ._parser import ExclusiveOptions
from ._running import Subparsers, UsageError, add_command, run_on_loop, say

__all__ = [
    "CONFIG_HELP",
    "add_queue_argument",
    "add_queue_command",
    "add_queue_options",
    "backend_config",
    "backend_configs",
    "build_queue",
    "chosen_backends",
    "load_config",
    "new_database",
    "per_backend",
    "with_queue",
]

T = TypeVar("T")

_TOP_LEVEL = ("backends", "default_backend", "sweep_interval", "seal")
_DEFAULT_LOCAL_PATH = "./blamequeue.db"

#: The configuration paragraph of every queue command's --help.
CONFIG_HELP = """\
configuration:
  By default the queue is built from BLAMEQUEUE_* variables (Queue.from_env: protocol local,
  file ./blamequeue.db, unless BLAMEQUEUE_PROTOCOL / BLAMEQUEUE_LOCAL_PATH / ... say otherwise).
  --path FILE picks the SQLite file; --config FILE.toml reads the backends from a file:
      default_backend = "primary"
      [backends.primary]
      protocol = "local"
      path = "jobs.db"
  --backend NAME picks one of the file's backends (default: its default_backend).
"""


def add_queue_command(
    subparsers: Subparsers,
    name: str,
    manual: str,
    *,
    run: Callable[[argparse.Namespace], int] | None = None,
) -> argparse.ArgumentParser:
    """A command (or action) on the configured queue (see :func:`add_command`): its ``--help``
    ends with :data:`CONFIG_HELP`, after a blank line."""
    return add_command(subparsers, name, f"{manual}\n{CONFIG_HELP}", run=run)


def add_queue_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue", metavar="QUEUE", help="the queue's name")


def add_queue_options(
    parser: argparse.ArgumentParser,
    *,
    backend_help: str | None = "backend to use, by its name in --config (default: the default one)",
    config_help: str = "TOML file with [backends.NAME] tables (instead of BLAMEQUEUE_* variables)",
    backend_config: bool = False,
) -> None:
    """``--config`` / ``--path`` (one or the other; with ``backend_config``, or
    ``--backend-config``) and ``--backend`` (not with ``backend_help=None``)."""
    source = ExclusiveOptions(parser)
    source.add_argument("--config", metavar="FILE", help=config_help)
    source.add_argument(
        "--path",
        metavar="FILE",
        help="SQLite file of the local backend (sets BLAMEQUEUE_LOCAL_PATH)",
    )
    if backend_config:
        source.add_argument(
            "--backend-config",
            metavar="JSON",
            help='one backend\'s config as JSON, e.g. \'{"protocol": "local", "path": '
            '"jobs.db"}\', or @FILE to read it from a file (instead of BLAMEQUEUE_* variables)',
        )
    if backend_help is not None:
        parser.add_argument("--backend", metavar="NAME", help=backend_help)


def _invalid(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", message)


def load_config(path: str) -> dict[str, Any]:
    """The keyword arguments of ``Queue(...)`` from a TOML file."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        raise _invalid(f"config file {path} does not exist") from None
    except OSError as exc:
        raise _invalid(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _invalid(f"config file {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(_TOP_LEVEL))
    if unknown:
        raise _invalid(
            f"config file {path}: unknown key(s) {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(_TOP_LEVEL)} (each backend goes in a [backends.NAME] table)"
        )
    backends = data.get("backends")
    if not isinstance(backends, dict) or not backends:
        raise _invalid(
            f"config file {path} defines no backend; add a table such as\n"
            f'  [backends.primary]\n  protocol = "local"'
        )
    for name, config in backends.items():
        if not isinstance(config, dict):
            raise _invalid(
                f"config file {path}: backends.{name} must be a table ([backends.{name}]) "
                f"with a protocol key, got {type(config).__name__}"
            )
    return data


def backend_config(text: str) -> dict[str, Any]:
    """``--backend-config``: one backend's config as JSON, or ``@FILE`` holding it."""
    source = "--backend-config"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--backend-config: cannot read {source}: {exc.strerror}") from None
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(
            f'{source} must be a JSON object such as {{"protocol": "local", "path": "jobs.db"}}'
        )
    return config


def _queue_arguments(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    """``Queue(...)`` keyword arguments from the options (``from_env`` if none)."""
    if getattr(args, "config", None):
        return load_config(args.config)
    if getattr(args, "backend_config", None) is not None:
        return {"backends": {"default": backend_config(args.backend_config)}}
    environ = dict(env)
    if getattr(args, "path", None):
        protocol = environ.get("BLAMEQUEUE_PROTOCOL", "local").strip() or "local"
        if protocol != "local":
            raise UsageError(
                f"--path is the SQLite file of the local backend, but BLAMEQUEUE_PROTOCOL="
                f"{protocol}; unset one of them"
            )
        environ["BLAMEQUEUE_LOCAL_PATH"] = args.path
    config, kwargs = config_from_env(environ)
    return {"backends": {"default": config}, **kwargs}


def backend_configs(queue_arguments: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    backends: dict[str, Mapping[str, Any]] = queue_arguments["backends"]
    return backends


def _missing_databases(queue_arguments: Mapping[str, Any], only: str | None) -> list[str]:
    """SQLite files a local backend would create: reading from them would find nothing."""
    missing = []
    for name, config in backend_configs(queue_arguments).items():
        if only is not None and name != only:
            continue
        if config.get("protocol") != "local" or "store" in config:
            continue
        path = config.get("path", _DEFAULT_LOCAL_PATH)
        if (
            isinstance(path, str | os.PathLike)
            and str(path) != ":memory:"
            and not Path(path).exists()
        ):
            missing.append(str(path))
    return missing


def build_queue(
    args: argparse.Namespace,
    *,
    must_exist: bool = True,
    env: Mapping[str, str] | None = None,
) -> Queue:
    """The command's queue.  With ``must_exist`` a local backend's database file must already
    exist: a command that only reads (or deletes) would otherwise create an empty one."""
    arguments = _queue_arguments(args, os.environ if env is None else env)
    queue = Queue(**arguments)  # checks the configuration first
    backend = getattr(args, "backend", None)
    if backend is not None and backend not in arguments["backends"]:
        raise UsageError(
            f"--backend {backend!r} is not configured; configured backends: "
            f"{', '.join(sorted(arguments['backends']))}"
        )
    if must_exist:
        missing = _missing_databases(arguments, backend)
        if missing:
            raise UsageError(
                f"no queue database at {missing[0]} (nothing was ever enqueued there); pass "
                f"--path FILE or --config FILE, or set BLAMEQUEUE_LOCAL_PATH"
            )
    return queue


def with_queue(
    args: argparse.Namespace,
    body: Callable[[Queue], Awaitable[int]],
    *,
    must_exist: bool = True,
    loop: str = "asyncio",
) -> int:
    """Build the queue, start it, run ``body`` with it, shut it down; ``body``'s exit code."""
    queue = build_queue(args, must_exist=must_exist)

    async def main() -> int:
        async with queue:
            return await body(queue)

    return run_on_loop(main, loop)


def new_database(path: str | None, command: str) -> tuple[Path, Path | None]:
    """The SQLite file a command that starts from nothing writes: ``--path``, which must not
    exist yet, or else a file in a new temporary directory, returned second for the caller to
    delete (None for ``--path``)."""
    if path is None:
        temporary = Path(tempfile.mkdtemp(prefix=f"blamequeue-{command}-"))
        return temporary / f"{command}.db", temporary
    chosen = Path(path)
    if chosen.exists():
        raise UsageError(
            f"{chosen} already exists; {command} only writes to a new file (pick another --path, "
            f"or leave it out to use a temporary one)"
        )
    if not chosen.parent.is_dir():
        raise UsageError(f"the directory of --path {chosen} does not exist")
    return chosen, None


def chosen_backends(queue: Queue, args: argparse.Namespace) -> list[str]:
    """``--backend`` if given, else every configured backend (the default one first)."""
    if getattr(args, "backend", None) is not None:
        return [args.backend]
    names = [status.name for status in queue.list_backends()]
    return sorted(names, key=lambda name: name != queue.default_backend)


async def per_backend(
    queue: Queue,
    args: argparse.Namespace,
    read: Callable[[str], Awaitable[T]],
    *,
    until: Callable[[T], bool] | None = None,
) -> list[tuple[str, T]]:
    """``(backend, read(backend))`` for each chosen backend in turn, up to the first result
    ``until`` accepts.  A backend that refuses (:class:`UnsupportedError`, e.g. it cannot
    inspect) is skipped, and named on stderr unless a result was accepted; when every backend
    refused, the first refusal is raised."""
    results: list[tuple[str, T]] = []
    refused: list[UnsupportedError] = []
    for name in chosen_backends(queue, args):
        try:
            results.append((name, await read(name)))
        except UnsupportedError as exc:
            refused.append(exc)
            continue
        if until is not None and until(results[-1][1]):
            return results
    if refused and not results:
        raise refused[0]
    for refusal in refused:
        say(f"note: skipped: {refusal.message}")
    return results
