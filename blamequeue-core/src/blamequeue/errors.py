"""Errors raised by blamequeue.

Every error the library raises on purpose is a :class:`QueueError` with a stable ``code``
(one of :data:`ErrorCode`) and a message that says what to do about it.  Foreign exceptions
(``sqlite3``, ``redis``, ``botocore``) are mapped at the backend boundary and chained with
``raise ... from exc``; they never escape on their own.

The tree::

    QueueError                         .code, .retryable
    ├── ConfigError (ValueError)       queue/invalid-config, queue/deferred-protocol
    ├── BadArgumentError (ValueError)  queue/bad-argument, queue/bad-payload,
    │                                  queue/payload-too-large
    ├── FlowError (ValueError)         queue/bad-flow, queue/flow-cycle, queue/flow-unknown-dep
    ├── NotFoundError (LookupError)    queue/unknown-backend, queue/unknown-job, queue/job-not-found
    ├── UnsupportedError               queue/dlq-unsupported, queue/flow-unsupported,
    │                                  queue/inspection-unsupported, queue/limits-unsupported,
    │                                  queue/unique-unsupported, queue/results-unsupported,
    │                                  queue/cancel-unsupported, queue/records-unsupported,
    │                                  queue/job-edits-unsupported, queue/job-ids-unsupported,
    │                                  queue/lifo-unsupported, queue/retention-unsupported,
    │                                  queue/watch-unsupported
    ├── BackendUnavailableError        queue/backend-unavailable (retryable)
    ├── ResultTimeoutError (TimeoutError)  queue/result-timeout
    ├── JobFailedError                 queue/job-failed (.job_id, .state, .last_error)
    ├── SealKeyMissingError            queue/unseal-failed (.key_id): a key this process lacks
    └── QueueError itself              queue/not-initialized, queue/unseal-failed

Only errors whose ``retryable`` is true are retried by a backend's retry policy, and only those
count towards its circuit breaker.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "ERROR_CODES",
    "BackendUnavailableError",
    "BadArgumentError",
    "ConfigError",
    "ErrorCode",
    "FlowError",
    "JobFailedError",
    "NotFoundError",
    "QueueError",
    "ResultTimeoutError",
    "SealKeyMissingError",
    "UnsupportedError",
]

ErrorCode = Literal[
    "queue/not-initialized",
    "queue/unknown-backend",
    "queue/invalid-config",
    "queue/deferred-protocol",
    "queue/dlq-unsupported",
    "queue/inspection-unsupported",
    "queue/limits-unsupported",
    "queue/cancel-unsupported",
    "queue/watch-unsupported",
    "queue/job-edits-unsupported",
    "queue/bad-flow",
    "queue/flow-cycle",
    "queue/flow-unknown-dep",
    "queue/flow-unsupported",
    "queue/bad-payload",
    "queue/payload-too-large",
    "queue/bad-argument",
    "queue/backend-unavailable",
    "queue/unseal-failed",
    "queue/unknown-job",
    "queue/job-not-found",
    "queue/job-failed",
    "queue/result-timeout",
    "queue/unique-unsupported",
    "queue/results-unsupported",
    "queue/records-unsupported",
    "queue/job-ids-unsupported",
    "queue/lifo-unsupported",
    "queue/retention-unsupported",
]

#: Every code the library can raise; the documentation lists exactly these.
ERROR_CODES: Final[frozenset[str]] = frozenset(get_args(ErrorCode))


class QueueError(Exception):
    """Base of every error blamequeue raises on purpose.

    ``code`` is stable across releases and safe to branch on; the message is for people.
    ``retryable`` says whether trying the same call again later may succeed.
    """

    code: ErrorCode
    retryable: bool = False

    def __init__(self, code: ErrorCode, message: str, *, retryable: bool | None = None) -> None:
        if code not in ERROR_CODES:  # a typo here would silently break callers' branches
            raise ValueError(f"unknown QueueError code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def __reduce__(self) -> tuple[object, ...]:
        # Keep errors picklable across worker processes.
        return (_rebuild, (type(self), self.code, self.message, self.retryable))


def _rebuild(cls: type[QueueError], code: ErrorCode, message: str, retryable: bool) -> QueueError:
    err = cls.__new__(cls)
    QueueError.__init__(err, code, message, retryable=retryable)
    return err


class ConfigError(QueueError, ValueError):
    """The queue or a backend was configured wrongly (``queue/invalid-config``,
    ``queue/deferred-protocol``)."""


class BadArgumentError(QueueError, ValueError):
    """A call got an argument it cannot accept (``queue/bad-argument``, ``queue/bad-payload``,
    ``queue/payload-too-large``).  Nothing was stored."""


class FlowError(QueueError, ValueError):
    """A flow specification is malformed, cyclic or names an unknown dependency."""


class NotFoundError(QueueError, LookupError):
    """A named thing does not exist (``queue/unknown-backend``, ``queue/unknown-job``,
    ``queue/job-not-found``)."""


class UnsupportedError(QueueError):
    """The selected backend cannot do this (``queue/dlq-unsupported``,
    ``queue/flow-unsupported``, ``queue/inspection-unsupported``,
    ``queue/limits-unsupported``, ``queue/unique-unsupported``,
    ``queue/results-unsupported``, ``queue/cancel-unsupported``,
    ``queue/records-unsupported``, ``queue/job-edits-unsupported``,
    ``queue/job-ids-unsupported``, ``queue/lifo-unsupported``,
    ``queue/retention-unsupported``, ``queue/watch-unsupported``)."""


class BackendUnavailableError(QueueError):
    """The backend could not be reached, or its circuit breaker is open.

    Retryable: consumers back off and resume by themselves.
    """

    retryable = True

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__("queue/backend-unavailable", message, retryable=retryable)


class ResultTimeoutError(QueueError, TimeoutError):
    """A job's result did not arrive in time (``queue/result-timeout``)."""


class JobFailedError(QueueError):
    """The job whose result was awaited ended in a failed terminal state (``queue/job-failed``):
    ``dead`` (the dead-letter queue) or any other end but ``done``.

    ``state`` is that state, ``last_error`` the job's last error in full (the message quotes
    its first line).
    """

    job_id: str | None = None
    state: str | None = None
    last_error: str | None = None

    def __init__(
        self,
        message: str,
        *,
        job_id: str | None = None,
        state: str | None = None,
        last_error: str | None = None,
    ) -> None:
        super().__init__("queue/job-failed", message)
        self.job_id = job_id
        self.state = state
        self.last_error = last_error


class SealKeyMissingError(QueueError):
    """A stored value was sealed with a key id this process does not hold
    (``queue/unseal-failed``); ``key_id`` names it.

    Not the job's fault but the process's configuration: a worker that meets one releases the
    job untouched and stops leasing from that backend, instead of dead-lettering the job.  A
    third-party sealer raises it from ``unseal`` for an envelope naming a key it lacks.
    """

    key_id: str | None = None

    def __init__(self, message: str, *, key_id: str) -> None:
        super().__init__("queue/unseal-failed", message)
        self.key_id = key_id
