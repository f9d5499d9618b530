"""Every install command the README and the docs show, found in the Markdown and run as written.

Nothing is published to a package index from here (SPEC §1), so the wheels of every
distribution are built into a wheelhouse first, and a command that installs distributions by
name (``pip install 'blamequeue[redis]'``) runs with ``PIP_FIND_LINKS`` pointing at it: the
wheelhouse stands in for the index a user installs from.  A command that installs from the
checkout (``pip install ./blamequeue-core ...``, ``pip install -e ...``) runs in a copy of the
checkout's tracked files with no wheelhouse at all, as a reader with a fresh clone would run it.

Commands are taken from fenced shell blocks (``bash``, ``sh``, ``console``, ``shell`` or
unlabelled; each line holding ``pip install``, up to a ``&&`` or a ``#`` comment) and from
inline code spans that start with ``pip install``.  An HTML comment
``<!-- install-check: cwd=PATH -->`` on the line before a fence runs that block's commands in
``PATH`` (relative to the root) with the wheelhouse, for a page that speaks to a reader in a
project of their own.  README's test command is left out: CI runs it.  After each install,
``pip check`` must pass and every installed blamequeue distribution's package must import.

tests/packaging/test_install_commands.py runs them, one test each;
``python tests/install_commands.py`` lists them.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/**/*.md", "docs/examples/*/README.md")
DISTRIBUTIONS = (
    "blamequeue-core",
    "blamequeue-local",
    "blamequeue-redis",
    "blamequeue-sqs",
    "blamequeue-testing",
    ".",
    "docs/examples/blamequeue-example-backend",
)
FENCE = re.compile(r"^```(\w*)")
DIRECTIVE = re.compile(r"<!--\s*install-check:\s*cwd=(\S+)\s*-->")
INLINE = re.compile(r"`((?:\S*/)?pip install [^`]+)`")
# What a distribution's import package is, for the import check after an install.
PACKAGES = {
    "blamequeue-core": "blamequeue",
    "blamequeue-local": "blamequeue_local",
    "blamequeue-redis": "blamequeue_redis",
    "blamequeue-sqs": "blamequeue_sqs",
    "blamequeue-testing": "blamequeue_testing",
    "blamequeue-example-backend": "blamequeue_example",
}
IMPORT_CHECK = f"""
import importlib, importlib.metadata as md
packages = {PACKAGES!r}
found = [d.metadata["Name"] for d in md.distributions()]
for name in sorted(set(found) & set(packages)):
    importlib.import_module(packages[name])
print(", ".join(sorted(set(found) & set(packages))))
"""


class Command(NamedTuple):
    steps: tuple[tuple[str, ...], ...]  # pip's arguments ("install", ...), run in order
    cwd: str  # relative to ROOT
    index: bool  # resolve names from the wheelhouse
    where: str  # page:line, for the report

    def __str__(self) -> str:
        how = "wheelhouse" if self.index else "checkout"
        said = " ; ".join(f"pip {shlex.join(args)}" for args in self.steps)
        return f"{self.where}: {said} ({how}, in {self.cwd})"


def pip_args(text: str) -> tuple[str, ...] | None:
    """What follows ``pip`` in one shell line (``install ...`` or ``wheel ...``), or None when
    it installs nothing."""
    if "pip install" not in text and "pip wheel" not in text:
        return None
    text = text.split(" #", 1)[0]
    for part in text.split("&&"):
        words = shlex.split(part.strip().removeprefix("$ "))
        for i, word in enumerate(words[:-1]):
            if (word == "pip" or word.endswith("/pip")) and words[i + 1] in ("install", "wheel"):
                return tuple(words[i + 1 :])
    return None


def from_checkout(args: tuple[str, ...]) -> bool:
    return any(a == "-e" or a.startswith((".", "/")) for a in args)


def test_command() -> tuple[str, ...] | None:
    """The arguments of README's test command's install (CI runs that line itself)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    marker = next(i for i, line in enumerate(lines) if "<!-- test-command" in line)
    return pip_args(lines[marker + 2])


def page_commands(page: Path) -> list[Command]:
    """A fenced block's installs run in order in one venv (as a reader pastes the block); an
    inline span's alone."""
    # A shell line continued with a backslash is one command.
    lines = (ROOT / page).read_text().replace("\\\n", " ").splitlines()
    found: list[Command] = []
    block: list[tuple[str, ...]] = []
    fence: str | None = None
    cwd: str | None = None
    start = 0
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line.strip())
        if match and fence is None:
            fence, start = match.group(1), number
            directive = DIRECTIVE.search(lines[number - 2]) if number > 1 else None
            cwd = directive.group(1) if directive else None
            block = []
        elif match:
            if block:
                # A block that builds its own wheels (``pip wheel``) needs no wheelhouse.
                builds = any(a[0] == "wheel" for a in block)
                index = cwd is not None or not (builds or all(from_checkout(a) for a in block))
                found.append(Command(tuple(block), cwd or ".", index, f"{page}:{start}"))
            fence = None
        elif fence is not None:
            args = pip_args(line) if fence in ("", "bash", "sh", "console", "shell") else None
            if args:
                block.append(args)
        else:
            for span in INLINE.findall(line):
                args = pip_args(span)
                if args:
                    index = not from_checkout(args)
                    found.append(Command((args,), ".", index, f"{page}:{number}"))
    return found


