"""The ``sqs`` backend's options: parsed and checked at construction, without any I/O.

SQS requests are signed with the AWS credentials of the boto3 chain; a ``user:password@`` in a
URL option is never used by boto3 (it sends no such header) yet would be echoed by every error
and debug log that names the URL, so it is refused here.  Every message shows a URL through
:func:`redacted`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal, cast

import attrs

from blamequeue.abc import OptionReader

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_RECEIVE_COUNT",
    "MAX_WAIT_SECONDS",
    "QUEUE_PLACEHOLDER",
    "MessageGroup",
    "SqsOptions",
    "parse_options",
    "redacted",
]

DEFAULT_MAX_IN_FLIGHT: Final = 16
DEFAULT_MAX_RECEIVE_COUNT: Final = 10
DEFAULT_DLQ_SCAN_WAIT: Final = 1
QUEUE_PLACEHOLDER: Final = "{queue}"
# SQS's own limits.
_MAX_RECEIVE_COUNT_LIMIT: Final = 1000
MAX_WAIT_SECONDS: Final = 20
"""SQS's longest WaitTimeSeconds of a receive (long polling)."""
_KNOWN: Final = (
    "queue_url",
    "queue_urls",
    "dlq_url",
    "region",
    "endpoint_url",
    "client",
    "max_in_flight_requests",
    "create_queues",
    "max_receive_count",
    "message_group",
    "dlq_scan_wait",
)
# What a bring-your-own client must offer (a boto3 SQS client does).
CLIENT_METHODS: Final = (
    "send_message_batch",
    "receive_message",
    "delete_message_batch",
    "change_message_visibility_batch",
    "get_queue_attributes",
)

MessageGroup = Literal["queue", "job"]


@attrs.frozen(kw_only=True)
class SqsOptions:
    queue_url: str | None
    """The SQS queue of every queue name not in ``queue_urls``; may hold ``{queue}``."""
    queue_urls: Mapping[str, str]
    dlq_url: str | None
    region: str | None
    endpoint_url: str | None = attrs.field(repr=lambda url: redacted(repr(url)))
    client: object | None
    max_in_flight_requests: int
    create_queues: bool
    max_receive_count: int
    message_group: MessageGroup
    dlq_scan_wait: int

    @property
    def templated(self) -> bool:
        """``queue_url`` names one SQS queue per queue name (it holds ``{queue}``)."""
        return self.queue_url is not None and QUEUE_PLACEHOLDER in self.queue_url


# The user info of a URL (``scheme://user:password@``), and the value of a query parameter
# named like a credential (a presigned URL's X-Amz-Signature and X-Amz-Credential included).
_USER_INFO: Final = re.compile(r"(?<=://)[^/?#\s\"'<>]*@")
_SECRET_PARAMETER: Final = re.compile(
    r"(?i)([?&][^=&#\s\"'<>]*(?:password|passwd|pwd|token|secret|auth|signature|credential)"
    r"[^=&#\s\"'<>]*=)[^&#\s\"'<>]*"
)


def redacted(text: str) -> str:
    """``text`` with the user info of every URL in it and the values of query parameters named
    like a credential replaced by ``***``: what messages show of a URL or of a foreign error
    that names one."""
    return _SECRET_PARAMETER.sub(r"\1***", _USER_INFO.sub("***@", text))


def _url(read: OptionReader, option: str, value: object) -> str:
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        shown = redacted(repr(value)) if isinstance(value, str) else type(value).__name__
        raise read.invalid(
            f"option {option!r} must be an SQS queue URL like "
            f"'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs', got {shown:.80}"
        )
    if "@" in value.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]:
        raise read.invalid(
            f"option {option!r} holds a user or password ({redacted(value):.80}); remove it: "
            f"boto3 does not use it (SQS requests are signed with the AWS credentials of the "
            f"boto3 chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile or a role)"
        )
    return value


