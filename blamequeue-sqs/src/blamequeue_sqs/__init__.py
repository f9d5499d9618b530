"""blamequeue's ``sqs`` backend: jobs as messages of AWS SQS queues, through boto3.

::

    Queue(backends={"sqs": {
        "protocol": "sqs",
        "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
    }}, seal={"keys": {"k1": "<base64 key from `blamequeue keygen`>"}})

SQS keeps the lease itself: a lease is a ReceiveMessage whose visibility timeout is the lease,
the receipt handle is the lease token, completing deletes the message, a failure hides it for
the backoff delay, and a job out of attempts is moved to the queue's dead-letter queue (the one
its RedrivePolicy names, which is also the server-side backstop).  Batch calls keep the cost at
about three requests per ten jobs.  See ``docs/backends/sqs.md`` for the action map, the IAM
actions and how SQS differs from the other backends.

:class:`CountingClient` wraps a boto3 client and counts the requests made through it.
"""

from __future__ import annotations

from blamequeue_sqs._backend import SqsBackend
from blamequeue_sqs._transport import CountingClient

__all__ = ["CountingClient", "SqsBackend"]
