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

from collections.abc import Callable, Mapping
from typing import Any, Final

import botocore.exceptions

from blamequeue.abc import ErrorMap, ErrorRule
from blamequeue.errors import QueueError
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
_REFUSED_ARGUMENTS: Final = frozenset(
    {"InvalidParameterValue", "InvalidAttributeValue", "MissingParameter"}
)
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


def _client_error(test: Callable[[str, int], bool]) -> Callable[[BaseException], bool]:
    """A test for botocore ``ClientError`` exceptions by their SQS error code and HTTP
    status."""

    def matches(exc: BaseException) -> bool:
        return isinstance(exc, botocore.exceptions.ClientError) and test(
            error_code(exc), _status(exc)
        )

    return matches


def _coded(codes: frozenset[str]) -> Callable[[BaseException], bool]:
    """A test for ``ClientError`` exceptions whose SQS error code is one of ``codes``."""
    return _client_error(lambda code, _: code in codes)


# Error codes a person must act on (not retried), and what to do.
_NEEDS_A_PERSON: Final = (
    (
        _NO_QUEUE,
        "{where}: SQS says the queue does not exist ({code}); check the queue URL "
        "(`aws sqs get-queue-url --queue-name NAME`), the region, and that the queue was not "
        "deleted (or set create_queues=True to let the backend create it)",
    ),
    (
        _DENIED,
        "{where}: access denied to SQS {action} ({code}: {text}); grant the IAM action "
        "sqs:{action} on the queue (and kms:GenerateDataKey / kms:Decrypt for a queue "
        "encrypted with a customer key); see docs/backends/sqs.md for the full list",
    ),
    (
        _CREDENTIALS,
        "{where}: SQS refused the credentials ({code}: {text}); check AWS_ACCESS_KEY_ID / "
        "AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or the profile, and that they belong to the "
        "account and region of the queue",
    ),
    (
        frozenset({"PurgeQueueInProgress"}),
        "{where}: SQS allows one PurgeQueue per queue every 60 seconds; try again in a minute",
    ),
)


def _text(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return error_message(exc)
    return str(exc)


_ERRORS: Final = ErrorMap(
    ErrorRule(
        when=_client_error(lambda code, status: code in _THROTTLED or status >= 500),
        retryable=True,
        message=f"{{where}}: SQS {{action}} failed temporarily ({{code_or_status}}: {{text}}); "
        f"{_TEMPORARY}",
    ),
    *(ErrorRule(when=_coded(codes), message=message) for codes, message in _NEEDS_A_PERSON),
    ErrorRule(
        when=_coded(_REFUSED_ARGUMENTS),
        code="queue/bad-argument",
        message="{where}: SQS refused {action}: {code}: {text}",
    ),
    ErrorRule(
        when=botocore.exceptions.ClientError,
        message="{where}: SQS {action} failed ({code_or_status}: {text})",
    ),
    ErrorRule(
        when=botocore.exceptions.NoRegionError,
        code="queue/invalid-config",
        message="{where}: no AWS region: set the backend option 'region' (or "
        "BLAMEQUEUE_SQS_REGION, or AWS_DEFAULT_REGION)",
    ),
    ErrorRule(
        when=(
            botocore.exceptions.NoCredentialsError,
            botocore.exceptions.PartialCredentialsError,
            botocore.exceptions.CredentialRetrievalError,
        ),
        code="queue/invalid-config",
        message="{where}: no usable AWS credentials ({text}); set them the boto3 way "
        "(environment variables, ~/.aws/credentials, an instance or task role)",
    ),
    ErrorRule(
        when=botocore.exceptions.ParamValidationError,
        code="queue/bad-argument",
        message="{where}: SQS {action}: {text}",
    ),
    ErrorRule(
        when=_ANSWER_LOST,
        retryable=True,
        message=f"{{where}}: SQS {{action}} got no answer ({{kind}}: {{text}}); SQS may have "
        f"applied the request before the answer was lost{{maybe_sent}}; {_TEMPORARY}",
    ),
    ErrorRule(
        when=(
            botocore.exceptions.ConnectionError,
            botocore.exceptions.HTTPClientError,
            OSError,
            TimeoutError,
        ),
        retryable=True,
        message=f"{{where}}: could not reach SQS for {{action}} ({{kind}}: {{text}}); {_TEMPORARY}",
    ),
    otherwise=ErrorRule(when=Exception, message="{where}: SQS {action} raised {kind}: {text}"),
    text=_text,
    redact=redacted,
)


def map_error(exc: Exception, *, where: str, action: str) -> QueueError:
    """The :class:`QueueError` to raise (``from exc``) for ``exc`` raised by SQS ``action``
    (an API name such as ``ReceiveMessage``); ``where`` names the backend and queue.  A
    credential in a URL the error names is redacted, in the exception too."""
    code, status = error_code(exc), _status(exc)
    return _ERRORS.map(
        exc,
        where=where,
        action=action,
        code=code,
        code_or_status=code or status,
        maybe_sent=_MAYBE_SENT if action in _SENDS else "",
    )


def is_missing_queue(exc: BaseException) -> bool:
    """Whether ``exc`` (a mapped error, or its botocore cause) says the queue does not exist."""
    cause = exc.__cause__ if isinstance(exc, QueueError) else exc
    return cause is not None and error_code(cause) in _NO_QUEUE
