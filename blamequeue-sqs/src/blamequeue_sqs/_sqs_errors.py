"""Mapping of ``botocore`` exceptions to :class:`~blamequeue.errors.QueueError`.

The backend's client wrapper calls :func:`map_error` at the boundary, so no botocore exception
reaches the core.  Throttling, server errors and lost connections are temporary (retried, counted
by the breaker); a missing queue, denied access or bad credentials need a person and are not
retried: the message names the IAM action or the setting to fix.

A credential in a URL that botocore names (``Could not connect to the endpoint URL: ...``, from
a caller's own client) is replaced by ``***`` in the message and in the botocore exception
kept as its ``__cause__`` (:func:`~blamequeue_sqs._options.redacted`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import botocore.exceptions

from blamequeue.errors import BackendUnavailableError, BadArgumentError, ConfigError, QueueError
from blamequeue_sqs._options import redacted

__all__ = [
    "entry_failure",
    "error_code",
    "error_message",
    "is_missing_queue",
    "is_stale",
    "map_error",
]

_PREFIX: Final = "AWS.SimpleQueueService."

_THROTTLED: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "KmsThrottled",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# What the caller of a temporary failure reads: by then the retry policy has given up.
_TEMPORARY: Final = (
    "a temporary fault, already retried as the backend's 'retry' option says: try again later "
    "(a consumer does so by itself)"
)
# The request was sent and the connection lost before the answer: it may have taken effect.
_ANSWER_LOST: Final = (
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
)
_SENDS: Final = frozenset({"SendMessage", "SendMessageBatch"})
_MAYBE_SENT: Final = (
    ": its jobs may be stored, and then run, although this call failed; enqueueing them "
    "again may run them twice"
)
_NO_QUEUE: Final = frozenset({"NonExistentQueue", "QueueDoesNotExist"})
_DENIED: Final = frozenset({"AccessDenied", "AccessDeniedException", "KmsAccessDenied"})
_CREDENTIALS: Final = frozenset(
    {
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidSecurity",
        "MissingAuthenticationToken",
    }
)
# A receipt handle that no longer owns its message: the lease was lost (SPEC §3.4: stale).
_STALE: Final = frozenset({"ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidReceiptHandle"})


def error_code(exc: BaseException) -> str:
    """The SQS error code of a ``ClientError`` without the legacy prefix, else ``""``."""
    response: Any = getattr(exc, "response", None)
    code = ""
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
    return code.removeprefix(_PREFIX)


def error_message(exc: BaseException) -> str:
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Message", "")) or str(exc)
    return str(exc)


def entry_failure(failure: Mapping[str, Any]) -> str:
    """One failed entry of a batch answer (``{"Code": …, "Message": …}``), as ``Code: text``."""
    return f"{failure.get('Code')}: {failure.get('Message', '')}"


def is_stale(code: str, message: str) -> bool:
    """Whether an error code (of a call or of one batch entry) says the receipt handle is no
    longer valid: the message was deleted, or received again by someone else."""
    code = code.removeprefix(_PREFIX)
    if code in _STALE:
        return True
    lowered = message.lower()
    return code == "InvalidParameterValue" and "receipt handle" in lowered


def _status(exc: BaseException) -> int:
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(status, int):
            return status
    return 0


def _redact_chain(exc: BaseException) -> None:
    """Redact URL credentials in the arguments of ``exc`` and the exceptions it came from."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        args = tuple(redacted(a) if isinstance(a, str) else a for a in current.args)
        if args != current.args:
            current.args = args
        current = current.__cause__ or current.__context__


