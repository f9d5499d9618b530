"""The sqs backend's options, its plugin, its refusal to run unsealed, and its error mapping."""

from __future__ import annotations

from typing import Any

import botocore.exceptions
import pytest

from blamequeue import Queue
from blamequeue.abc import BackendContext
from blamequeue.errors import BackendUnavailableError, BadArgumentError, ConfigError, QueueError
from blamequeue_sqs import SqsBackend
from blamequeue_sqs import _plugin as sqs_plugin
from blamequeue_sqs._sqs_errors import is_stale, map_error
from blamequeue_testing import VirtualClock

URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs"


def build(**options: Any) -> SqsBackend:
    return SqsBackend(options, BackendContext(name="t", clock=VirtualClock()))


def client_error(code: str, status: int = 400, message: str = "nope") -> Exception:
    return botocore.exceptions.ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "ReceiveMessage",
    )


def test_plugin_registers_protocol_sqs() -> None:
    registered: dict[str, type] = {}
    sqs_plugin.blamequeue_register_protocols(lambda name, cls: registered.update({name: cls}))
    assert registered == {"sqs": SqsBackend}


def test_capabilities_state_the_sqs_model() -> None:
    caps = SqsBackend.capabilities
    assert (caps.store_clock, caps.keeps_done, caps.priority, caps.flows, caps.dlq) == (
        True,
        False,
        False,
        False,
        True,
    )
    assert caps.requires_seal_key is True
    assert caps.async_libraries == frozenset({"asyncio", "trio"})


def test_construction_does_no_io_and_accepts_every_documented_option() -> None:
    backend = build(
        queue_url=URL,
        queue_urls={"emails": URL + "-emails"},
        dlq_url=URL + "-dlq",
        region="eu-west-1",
        endpoint_url="http://localhost:4566",
        max_in_flight_requests=8,
        create_queues=False,
        max_receive_count=7,
        message_group="job",
        dlq_scan_wait=0,
    )
    assert backend.protocol == "sqs"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({}, "needs 'queue_url'"),
        ({"queue_url": "jobs"}, "must be an SQS queue URL"),
        ({"queue_url": URL, "colour": "red"}, "unknown option(s) 'colour'"),
        ({"queue_urls": ["a"]}, "must map queue names"),
        ({"queue_urls": {"a": "not a url"}}, "queue_urls['a']"),
        ({"queue_url": URL + "-{queue}-{x}"}, "no other braces"),
        ({"queue_url": URL + "-{queue}", "dlq_url": URL + "-dlq"}, "one plain URL"),
        ({"queue_url": URL, "client": object()}, "must be a boto3 SQS client"),
        ({"queue_url": URL, "max_in_flight_requests": 0}, "between 1 and 1024"),
        ({"queue_url": URL, "max_receive_count": 1001}, "between 1 and 1000"),
        ({"queue_url": URL, "dlq_scan_wait": 2.5}, "whole number"),
        ({"queue_url": URL, "create_queues": "yes"}, "True or False"),
        ({"queue_url": URL, "message_group": "all"}, "'queue'"),
    ],
)
def test_bad_option_is_refused_naming_it(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(**options)
    assert info.value.code == "queue/invalid-config"
    assert fragment in info.value.message


def test_own_client_cannot_be_combined_with_region(sqs_endpoint: str) -> None:
    import boto3

    client = boto3.client("sqs", endpoint_url=sqs_endpoint, region_name="us-east-1")
    with pytest.raises(ConfigError, match="cannot be combined with 'client'"):
        build(queue_url=URL, client=client, region="us-east-1")


def test_queue_refuses_to_start_sqs_without_a_seal_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BLAMEQUEUE_SEAL_KEYS", raising=False)
    with pytest.raises(ConfigError) as info:
        Queue(backends={"sqs": {"protocol": "sqs", "queue_url": URL}})
    assert info.value.code == "queue/invalid-config"
    assert "blamequeue keygen" in info.value.message
    assert "seal=False" in info.value.message


def test_seal_false_is_the_explicit_opt_out() -> None:
    Queue(backends={"sqs": {"protocol": "sqs", "queue_url": URL, "seal": False}})


def test_from_env_builds_an_sqs_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    queue = Queue.from_env(
        {
            "BLAMEQUEUE_PROTOCOL": "sqs",
            "BLAMEQUEUE_SQS_QUEUE_URL": URL,
            "BLAMEQUEUE_SQS_REGION": "eu-west-1",
            "BLAMEQUEUE_SQS_ENDPOINT_URL": "http://localhost:4566",
            "BLAMEQUEUE_SEAL_KEYS": "k1:bHUvC5Kq0m2b3V3l8QH0pCqWz8m4m6x4yJ2o7b1r5dQ=",
        }
    )
    assert queue.default_backend == "default"


@pytest.mark.parametrize("code", ["ThrottlingException", "RequestThrottled", "InternalError"])
def test_throttling_and_server_errors_are_retryable(code: str) -> None:
    error = map_error(client_error(code), where="w", action="ReceiveMessage")
    assert isinstance(error, BackendUnavailableError)
    assert error.retryable is True


def test_any_5xx_is_retryable() -> None:
    error = map_error(client_error("Whatever", status=503), where="w", action="SendMessageBatch")
    assert error.retryable is True


def test_lost_connection_is_retryable() -> None:
    exc = botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    error = map_error(exc, where="w", action="ReceiveMessage")
    assert (error.code, error.retryable) == ("queue/backend-unavailable", True)


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("AccessDenied", "sqs:ReceiveMessage"),
        ("AccessDeniedException", "grant the IAM action"),
        ("AWS.SimpleQueueService.NonExistentQueue", "does not exist"),
        ("QueueDoesNotExist", "get-queue-url"),
        ("InvalidClientTokenId", "AWS_ACCESS_KEY_ID"),
        ("AWS.SimpleQueueService.PurgeQueueInProgress", "60 seconds"),
    ],
)
def test_configuration_faults_are_not_retried_and_say_what_to_do(code: str, fragment: str) -> None:
    error = map_error(client_error(code), where="w", action="ReceiveMessage")
    assert isinstance(error, QueueError)
    assert error.retryable is False
    assert fragment in error.message


def test_missing_credentials_are_a_config_error() -> None:
    error = map_error(botocore.exceptions.NoCredentialsError(), where="w", action="SendMessage")
    assert error.code == "queue/invalid-config"


def test_invalid_parameter_is_a_bad_argument() -> None:
    error = map_error(client_error("InvalidParameterValue"), where="w", action="SendMessage")
    assert isinstance(error, BadArgumentError)


@pytest.mark.parametrize(
    ("code", "message", "stale"),
    [
        ("ReceiptHandleIsInvalid", "", True),
        ("AWS.SimpleQueueService.MessageNotInflight", "", True),
        (
            "InvalidParameterValue",
            "Value x for parameter ReceiptHandle is invalid. Reason: "
            "The receipt handle has expired.",
            True,
        ),
        ("InvalidParameterValue", "VisibilityTimeout is beyond the limit", False),
        ("InternalError", "", False),
    ],
)
def test_stale_receipt_handles_are_recognised(code: str, message: str, stale: bool) -> None:
    assert is_stale(code, message) is stale


def test_public_surface_is_the_backend_and_the_counting_client() -> None:
    import blamequeue_sqs

    assert blamequeue_sqs.__all__ == ["CountingClient", "SqsBackend"]
    assert all(getattr(blamequeue_sqs, name) for name in blamequeue_sqs.__all__)
