"""The base kit of :mod:`blamequeue.abc`: plumbing every backend would otherwise write again.

This module holds the settlement table and text checks; :mod:`blamequeue._backend_boundary`
the store boundary and :mod:`blamequeue._backend_options` option reading.

* :class:`StoreGuard`: the handle to the store while the backend is open, the
  ``queue/not-initialized`` refusal before :meth:`~blamequeue.abc.Backend.open` and after
  :meth:`~blamequeue.abc.Backend.close`, and foreign errors mapped at the boundary.
* :class:`ErrorRule` / :class:`ErrorMap`: a backend's table of foreign errors and the
  :class:`~blamequeue.errors.QueueError` each becomes; :func:`redact_chain` keeps a credential
  out of a foreign exception kept as a ``__cause__``.
* :class:`~blamequeue._backend_options.OptionReader`: a backend's options, checked at
  construction (unknown keys with a did-you-mean, typed reads naming the option).
* :class:`OutcomeRule`, :data:`SETTLEMENT_OUTCOMES`, :func:`outcome_rule` and
  :func:`check_settlements`: what each settlement outcome does to a job, and the checks every
  :meth:`~blamequeue.abc.Backend.settle` makes first.
* :func:`storable_text`: text any store can hold (no unpaired surrogates).

Every name of the kit is public through :mod:`blamequeue.abc`; import it from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from .errors import BadArgumentError

if TYPE_CHECKING:
    from ._backend_values import JobState, Settlement

__all__ = [
    "SETTLEMENT_OUTCOMES",
    "OutcomeRule",
    "check_settlements",
    "outcome_rule",
    "storable_text",
]


# -- settlements ----------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class OutcomeRule:
    """What settling an owned ``inflight`` job with one outcome does to it, in one atomic
    step with the fence check (see :meth:`~blamequeue.abc.Backend.settle`)."""

    state: JobState
    """The job's new state (``done`` with ``keep=False``: the job is deleted instead)."""
    finishes: bool
    """``finished_at = at`` (the job ended); otherwise ``available_at = at`` (due again)."""
    gives_back_attempt: bool
    """``attempts`` goes down by one (not below 0): the attempt did not count."""
    sets_error: bool
    """``last_error = error``, ``None`` included; otherwise only an ``error`` given replaces
    it."""


#: Each settlement outcome and what it does (SPEC §3): ``done`` completes (keeping
#: ``result``, releasing the flow jobs parked behind it), ``retry`` and ``release`` make the
#: job due again at ``at`` (``release``: a worker gave it back unrun), ``dead`` moves it to
#: the dead-letter queue.
SETTLEMENT_OUTCOMES: Mapping[str, OutcomeRule] = {
    "done": OutcomeRule(state="done", finishes=True, gives_back_attempt=False, sets_error=False),
    "retry": OutcomeRule(
        state="pending", finishes=False, gives_back_attempt=False, sets_error=True
    ),
    "dead": OutcomeRule(state="dead", finishes=True, gives_back_attempt=False, sets_error=True),
    "release": OutcomeRule(
        state="pending", finishes=False, gives_back_attempt=True, sets_error=False
    ),
}


def outcome_rule(outcome: str) -> OutcomeRule:
    """The :class:`OutcomeRule` of ``outcome``; ``queue/bad-argument`` for an unknown one."""
    rule = SETTLEMENT_OUTCOMES.get(outcome)
    if rule is None:
        raise BadArgumentError(
            "queue/bad-argument",
            f"settlement outcome must be one of {sorted(SETTLEMENT_OUTCOMES)}, got {outcome!r}",
        )
    return rule


def check_settlements(settlements: Sequence[Settlement]) -> list[bool]:
    """Check a :meth:`~blamequeue.abc.Backend.settle` batch before anything changes: an
    unknown outcome refuses the whole batch (``queue/bad-argument``).  Returns, per
    settlement, whether it is the first with its ``(job_id, token)``: a repeat is stale
    (completion applies once), so a backend answers ``False`` for it without applying it."""
    seen: set[tuple[str, str]] = set()
    first: list[bool] = []
    for item in settlements:
        outcome_rule(item.outcome)
        key = (item.job_id, item.token)
        first.append(key not in seen)
        seen.add(key)
    return first


def storable_text(text: str) -> str:
    """``text`` as any store and client can take it: an unpaired surrogate (say, from an
    undecodable file name in an exception message) is escaped (``\\udcff``) rather than
    failing the write it is part of.  Valid text comes back unchanged."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