def commands() -> list[Command]:
    skip = test_command()
    found: dict[tuple[tuple[tuple[str, ...], ...], str, bool], Command] = {}
    pages = sorted({p for pattern in PAGES for p in ROOT.glob(pattern)})
    for page in pages:
        for command in page_commands(page.relative_to(ROOT)):
            if skip in command.steps or any("-r" in args for args in command.steps):
                continue
            if not any(from_checkout(a) or "blamequeue" in " ".join(a) for a in command.steps):
                continue  # installs nothing of ours (``pip install trio``)
            # ``-U`` changes nothing in a fresh venv: one run for both spellings.
            command = command._replace(
                steps=tuple(tuple(w for w in a if w != "-U") for a in command.steps)
            )
            found.setdefault(command[:3], command)
    return _folded(list(found.values()))


def _folded(found: list[Command]) -> list[Command]:
    """A command whose steps begin another's, in the same place and from the same source, runs
    as that one's first steps (a fresh venv each would install the same thing twice)."""
    kept: list[Command] = []
    for command in sorted(found, key=lambda c: -len(c.steps)):
        for i, other in enumerate(kept):
            if (other.cwd, other.index) == (command.cwd, command.index) and (
                other.steps[: len(command.steps)] == command.steps
            ):
                kept[i] = other._replace(where=f"{other.where}+{command.where}")
                break
        else:
            kept.append(command)
    return sorted(kept, key=lambda c: c.where)


def build_wheelhouse(wheelhouse: Path) -> Path:
    """The wheels of every distribution in ``wheelhouse``, built once however many test
    processes ask at the same time (the first builds under a lock, the others wait and reuse)."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with open(wheelhouse / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (wheelhouse / ".built").exists():
            # The build backend is installed here (the dev extra): no isolated environment
            # for each build, the same wheels.
            builds = [str(ROOT / d) for d in DISTRIBUTIONS]
            wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
            done = subprocess.run(
                [*wheel, "--no-build-isolation", "-w", str(wheelhouse), *builds],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise RuntimeError(f"building the wheelhouse failed:\n{done.stdout}{done.stderr}")
            (wheelhouse / ".built").touch()
    return wheelhouse


def fresh_python(env_dir: Path) -> str:
    """A fresh venv's interpreter.  No pip inside: the test environment's pip installs into it
    (``pip --python``), which saves an ensurepip per venv and installs the same."""
    venv.create(env_dir, with_pip=False)
    return str(env_dir / "bin" / "python")


def fresh_clone(into: Path) -> Path:
    """A copy of the checkout's tracked files (as they are in the work tree), standing in for a
    fresh clone: nothing a command writes lands in the real checkout, and nothing untracked
    (a venv, a build folder) helps it."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def pip(python: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--python", python, *args]


def pip_env(wheelhouse: Path | None) -> dict[str, str]:
    """The environment pip runs in here: none of the caller's ``PIP_`` settings; no byte
    compiling (it changes nothing about whether an install works, and is most of pip's time for
    the large dependencies); ``wheelhouse``, when given, standing in for the package index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_COMPILE"] = "1"
    if wheelhouse is not None:
        env["PIP_FIND_LINKS"] = str(wheelhouse)
    return env


def install(python: str, wheelhouse: Path, *requirements: str) -> None:
    """Install ``requirements`` into ``python``'s venv from the wheelhouse (and the index)."""
    done = subprocess.run(
        pip(python, "install", "-q", *requirements),
        env=pip_env(wheelhouse),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def checked_output(*args: str) -> str:
    """The standard output of a command that must succeed (a fresh venv's python or pip)."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def run(command: Command, wheelhouse: Path, scratch: Path) -> str | None:
    """Install ``command`` into a fresh venv; None when it worked, else what went wrong."""
    clone = fresh_clone(scratch / "clone")
    python = fresh_python(scratch / "venv")
    env = pip_env(wheelhouse if command.index else None)
    steps = [
        *(pip(python, args[0], "-q", *args[1:]) for args in command.steps),
        pip(python, "check"),
        [python, "-c", IMPORT_CHECK],
    ]
    for step in steps:
        done = subprocess.run(
            step, cwd=clone / command.cwd, env=env, capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            return f"{shlex.join(step)}\n{done.stdout}{done.stderr}"
    return None


if __name__ == "__main__":
    for found in commands():
        print(found)
