"""The commands that edit a waiting job or run a finished one again, by id: ``promote``,
``change-delay``, ``change-priority``, ``update-payload`` and ``rerun`` (``Queue.promote`` and
the rest, SPEC §15)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from blamequeue import Queue
from blamequeue.errors import QueueError

from ._config import add_queue_command, add_queue_options, with_queue
from ._ops import read_payload
from ._output import add_json_option, print_json
from ._running import EXIT_ERROR, EXIT_OK, Subparsers, non_negative_seconds, whole_number

__all__ = ["add_parser"]

_EXIT_CODES = """\
Exit code 0 when it applied, 1 when the job is in a state it does not apply to
(nothing changed; the line says which state), 3 when the backend holds no such job."""


@attrs.frozen(kw_only=True)
class _Edit:
    """One command: its name, ``--help``, its argument after JOB_ID, the call it makes, and what
    it prints."""

    command: str
    manual: str
    #: The JSON key saying whether it applied (``"promoted"``, ...).
    key: str
    #: ``(dest, metavar, type, help)`` of the positional argument after JOB_ID, if any.
    value: tuple[str, str, Callable[[str], Any], str] | None
    call: Callable[[Queue, str, Any, str], Awaitable[bool]]
    #: ``str.format`` fields: job_id, value.
    done: str
    #: The states it applies to, for the line when it did not apply.
    applies_to: str
    #: What turns the argument after JOB_ID into the call's value, before the queue opens.
    parse: Callable[[Any], Any] = lambda value: value


_EDITS = [
    _Edit(
        command="promote",
        manual=f"""\
make a delayed job due now

Make the delayed job JOB_ID due now: an idle worker starts it at once.
{_EXIT_CODES}

examples:
  blamequeue promote job-01J0ZK5V3G9YB6R2W8X4T1QH7C
  blamequeue promote order-42 --json
""",
        key="promoted",
        value=None,
        call=lambda queue, job_id, _value, backend: queue.promote(job_id, backend=backend),
        done="job {job_id} is due now",
        applies_to="a delayed job not yet due",
    ),
    _Edit(
        command="change-delay",
        manual=f"""\
make a waiting job due SECONDS from now

Make the pending (due or delayed) job JOB_ID due SECONDS from now (0: at once),
sooner or later than it was.  A parked job waits for its dependencies instead.
{_EXIT_CODES}

examples:
  blamequeue change-delay job-01J0ZK5V3G9YB6R2W8X4T1QH7C 3600
  blamequeue change-delay order-42 0 --json
""",
        key="delay_changed",
        value=(
            "seconds",
            "SECONDS",
            non_negative_seconds,
            "seconds from now until it is due (0: due now)",
        ),
        call=lambda queue, job_id, seconds, backend: queue.change_delay(
            job_id, seconds, backend=backend
        ),
        done="job {job_id} is due {value:g} s from now",
        applies_to="a pending or delayed job",
    ),
    _Edit(
        command="change-priority",
        manual=f"""\
give a waiting job another priority

Give the pending, delayed or parked job JOB_ID the priority PRIORITY (higher runs
first); the next leases follow it.
{_EXIT_CODES}

examples:
  blamequeue change-priority job-01J0ZK5V3G9YB6R2W8X4T1QH7C 10
  blamequeue change-priority order-42 -5 --json
""",
        key="priority_changed",
        value=("priority", "PRIORITY", whole_number, "the new priority, a whole number"),
        call=lambda queue, job_id, priority, backend: queue.change_priority(
            job_id, priority, backend=backend
        ),
        done="job {job_id} has priority {value}",
        applies_to="a pending, delayed or parked job",
    ),
    _Edit(
        command="update-payload",
        manual=f"""\
replace a waiting job's payload (as JSON)

Replace the payload of the pending, delayed or parked job JOB_ID with PAYLOAD_JSON
('-' reads it from stdin), checked as enqueue checks it; its handler sees the new one.
{_EXIT_CODES}

examples:
  blamequeue update-payload job-01J0ZK5V3G9YB6R2W8X4T1QH7C '{{"to": "grace@example.com"}}'
  echo '{{"order": 42, "rush": true}}' | blamequeue update-payload order-42 - --json
""",
        key="payload_updated",
        value=(
            "payload",
            "PAYLOAD_JSON",
            str,
            "the new payload as JSON, or - to read it from stdin",
        ),
        call=lambda queue, job_id, payload, backend: queue.update_payload(
            job_id, payload, backend=backend
        ),
        done="job {job_id} has its new payload",
        applies_to="a pending, delayed or parked job",
        parse=read_payload,
    ),
    _Edit(
        command="rerun",
        manual=f"""\
run a done, dead or cancelled job again (attempts reset)

Put the done, dead or cancelled job JOB_ID back to pending, due now, with its
attempts reset (a done job is kept only for the backend's retain_done seconds).
{_EXIT_CODES}

examples:
  blamequeue rerun job-01J0ZK5V3G9YB6R2W8X4T1QH7C
  blamequeue rerun order-42 --json
""",
        key="rerun",
        value=None,
        call=lambda queue, job_id, _value, backend: queue.rerun(job_id, backend=backend),
        done="job {job_id} is back to pending (attempts reset)",
        applies_to="a done, dead or cancelled job",
    ),
]


def add_parser(subparsers: Subparsers) -> None:
    for edit in _EDITS:
        parser = add_queue_command(subparsers, edit.command, edit.manual, run=_run)
        parser.add_argument("job_id", metavar="JOB_ID", help="the job's id, as enqueue printed it")
        if edit.value is not None:
            dest, metavar, kind, text = edit.value
            parser.add_argument(dest, metavar=metavar, type=kind, help=text)
        add_json_option(parser)
        add_queue_options(parser)
        parser.set_defaults(edit=edit)


async def _state(queue: Queue, job_id: str, backend: str) -> str | None:
    """The job's state now, to say why an edit did not apply; None when it cannot be read."""
    try:
        info = await queue.job_info(job_id, backend=backend)
    except QueueError:
        return None
    return None if info is None else info.state


def _run(args: argparse.Namespace) -> int:
    edit: _Edit = args.edit
    value = None if edit.value is None else edit.parse(getattr(args, edit.value[0]))

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        applied = await edit.call(queue, args.job_id, value, backend)
        document: dict[str, Any] = {"job_id": args.job_id, "backend": backend, edit.key: applied}
        if applied:
            if args.json:
                print_json(document)
            else:
                print(edit.done.format(job_id=args.job_id, value=value))
            return EXIT_OK
        state = await _state(queue, args.job_id, backend)
        if args.json:
            print_json({**document, "state": state})
        else:
            now = "" if state is None else f" is {state}:"
            print(
                f"job {args.job_id}{now} nothing changed ({edit.command} applies only to "
                f"{edit.applies_to})"
            )
        return EXIT_ERROR

    return with_queue(args, body)
