"""The plugin hooks of blamequeue (pluggy project and entry-point group ``blamequeue``).

Hooks are synchronous and only register things; all I/O lives in the objects they register.
Each hook gets a ``register`` callback.  A plugin is any module or object with functions marked
``@blamequeue.hookimpl``, made known through an entry point::

    [project.entry-points.blamequeue]
    mystore = "mystore_blamequeue.plugin"

The shipped backends (``local``, ``memory``, ``redis``, ``sqs``) and the deferred ``amqp`` /
``nats`` names come in the same way.  ``BLAMEQUEUE_PLUGINS`` (comma-separated entry-point names)
loads only those; ``BLAMEQUEUE_DISABLE_PLUGINS`` skips the ones it names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

__all__ = ["hookimpl", "hookspec"]

PROJECT = "blamequeue"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def blamequeue_register_protocols(register: Callable[[str, type[Any]], None]) -> None:
    """Register backend classes by protocol name.

    ``register("mystore", MyStoreBackend)`` makes ``{"protocol": "mystore"}`` usable in
    ``Queue(backends=...)``.  The class subclasses :class:`blamequeue.abc.Backend`.  Registering
    a name twice is a configuration error naming both plugins.
    """


@hookspec
def blamequeue_register_audit_sinks(register: Callable[[str, Any], None]) -> None:
    """Register audit sinks by name: objects with ``async def emit(event: AuditEvent)``.

    Every queue sends its audit events to every registered sink, besides the ones passed as
    ``Queue(audit_sinks=...)``.  A sink that raises is logged and skipped; it never stops a job.
    """


@hookspec
def blamequeue_register_sealers(register: Callable[[str, Any], None]) -> None:
    """Register sealers by name: what seals and unseals payloads and errors at rest.

    ``register("kms", KmsSealer)``: the value is a factory called with the configured keys, in
    order (``{key_id: 32 bytes}``, the first one seals), returning an object with
    ``seal(text: str) -> str`` and ``unseal(envelope: str) -> str``; ``unseal`` raises
    ``QueueError("queue/unseal-failed", ...)`` for what it cannot open.  A queue uses it when its
    seal setting names it: ``{"keys": {...}, "sealer": "kms"}``.  The default, ``"secretbox"``
    (pynacl's SecretBox, key ids in the envelope), is core's own plugin.
    """


@hookspec
def blamequeue_register_dev_servers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register, by protocol, what gives a development tool (``blamequeue bench``) a server.

    ``register("redis", factory)``: ``factory(url)`` is called with the server the user named
    (``--url``, ``--endpoint-url``), or with ``None`` to start a throwaway one on loopback, and
    returns an object with ``config`` (a backend config: ``protocol`` and its connection
    options, without ``seal``), ``description`` (one line naming the server), ``cleanup()``
    (stops what it started, or deletes what the tool wrote) and ``requests`` (a request counter
    with ``total``, ``reset()`` and ``snapshot()``, or ``None``).  It raises a
    :class:`~blamequeue.errors.QueueError` whose message says what to install when it cannot
    start a server.  blamequeue-testing registers ``redis`` and ``sqs``
    (:mod:`blamequeue_testing.servers`), so core never imports a backend to find one.
    """