def map_error(exc: Exception, *, where: str, action: str) -> QueueError:
    """The :class:`QueueError` to raise (``from exc``) for ``exc`` raised by SQS ``action``
    (an API name such as ``ReceiveMessage``); ``where`` names the backend and queue."""
    if isinstance(exc, QueueError):
        return exc
    _redact_chain(exc)  # every ``{exc}`` below reads the redacted arguments
    if isinstance(exc, botocore.exceptions.ClientError):
        code = error_code(exc)
        text = redacted(error_message(exc))
        if code in _THROTTLED or _status(exc) >= 500:
            return BackendUnavailableError(
                f"{where}: SQS {action} failed temporarily ({code or _status(exc)}: {text}); "
                f"{_TEMPORARY}"
            )
        if code in _NO_QUEUE:
            return BackendUnavailableError(
                f"{where}: SQS says the queue does not exist ({code}); check the queue URL "
                f"(`aws sqs get-queue-url --queue-name NAME`), the region, and that the queue "
                f"was not deleted (or set create_queues=True to let the backend create it)",
                retryable=False,
            )
        if code in _DENIED:
            return BackendUnavailableError(
                f"{where}: access denied to SQS {action} ({code}: {text}); grant the IAM "
                f"action sqs:{action} on the queue (and kms:GenerateDataKey / kms:Decrypt for a "
                f"queue encrypted with a customer key); see docs/backends/sqs.md for the full "
                f"list",
                retryable=False,
            )
        if code in _CREDENTIALS:
            return BackendUnavailableError(
                f"{where}: SQS refused the credentials ({code}: {text}); check "
                f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or the profile, "
                f"and that they belong to the account and region of the queue",
                retryable=False,
            )
        if code == "PurgeQueueInProgress":
            return BackendUnavailableError(
                f"{where}: SQS allows one PurgeQueue per queue every 60 seconds; try again in "
                f"a minute",
                retryable=False,
            )
        if code in ("InvalidParameterValue", "InvalidAttributeValue", "MissingParameter"):
            return BadArgumentError(
                "queue/bad-argument", f"{where}: SQS refused {action}: {code}: {text}"
            )
        return BackendUnavailableError(
            f"{where}: SQS {action} failed ({code or _status(exc)}: {text})", retryable=False
        )
    if isinstance(exc, botocore.exceptions.NoRegionError):
        return ConfigError(
            "queue/invalid-config",
            f"{where}: no AWS region: set the backend option 'region' (or "
            f"BLAMEQUEUE_SQS_REGION, or AWS_DEFAULT_REGION)",
        )
    if isinstance(
        exc,
        botocore.exceptions.NoCredentialsError
        | botocore.exceptions.PartialCredentialsError
        | botocore.exceptions.CredentialRetrievalError,
    ):
        return ConfigError(
            "queue/invalid-config",
            f"{where}: no usable AWS credentials ({exc}); set them the boto3 way (environment "
            f"variables, ~/.aws/credentials, an instance or task role)",
        )
    if isinstance(exc, botocore.exceptions.ParamValidationError):
        return BadArgumentError("queue/bad-argument", f"{where}: SQS {action}: {exc}")
    if isinstance(
        exc,
        botocore.exceptions.ConnectionError
        | botocore.exceptions.HTTPClientError
        | OSError
        | TimeoutError,
    ):
        if isinstance(exc, _ANSWER_LOST):
            return BackendUnavailableError(
                f"{where}: SQS {action} got no answer ({type(exc).__name__}: {exc}); SQS may "
                f"have applied the request before the answer was lost"
                + (_MAYBE_SENT if action in _SENDS else "")
                + f"; {_TEMPORARY}"
            )
        return BackendUnavailableError(
            f"{where}: could not reach SQS for {action} ({type(exc).__name__}: {exc}); {_TEMPORARY}"
        )
    return BackendUnavailableError(
        f"{where}: SQS {action} raised {type(exc).__name__}: {exc}", retryable=False
    )


def is_missing_queue(exc: BaseException) -> bool:
    """Whether ``exc`` (a mapped error, or its botocore cause) says the queue does not exist."""
    cause = exc.__cause__ if isinstance(exc, QueueError) else exc
    return cause is not None and error_code(cause) in _NO_QUEUE