def parse_options(options: Mapping[str, Any]) -> SqsOptions:
    """Check ``options`` and return them typed; raise ``queue/invalid-config`` naming the fault."""
    read = OptionReader(options, backend="sqs backend", known=_KNOWN)
    queue_url = options.get("queue_url")
    if queue_url is not None:
        queue_url = _url(read, "queue_url", queue_url)
        rest = queue_url.replace(QUEUE_PLACEHOLDER, "", 1)
        if "{" in rest or "}" in rest:
            raise read.invalid(
                f"option 'queue_url' may hold '{QUEUE_PLACEHOLDER}' once (one SQS queue per "
                f"queue name) and no other braces, got {redacted(repr(queue_url))}"
            )
    raw_urls = options.get("queue_urls")
    queue_urls: dict[str, str] = {}
    if raw_urls is not None:
        if not isinstance(raw_urls, Mapping):
            raise read.invalid(
                f"option 'queue_urls' must map queue names to SQS queue URLs, got "
                f"{type(raw_urls).__name__}"
            )
        for name, url in raw_urls.items():
            if not isinstance(name, str) or not name:
                raise read.invalid(f"option 'queue_urls' has a key {name!r}; keys are queue names")
            if QUEUE_PLACEHOLDER in str(url):
                raise read.invalid(
                    f"option 'queue_urls[{name!r}]' is a template; only 'queue_url' may hold "
                    f"'{QUEUE_PLACEHOLDER}'"
                )
            queue_urls[name] = _url(read, f"queue_urls[{name!r}]", url)
    if queue_url is None and not queue_urls:
        raise read.invalid(
            "needs 'queue_url' (the SQS queue URL, e.g. from `aws sqs get-queue-url "
            "--queue-name jobs`) or 'queue_urls' (a mapping of queue name to URL); from the "
            "environment: BLAMEQUEUE_SQS_QUEUE_URL"
        )

    dlq_url = options.get("dlq_url")
    if dlq_url is not None:
        dlq_url = _url(read, "dlq_url", dlq_url)
        if queue_url is None or QUEUE_PLACEHOLDER in queue_url:
            raise read.invalid(
                "option 'dlq_url' is the dead-letter queue of 'queue_url', which must then be "
                "one plain URL; other queues find theirs in their RedrivePolicy"
            )

    region = read.text("region")
    endpoint_url = options.get("endpoint_url")
    if endpoint_url is not None:
        endpoint_url = _url(read, "endpoint_url", endpoint_url) if endpoint_url else None

    client = options.get("client")
    if client is not None:
        missing = [name for name in CLIENT_METHODS if not callable(getattr(client, name, None))]
        if missing:
            raise read.invalid(
                f"option 'client' must be a boto3 SQS client (boto3.client('sqs')); the object "
                f"given has no {', '.join(missing)}"
            )
        read.refuse_with("client", ("region", "endpoint_url"), "configure the client you pass")

    groups = {"queue": "FIFO order per queue name", "job": "no order, full parallelism"}
    return SqsOptions(
        queue_url=queue_url,
        queue_urls=queue_urls,
        dlq_url=dlq_url,
        region=None if region is None else region.strip(),
        endpoint_url=endpoint_url,
        client=client,
        max_in_flight_requests=read.integer(
            "max_in_flight_requests", DEFAULT_MAX_IN_FLIGHT, low=1, high=1024
        ),
        create_queues=bool(read.flag("create_queues", False)),
        max_receive_count=read.integer(
            "max_receive_count", DEFAULT_MAX_RECEIVE_COUNT, low=1, high=_MAX_RECEIVE_COUNT_LIMIT
        ),
        message_group=cast(MessageGroup, read.choice("message_group", "queue", groups)),
        dlq_scan_wait=read.integer(
            "dlq_scan_wait", DEFAULT_DLQ_SCAN_WAIT, low=0, high=MAX_WAIT_SECONDS
        ),
    )
