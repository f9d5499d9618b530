"""The ``redis`` backend: :class:`RedisBackend`, jobs in Redis, every transition one Lua script.

Each method of the contract is one script call per queue it touches (see
:mod:`blamequeue_redis._scripts` for what each script does and :mod:`blamequeue_redis._keys`
for the key layout).  Operations that span queues (the sweep, and ``dlq_retry`` /
``flow_jobs``, which are given only an id) read the registry of queue names, then run the
per-queue script on each queue in one pipeline; each script re-checks the state it acts on.
redis-py exceptions are mapped to :class:`~blamequeue.errors.QueueError` here, at the boundary.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import operator
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeVar, cast
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import anyio.to_thread

from blamequeue.abc import (
    JOB_STATES,
    BackendContext,
    Cancellation,
    CancelOutcome,
    DeadLetters,
    EditOutcome,
    EventRead,
    FlowPolicies,
    GroupLimits,
    JobCursor,
    JobEdits,
    JobEvents,
    JobIds,
    JobState,
    JobWatch,
    Lease,
    LeaseLimits,
    Lifo,
    NewJob,
    NextDue,
    OverlappedLease,
    QueueEvents,
    QueueFeed,
    QueueStats,
    RateLimits,
    Record,
    Records,
    Results,
    Retention,
    RetentionLimits,
    Settlement,
    StoredJob,
    StoredJobPage,
    StoreGuard,
    SweepResult,
    Uniqueness,
    WaitAndLease,
    WorkerRecord,
    check_settlements,
    compact_json,
    record_prefix_bound,
    storable_text,
)
from blamequeue.errors import BadArgumentError, ConfigError, QueueError
from blamequeue_redis._errors import map_redis_error
from blamequeue_redis._keys import KeyLayout, QueueKeys, hash_tag
from blamequeue_redis._limits_script import LEASE_LIMITED
from blamequeue_redis._options import RedisOptions, parse_options
from blamequeue_redis._records_script import (
    RECORD_ADD,
    RECORD_DELETE,
    RECORD_GET,
    RECORD_LIST,
    RECORD_PRUNE,
    RECORD_PUT,
    RECORD_SCRIPTS,
)
from blamequeue_redis._scripts import (
    CANCEL,
    CHANGE_DELAY,
    CHANGE_PRIORITY,
    COUNTS,
    DLQ_LIST,
    DLQ_PURGE,
    DLQ_RETRY,
    ENQUEUE,
    ENQUEUE_ABSENT,
    ENQUEUE_UNIQUE,
    EXTEND,
    FLOW_JOBS,
    GET_JOB,
    LEASE,
    LEASE_AFTER_WAIT,
    LIST_JOBS,
    NEXT_DUE,
    PROMOTE,
    PRUNE,
    PURGE,
    QUEUE_EVENTS_PUBLISH,
    QUEUE_EVENTS_READ,
    RERUN,
    SCRIPTS,
    SETTLE,
    SIZE,
    SWEEP,
    UPDATE_PAYLOAD,
    WAIT_MARK,
    WATCH_MARK,
    WORKER_BEAT,
    WORKER_GONE,
    WORKER_LIST,
    Script,
)
from blamequeue_redis._stats_script import QUEUE_STATS
from blamequeue_redis._streams import StreamTransport, stream_settings
from blamequeue_redis._transport import (
    AsyncioTransport,
    ClientSettings,
    Listener,
    ScriptCall,
    ThreadTransport,
    Transport,
    current_library,
    is_async_client,
)

__all__ = ["RedisBackend"]

log = logging.getLogger("blamequeue")

T = TypeVar("T")

#: Jobs one sweep / purge script call handles at most, so no call blocks Redis for long; the
#: backend calls again while a queue has more.
_BUDGET: Final = 5000
#: Queues visited per pipeline when an operation walks every queue.
_QUEUES_PER_PIPELINE: Final = 500
#: Tokens are ``<16 hex digits>:<queue name>``: a settlement names only its job and token, and
#: the token says which queue's script must check it.
_TOKEN_HEX: Final = 16
#: The most events a queue watch reads at once.
_FEED_BATCH: Final = 1000
#: How long a wait's mark key outlives the wait (a consumer that died mid-wait leaves it).
_MARK_SLACK: Final = 60.0


# Compact, and text as UTF-8 (cjson reads it byte for byte).
_dumps = compact_json


def _text(value: Any) -> Any:
    """Replies from a caller's client may be bytes (``decode_responses=False``)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return value


def _when(at: float | None) -> str:
    return "" if at is None else repr(at)


def _record(kind: str, row: Sequence[Any]) -> Record:
    key, value, expires, pairs = row
    counters = {_text(pairs[i]): float(_text(pairs[i + 1])) for i in range(0, len(pairs), 2)}
    return Record(
        kind=kind,
        key=_text(key),
        value=None if value is None else base64.b64decode(_text(value)),
        counters=counters,
        expires_at=float(_text(expires)) if _text(expires) else None,
    )


def _rows(reply: Any) -> list[list[Any]]:
    text = _text(reply)
    if not text:
        return []
    rows = json.loads(text)
    return rows if isinstance(rows, list) else []


def _opt(value: Any) -> Any:
    # Lua hands a missing hash field back as false.
    return None if value is False or value is None else value


def _stored(queue: str, row: list[Any]) -> StoredJob:
    deps = row[13]
    finished = row[14]
    return StoredJob(
        id=row[0],
        queue=queue,
        state=cast(JobState, row[1]),
        payload=row[2],
        priority=int(row[3]),
        attempts=int(row[4]),
        max_attempts=int(row[5]),
        created_at=float(row[6]),
        available_at=float(row[7]),
        classification=_opt(row[8]),
        trace_id=_opt(row[9]),
        last_error=_opt(row[10]),
        meta=_opt(row[11]),
        flow_id=_opt(row[12]),
        depends_on=tuple(deps.split(" ")) if deps else (),
        finished_at=float(finished) if finished else None,
        group_key=_opt(row[16]) if len(row) > 16 else None,
        result=_opt(row[17]) if len(row) > 17 else None,
    )


def _edit_outcome(queue: str, reply: Any) -> EditOutcome | None:
    """The outcome in a job edit script's reply: ``[applied, state before, row after]``, or
    ``''`` when the queue has no such job (``None``)."""
    if not isinstance(reply, list | tuple) or len(reply) != 3:
        return None
    applied, was, text = reply
    job = _stored(queue, json.loads(_text(text)))
    return EditOutcome(job=job, applied=int(applied) == 1, was=cast(JobState, _text(was)))


def _spelled(value: str | None) -> str:
    """An optional field as ``UPDATE_PAYLOAD`` compares it: ``''`` for none, else ``'='`` and
    the value (so an empty value is not none)."""
    return "" if value is None else "=" + value


def _leases_after_wait(queue: str, token: str, reply: Any) -> list[Lease]:
    """The leases in ``LEASE_AFTER_WAIT``'s reply: ``[rows (JSON), expires_at]``."""
    rows, expires = reply
    if not _text(rows):
        return []
    expires_at = float(_text(expires))
    return [
        Lease(job=_stored(queue, row), token=token, expires_at=expires_at) for row in _rows(rows)
    ]


#: What a job shares with the rest of its batch when the core enqueues one call's payloads
#: (everything but the id and the payload).
_SHARED_FIELDS = operator.attrgetter(
    "priority",
    "created_at",
    "available_at",
    "max_attempts",
    "parked",
    "flow_id",
    "depends_on",
    "classification",
    "trace_id",
    "meta",
    "group_key",
    "lifo",
    "on_dependency_failure",
    "dependants_error",
)


def _enqueue_batch(jobs: Sequence[NewJob], optional: Sequence[str] = ()) -> list[Any]:
    """The jobs as the ENQUEUE script reads them: ``[ids, payloads, shared, rows]``.  A batch
    whose jobs differ only in id and payload (one ``enqueue_many`` call) sends the rest of a
    row once as ``shared`` (``rows`` 0); otherwise ``rows`` holds ``ENQUEUE_WIDTH`` values per
    job (``shared`` 0).  ``optional``: more (field, value) pairs for each job."""
    ids = [job.id for job in jobs]
    payloads = [job.payload for job in jobs]
    first = _SHARED_FIELDS(jobs[0])
    if all(map(first.__eq__, map(_SHARED_FIELDS, jobs))):
        return [ids, payloads, _enqueue_row(jobs[0], optional, {}), 0]
    spelled: dict[float, str] = {}  # a batch's jobs share their times: each spelled once
    rows: list[Any] = []
    for job in jobs:
        rows += _enqueue_row(job, optional, spelled)
    return [ids, payloads, 0, rows]


def _enqueue_row(job: NewJob, optional: Sequence[str], spelled: dict[float, str]) -> list[Any]:
    """One job's ``ENQUEUE_WIDTH`` values after its id and payload."""
    fields = list(optional)
    if job.classification is not None:
        fields += ("classification", job.classification)
    if job.trace_id is not None:
        fields += ("trace_id", job.trace_id)
    if job.meta is not None:
        fields += ("meta", job.meta)
    if job.group_key is not None:
        fields += ("group_key", job.group_key)
    # Flow policies (lua/flow_release.lua): stored only when not the defaults, so the jobs
    # that wait (every job outside a flow among them) carry neither field.
    if job.on_dependency_failure != "wait":
        fields += ("on_dependency_failure", job.on_dependency_failure)
    if job.dependants_error is not None:
        fields += ("dependants_error", job.dependants_error)
    created, available = job.created_at, job.available_at
    return [
        job.priority,
        spelled.get(created) or spelled.setdefault(created, repr(created)),
        spelled.get(available) or spelled.setdefault(available, repr(available)),
        job.max_attempts,
        job.parked,
        job.flow_id or "",
        " ".join(job.depends_on),
        fields or 0,
        job.lifo,
    ]


def _token_queue(token: str) -> str | None:
    """The queue a lease token was issued for (None: not one of ours, so it owns nothing)."""
    if len(token) <= _TOKEN_HEX or token[_TOKEN_HEX] != ":":
        return None
    return token[_TOKEN_HEX + 1 :]


class RedisBackend(
    Cancellation,
    DeadLetters,
    FlowPolicies,
    GroupLimits,
    JobEdits,
    JobEvents,
    JobIds,
    Lifo,
    NextDue,
    OverlappedLease,
    QueueEvents,
    RateLimits,
    Records,
    Results,
    RetentionLimits,
    Uniqueness,
    WaitAndLease,
):
    """Jobs in Redis (protocol ``redis``): atomic Lua transitions, blocking waits, Cluster-safe.

    Options:

    * ``url`` (required unless ``client``): ``redis://[[user]:password@]host:port/db``,
      ``rediss://...`` (TLS) or ``unix:///path/redis.sock?db=0``.  TLS settings such as
      ``ssl_ca_certs`` or ``ssl_cert_reqs`` ride in the URL's query string.
    * ``username`` / ``password``: credentials (an ACL user), instead of putting them in the URL.
    * ``tls``: ``True`` forces TLS (``redis://`` becomes ``rediss://``); inferred from
      ``rediss://`` when left out.
    * ``key_prefix``: the prefix of every key (``"blamequeue:queue"``); several apps can share a
      server with different prefixes.
    * ``cluster``: ``True`` for Redis Cluster, ``False`` for one server; left out, the backend
      asks the server at ``open()`` (``INFO cluster``).
    * ``client``: bring your own redis-py client (``redis.asyncio.Redis`` / its
      ``RedisCluster`` on asyncio, or the sync ``redis.Redis`` / ``RedisCluster`` on either
      loop).  Never closed by the backend; not combinable with the connection options.
    * ``trio_transport``: on trio, ``"streams"`` (the default: the backend's own RESP over anyio
      streams, for a single server) or ``"threads"`` (redis-py's sync client in worker threads,
      always used for a Redis Cluster or a client of the caller's).

    On asyncio the backend uses redis-py's asyncio client; on trio, its own connections over
    anyio streams (see :mod:`blamequeue_redis._transport` and :mod:`blamequeue_redis._streams`).
    Payloads leave the process, so the queue refuses to start without a seal key unless
    ``seal=False``.
    """

    protocol: ClassVar[str] = "redis"
    requires_seal_key: ClassVar[bool] = True

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self._config: RedisOptions = parse_options(options)
        self._layout = KeyLayout(self._config.key_prefix)
        self._record_kinds: set[str] = set()  # kinds registered for the sweep already
        where = self._config.shown_url or "bring-your-own client"
        self._where = f"redis backend {context.name!r} ({where})"
        self._boundary = StoreGuard[Transport](
            where=self._where,
            map_error=lambda exc: map_redis_error(
                exc, where=self._where, secrets=self._config.secrets
            ),
        )
        self._queues: dict[str, tuple[QueueKeys, tuple[str, ...]]] = {}
        # On a cluster the registry lives in another slot than the queue's keys, so the
        # backend adds a queue to it itself, once per queue per process.
        self._registered: set[str] = set()

    def __repr__(self) -> str:  # never the password: the URL as messages show it
        return f"<RedisBackend {self._where}>"

    @property
    def key_layout(self) -> KeyLayout:
        """The key names this backend uses (see ``docs/backends/redis.md``)."""
        return self._layout

    @property
    def transport(self) -> Transport | None:
        """The transport in use (``None`` until :meth:`open`)."""
        return self._boundary.handle

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        if self._boundary.is_open:
            return
        self._boundary.opened(await self._boundary.call(self._connect()))

    async def _connect(self) -> Transport:
        config = self._config
        library = current_library()
        transport: Transport
        if config.client is not None:
            if is_async_client(config.client):
                if library != "asyncio":
                    raise ConfigError(
                        "queue/invalid-config",
                        f"{self._where}: option 'client' is a redis.asyncio client, which runs "
                        f"only on asyncio, but this queue runs on {library}; pass a sync "
                        f"redis.Redis client (used from worker threads) or a 'url'",
                    )
                transport = AsyncioTransport(
                    config.client, owned=False, reply_poll=config.reply_poll_us / 1e6
                )
            else:
                transport = ThreadTransport(config.client, owned=False)
        else:
            assert config.url is not None
            cluster = config.cluster
            if cluster is None:
                cluster = await self._probe_cluster(library, config)
            settings = ClientSettings(
                url=config.url,
                username=config.username,
                password=config.password,
                cluster=cluster,
            )
            if library == "asyncio":
                transport = AsyncioTransport(
                    settings.asyncio_client(), owned=True, reply_poll=config.reply_poll_us / 1e6
                )
            else:
                # The sync cluster client discovers the cluster as it is built: I/O, so in a
                # worker thread.
                client = await anyio.to_thread.run_sync(settings.sync_client)
                transport = self._trio_transport(client, cluster)
        try:
            await transport.load((*SCRIPTS, LEASE_LIMITED, QUEUE_STATS, *RECORD_SCRIPTS))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await transport.aclose()
            raise
        return transport

    def _trio_transport(self, client: Any, cluster: bool) -> Transport:
        """The stream transport for a single server unless ``trio_transport`` is ``"threads"``
        or the settings need redis-py's own connections; else the thread transport."""
        if not cluster and self._config.trio_transport == "streams":
            settings = stream_settings(client)
            if settings is not None:
                return StreamTransport(
                    client, settings, owned=True, reply_poll=self._config.reply_poll_us / 1e6
                )
        return ThreadTransport(client, owned=True)

    async def _probe_cluster(self, library: str, config: RedisOptions) -> bool:
        """Whether ``url`` points at a Redis Cluster node (``INFO cluster``)."""
        assert config.url is not None
        if urlsplit(config.url).scheme.lower() == "unix":
            return False
        settings = ClientSettings(
            url=config.url, username=config.username, password=config.password, cluster=False
        )
        probe: Transport
        if library == "asyncio":
            probe = AsyncioTransport(settings.asyncio_client(), owned=True)
        else:
            probe = self._trio_transport(settings.sync_client(), cluster=False)
        try:
            info = await probe.command("INFO", "cluster")
        finally:
            with anyio.CancelScope(shield=True):
                await probe.aclose()
        if isinstance(info, Mapping):
            return str(info.get("cluster_enabled", 0)) == "1"
        return "cluster_enabled:1" in str(_text(info))

    async def close(self) -> None:
        transport = self._boundary.closed()
        self._registered.clear()
        if transport is not None:
            try:
                await transport.aclose()
            except Exception as exc:
                raise self._boundary.mapped(exc) from exc

    # -- the Redis boundary ----------------------------------------------------------------
    @property
    def overlapped_lease(self) -> bool:
        # Worker threads (the thread transport) spend this process's CPU on every call: halves
        # measured slower there.
        return isinstance(self.transport, (AsyncioTransport, StreamTransport))

    def _keys(self, queue: str) -> tuple[QueueKeys, tuple[str, ...]]:
        found = self._queues.get(queue)
        if found is None:
            keys = self._layout.queue(queue)
            found = self._queues[queue] = (keys, keys.script_keys())
        return found

    async def _script(self, script: Script, queue: str, args: Sequence[Any]) -> Any:
        keys, script_keys = self._keys(queue)
        return await self._boundary.call(
            self._boundary.require().script(script, script_keys, (keys.base, *args))
        )

    def _call(self, script: Script, queue: str, args: Sequence[Any]) -> ScriptCall:
        keys, script_keys = self._keys(queue)
        return (script, script_keys, (keys.base, *args))

    async def _queue_names(self) -> list[str]:
        names = await self._boundary.call(
            self._boundary.require().command("SMEMBERS", self._layout.registry)
        )
        return sorted(_text(name) for name in names)

    async def _each_queue(
        self, script: Script, args: Callable[[str], Sequence[Any]]
    ) -> list[tuple[str, Any]]:
        """Run ``script`` on every registered queue (pipelined); ``(queue, reply)`` pairs."""
        transport = self._boundary.require()
        names = await self._queue_names()
        out: list[tuple[str, Any]] = []
        for start in range(0, len(names), _QUEUES_PER_PIPELINE):
            chunk = names[start : start + _QUEUES_PER_PIPELINE]
            calls = [self._call(script, name, args(name)) for name in chunk]
            replies = await self._boundary.call(transport.scripts(calls))
            out.extend(zip(chunk, replies, strict=True))
        return out

    # -- producing -------------------------------------------------------------------------
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        if not jobs:
            return
        transport = self._boundary.require()
        by_queue: dict[str, list[NewJob]] = {}
        for job in jobs:
            if job.depends_on and any(not dep or " " in dep for dep in job.depends_on):
                raise BadArgumentError(
                    "queue/bad-argument",
                    f"{self._where}: dependency ids must be non-empty and without spaces, "
                    f"got {job.depends_on!r}",
                )
            by_queue.setdefault(job.queue, []).append(job)
        # One script per queue: a batch is atomic per queue (the core enqueues one queue at a
        # time; a cluster could not make several queues' slots atomic anyway).
        for queue, batch in by_queue.items():
            keys, script_keys = await self._enqueue_keys(queue)
            args = (keys.base, queue, _dumps(_enqueue_batch(batch)))
            await self._boundary.call(transport.script(ENQUEUE, script_keys, args))

    async def _enqueue_keys(self, queue: str) -> tuple[QueueKeys, tuple[str, ...]]:
        """The keys of ``queue`` and the ``KEYS`` of its enqueue scripts, which register the
        queue (on a cluster the registry lives in another slot: registered here, once)."""
        keys, script_keys = self._keys(queue)
        transport = self._boundary.require()
        if not transport.cluster:
            return keys, (*script_keys, self._layout.registry)
        if queue not in self._registered:
            await self._boundary.call(transport.command("SADD", self._layout.registry, queue))
            self._registered.add(queue)
        return keys, script_keys

    async def enqueue_absent(self, jobs: Sequence[NewJob]) -> list[bool]:
        # Ids are looked for among the jobs of each job's queue: a queue's keys live in one
        # cluster slot, so that is what one script can check atomically (docs/backends/redis.md).
        transport = self._boundary.require()
        by_queue: dict[str, list[int]] = {}
        for n, job in enumerate(jobs):
            by_queue.setdefault(job.queue, []).append(n)
        answers = [False] * len(jobs)
        for queue, positions in by_queue.items():
            keys, script_keys = await self._enqueue_keys(queue)
            batch = _enqueue_batch([jobs[n] for n in positions])
            args = (keys.base, queue, _dumps(batch))
            reply = _text(
                await self._boundary.call(transport.script(ENQUEUE_ABSENT, script_keys, args))
            )
            for n, flag in zip(positions, reply, strict=True):
                answers[n] = flag == "1"
        return answers

    async def enqueue_unique(
        self, job: NewJob, *, unique_key: str, hold_until: float | None, now: float
    ) -> str:
        keys, script_keys = await self._enqueue_keys(job.queue)
        optional: list[str] = ["unique_key", unique_key]
        ttl = ""
        if hold_until is not None:
            optional += ("unique_until", repr(hold_until))
            ttl = str(max(1, math.ceil((hold_until - now) * 1000)))
        batch = _enqueue_batch([job], optional)
        args = (keys.base, job.queue, _dumps(batch), unique_key, repr(now), ttl)
        reply = await self._boundary.call(
            self._boundary.require().script(ENQUEUE_UNIQUE, script_keys, args)
        )
        # The script answers the holder's id, or how many jobs it stored (then ours holds it).
        return job.id if isinstance(reply, int) else str(_text(reply))

    # -- consuming -------------------------------------------------------------------------
    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        if limit <= 0:
            self._boundary.require()
            return []
        # One token per call: the fence checks (id, token) pairs, and a job is leased again only
        # by a later call with another token.
        token = f"{secrets.token_hex(_TOKEN_HEX // 2)}:{queue}"
        expires_at = now + lease_seconds
        reply = await self._script(LEASE, queue, (now, limit, token, expires_at))
        return [
            Lease(job=_stored(queue, row), token=token, expires_at=expires_at)
            for row in _rows(reply)
        ]

    async def lease_limited(
        self, queue: str, *, limit: int, now: float, lease_seconds: float, limits: LeaseLimits
    ) -> list[Lease]:
        """:meth:`lease` under fleet-wide limits, in one script (see
        :mod:`blamequeue_redis._limits_script`)."""
        if limit <= 0:
            self._boundary.require()
            return []
        token = f"{secrets.token_hex(_TOKEN_HEX // 2)}:{queue}"
        expires_at = now + lease_seconds
        args = (
            now,
            limit,
            token,
            expires_at,
            "" if limits.group_concurrency is None else limits.group_concurrency,
            "" if limits.rate_max is None else limits.rate_max,
            "" if limits.rate_per_seconds is None else repr(limits.rate_per_seconds),
        )
        reply = await self._script(LEASE_LIMITED, queue, args)
        return [
            Lease(job=_stored(queue, row), token=token, expires_at=expires_at)
            for row in _rows(reply)
        ]

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        if not settlements:
            return []
        self._boundary.require()
        check_settlements(settlements)  # repeats are stale: the script applies a token once
        by_queue: dict[str, list[int]] = {}
        for n, item in enumerate(settlements):
            queue = _token_queue(item.token)
            if queue is not None:
                by_queue.setdefault(queue, []).append(n)
        applied = [False] * len(settlements)
        calls: list[ScriptCall] = []
        for queue, indexes in by_queue.items():
            items = []
            for n in indexes:
                item = settlements[n]
                items.append(
                    (
                        item.job_id,
                        item.token,
                        item.outcome,
                        repr(item.at),
                        False if item.error is None else storable_text(item.error),
                        item.keep,
                        False if item.result is None else item.result,
                    )
                )
            calls.append(self._call(SETTLE, queue, (now, _dumps(items))))
        replies = await self._run_calls(calls)
        for indexes, reply in zip(by_queue.values(), replies, strict=True):
            flags = _text(reply)
            for n, flag in zip(indexes, flags, strict=True):
                applied[n] = flag == "1"
        return applied

    async def _run_calls(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """One call directly, several pipelined."""
        transport = self._boundary.require()
        if len(calls) == 1:
            return [await self._boundary.call(transport.script(*calls[0]))]
        return await self._boundary.call(transport.scripts(calls))

    async def extend(
        self, leases: Sequence[tuple[str, str]], *, expires_at: float
    ) -> list[bool | None]:
        if not leases:
            return []
        self._boundary.require()
        by_queue: dict[str, list[int]] = {}
        for n, (_job_id, token) in enumerate(leases):
            queue = _token_queue(token)
            if queue is not None:
                by_queue.setdefault(queue, []).append(n)
        held: list[bool | None] = [False] * len(leases)
        calls = [
            self._call(EXTEND, queue, (expires_at, _dumps([leases[n] for n in indexes])))
            for queue, indexes in by_queue.items()
        ]
        replies = await self._run_calls(calls)
        for indexes, reply in zip(by_queue.values(), replies, strict=True):
            for n, flag in zip(indexes, _text(reply), strict=True):
                held[n] = True if flag == "1" else None if flag == "c" else False
        return held

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        transport = self._boundary.require()
        cutoff = now - retain_done
        expired: list[StoredJob] = []
        dead: list[StoredJob] = []
        pruned = 0
        pending = await self._queue_names()
        while pending:
            chunk, pending = pending[:_QUEUES_PER_PIPELINE], pending[_QUEUES_PER_PIPELINE:]
            args = (now, expired_error, cutoff, _BUDGET)
            calls = [self._call(SWEEP, name, args) for name in chunk]
            replies = await self._boundary.call(transport.scripts(calls))
            again: list[str] = []
            for name, reply in zip(chunk, replies, strict=True):
                expired += (_stored(name, row) for row in _rows(reply[0]))
                dead += (_stored(name, row) for row in _rows(reply[1]))
                pruned += int(reply[2])
                if int(reply[3]):
                    again.append(name)
            pending = again + pending
        await self._prune_records(now)
        return SweepResult(repended=len(expired), expired=expired, dead=dead, pruned=pruned)

    async def prune_finished(self, *, now: float, retention: Retention) -> int:
        """One script per queue (pipelined), each deleting at most ``_BUDGET`` jobs; a queue
        whose budget ran out is run again."""
        transport = self._boundary.require()
        cutoff = retention.dead_cutoff(now)
        args = (
            "" if cutoff is None else repr(cutoff),
            "" if retention.dead_count is None else retention.dead_count,
            "" if retention.done_count is None else retention.done_count,
            _BUDGET,
        )
        pruned = 0
        pending = await self._queue_names()
        while pending:
            chunk, pending = pending[:_QUEUES_PER_PIPELINE], pending[_QUEUES_PER_PIPELINE:]
            calls = [self._call(PRUNE, name, args) for name in chunk]
            replies = await self._boundary.call(transport.scripts(calls))
            again = [name for name, reply in zip(chunk, replies, strict=True) if int(reply[1])]
            pruned += sum(int(reply[0]) for reply in replies)
            pending = again + pending
        return pruned

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Block on the queue's signal list (``BLPOP``) until a transition of another process
        (or this one) makes a job due, or ``timeout`` seconds pass (at most 30 s a call)."""
        transport = self.transport
        if transport is None:
            await anyio.sleep(max(0.0, timeout))
            return
        keys, _ = self._keys(queue)
        await self._boundary.call(transport.wait(keys.signal, max(0.0, timeout)))

    async def wait_and_lease(
        self, queue: str, *, timeout: float, limit: int, now: float, lease_seconds: float
    ) -> list[Lease] | None:
        """The blocking wait of :meth:`wait_for_work` and the lease in one exchange: Redis runs
        the lease the moment the wait takes a wake token (see ``LEASE_AFTER_WAIT``)."""
        transport = self.transport
        if transport is None or limit <= 0:
            await self.wait_for_work(queue, timeout=timeout)
            return None
        keys, _ = self._keys(queue)
        secret = secrets.token_hex(_TOKEN_HEX // 2)
        token = f"{secret}:{queue}"
        mark = f"{keys.base}wake:{secret}"
        ttl_ms = int((max(0.0, timeout) + _MARK_SLACK) * 1000)
        before = self._call(WAIT_MARK, queue, (mark, ttl_ms))
        clock = self.context.clock

        def after() -> ScriptCall:
            # The lease's clock: ours as the wait is sent (`now` is older: on trio the sending
            # happens in a worker thread), moved on by the time the wait took.
            sent_at = clock.now()
            return self._call(LEASE_AFTER_WAIT, queue, (sent_at, limit, token, lease_seconds, mark))

        async def give_back(reply: Any) -> None:
            leases = _leases_after_wait(queue, token, reply)
            if leases:
                at = self.context.clock.now()
                await self.settle(
                    [
                        Settlement(job_id=lease.job.id, token=token, outcome="release", at=at)
                        for lease in leases
                    ],
                    now=at,
                )

        reply = await self._boundary.call(
            transport.wait_between(keys.signal, mark, max(0.0, timeout), before, after, give_back)
        )
        if reply is None:
            return None
        return _leases_after_wait(queue, token, reply)

    # -- results and progress ----------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def watch_job(self, job_id: str) -> AsyncIterator[JobWatch]:
        """Subscribes (a pub/sub connection of its own) to the job's events channel, where
        ``ctx.progress`` publishes, and to its queue's ``settled`` channel, where the settle
        script publishes the ids of the jobs that ended, atomically with their settlement."""
        transport = self._boundary.require()
        channels = [self._layout.events_prefix + job_id]
        stored = await self.get_job(job_id)
        if stored is not None:
            channels.append(self._keys(stored.queue)[0].base + "settled")
        try:
            listener = await self._boundary.call(transport.listen(channels))
        except QueueError as exc:
            if exc.retryable:
                raise
            # An ACL user without the events channels: results still work, by polling.
            log.warning("%s: cannot subscribe to job events, polling instead: %s", self._where, exc)
            yield JobWatch(self.context.clock)
            return
        try:
            yield _RedisWatch(self.context.clock, job_id, listener, self._boundary.call)
        finally:
            await listener.aclose()

    async def publish_progress(self, job_id: str, event: str, *, now: float) -> None:
        transport = self._boundary.require()
        channel = self._layout.events_prefix + job_id
        await self._boundary.call(transport.command("PUBLISH", channel, "p" + event))

    # -- queue events (Queue.watch) --------------------------------------------------------
    async def publish_events(self, queue: str, events: Sequence[str], *, now: float) -> None:
        if events:
            await self._script(QUEUE_EVENTS_PUBLISH, queue, events)

    async def mark_watched(self, queue: str, *, until: float, now: float) -> None:
        await self._script(WATCH_MARK, queue, (max(1, int((until - now) * 1000)),))

    async def is_watched(self, queue: str, *, now: float) -> bool:
        keys, _ = self._keys(queue)
        transport = self._boundary.require()
        return bool(await self._boundary.call(transport.command("EXISTS", keys.base + "watched")))

    @contextlib.asynccontextmanager
    async def watch_queue(self, queue: str) -> AsyncIterator[QueueFeed]:
        """A cursor in the queue's ``events`` stream (the ``n`` of the last entry read): an
        ``XREAD BLOCK`` on a connection of its own waits for more, then one script reads
        them and whether the trim passed the cursor."""
        keys, _ = self._keys(queue)
        transport = self._boundary.require()
        last = await self._boundary.call(
            transport.command("XREVRANGE", keys.base + "events", "+", "-", "COUNT", "1")
        )
        after = int(_text(last[0][0]).split("-", 1)[0]) if last else 0
        yield _RedisFeed(self, queue, keys.base + "events", after)

    async def _events_after(self, queue: str, after: int) -> tuple[bool, int, list[str]]:
        reply = await self._script(QUEUE_EVENTS_READ, queue, (after, _FEED_BATCH))
        return bool(int(reply[0])), int(reply[1]), [_text(event) for event in reply[2:]]

    # -- inspecting and operating ---------------------------------------------------------
    async def size(self, queue: str) -> int:
        return int(await self._script(SIZE, queue, ()))

    async def next_due(self, queue: str, *, now: float) -> float | None:
        due = await self._script(NEXT_DUE, queue, (now,))
        return None if due is None else float(due)

    async def purge(self, queue: str) -> int:
        return await self._delete_in_slices(PURGE, queue)

    async def _delete_in_slices(self, script: Script, queue: str) -> int:
        """Run a deleting ``script`` (``PURGE``, ``DLQ_PURGE``) until it says nothing is left:
        each call deletes at most ``_BUDGET`` jobs, so none blocks Redis for long.  Returns
        how many jobs it counted (live ones for ``PURGE``)."""
        deleted = 0
        while True:
            count, more = await self._script(script, queue, (_BUDGET,))
            deleted += int(count)
            if not int(more):
                return deleted

    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        if limit is not None and limit <= 0:
            self._boundary.require()
            return []
        last = -1 if limit is None else limit - 1
        reply = await self._script(DLQ_LIST, queue, (last,))
        return [_stored(queue, row) for row in _rows(reply)]

    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        # Given only an id: try every queue; the script moves the job only where it is dead.
        for queue, reply in await self._each_queue(DLQ_RETRY, lambda _: (job_id, now)):
            text = _text(reply)
            if text:
                return _stored(queue, json.loads(text))
        return None

    async def cancel(self, job_id: str, *, now: float) -> CancelOutcome | None:
        # Given only an id: the script runs on every queue (pipelined) and acts only where the
        # job is; each run is atomic on its own.
        if not job_id:
            raise BadArgumentError("queue/bad-argument", "job id must be a non-empty string")
        for queue, reply in await self._each_queue(CANCEL, lambda _: (job_id, now)):
            if isinstance(reply, list | tuple) and len(reply) == 2:
                cancelled, text = reply
                job = _stored(queue, json.loads(_text(text)))
                return CancelOutcome(job=job, cancelled=int(cancelled) == 1)
        return None

    # -- job edits ---------------------------------------------------------------------------
    async def _edit(self, script: Script, job_id: str, args: Sequence[Any]) -> EditOutcome | None:
        """Run an edit ``script`` given only the job's id: on every queue (pipelined), as
        :meth:`cancel` does; it acts only where the job is, each run atomic on its own."""
        if not job_id:
            raise BadArgumentError("queue/bad-argument", "job id must be a non-empty string")
        for queue, reply in await self._each_queue(script, lambda _: (job_id, *args)):
            outcome = _edit_outcome(queue, reply)
            if outcome is not None:
                return outcome
        return None

    async def promote(self, job_id: str, *, now: float) -> EditOutcome | None:
        return await self._edit(PROMOTE, job_id, (repr(now),))

    async def change_delay(
        self, job_id: str, *, available_at: float, now: float
    ) -> EditOutcome | None:
        return await self._edit(CHANGE_DELAY, job_id, (repr(available_at), repr(now)))

    async def change_priority(self, job_id: str, *, priority: int) -> EditOutcome | None:
        return await self._edit(CHANGE_PRIORITY, job_id, (priority,))

    async def update_payload(
        self, job_id: str, payload: str, *, queue: str, flow_id: str | None, meta: str | None
    ) -> EditOutcome | None:
        # The place names the queue: only its script runs.  A job of that id elsewhere (purged
        # and enqueued again on another queue) has another place: not applied, read as it is.
        if not job_id:
            raise BadArgumentError("queue/bad-argument", "job id must be a non-empty string")
        args = (job_id, payload, _spelled(flow_id), _spelled(meta))
        outcome = _edit_outcome(queue, await self._script(UPDATE_PAYLOAD, queue, args))
        if outcome is not None:
            return outcome
        found = await self.get_job(job_id)
        return None if found is None else EditOutcome(job=found, applied=False, was=found.state)

    async def rerun(self, job_id: str, *, now: float) -> EditOutcome | None:
        return await self._edit(RERUN, job_id, (repr(now),))

    async def dlq_size(self, queue: str) -> int:
        keys, _ = self._keys(queue)
        return int(await self._boundary.call(self._boundary.require().command("ZCARD", keys.dead)))

    async def dlq_purge(self, queue: str) -> int:
        return await self._delete_in_slices(DLQ_PURGE, queue)

    # -- flows -----------------------------------------------------------------------------
    async def flow_jobs(self, flow_id: str) -> list[StoredJob]:
        jobs: list[StoredJob] = []
        for queue, reply in await self._each_queue(FLOW_JOBS, lambda _: (flow_id,)):
            jobs += (_stored(queue, row) for row in _rows(reply))
        return jobs

    # -- inspection ------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> StoredJob | None:
        # Given only an id: look in every queue (one pipelined script per queue).
        if not job_id:
            raise BadArgumentError("queue/bad-argument", "job id must be a non-empty string")
        for queue, reply in await self._each_queue(GET_JOB, lambda _: (job_id,)):
            text = _text(reply)
            if text:
                return _stored(queue, json.loads(text))
        return None

    async def list_jobs(
        self, queue: str, *, state: JobState | None, limit: int, cursor: str | None
    ) -> StoredJobPage:
        if state is not None and state not in JOB_STATES:
            raise BadArgumentError(
                "queue/bad-argument", f"state must be one of {list(JOB_STATES)}, got {state!r}"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise BadArgumentError(
                "queue/bad-argument", f"limit must be an integer >= 1, got {limit!r}"
            )
        start = JobCursor.decode(cursor) if cursor is not None else None
        states = list(JOB_STATES) if state is None else [state]
        after = -1
        if start is not None:
            if start.state not in states:
                return StoredJobPage(jobs=[], next_cursor=None)
            states = states[states.index(start.state) :]
            after = start.seq
        reply = await self._script(LIST_JOBS, queue, (" ".join(states), after, limit))
        rows = _rows(reply)
        jobs = [_stored(queue, row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = rows[limit - 1]
            next_cursor = JobCursor(state=cast(JobState, last[1]), seq=int(last[15])).encode()
        return StoredJobPage(jobs=jobs, next_cursor=next_cursor)

    async def queue_counts(self) -> dict[str, dict[JobState, int]]:
        counts: dict[str, dict[JobState, int]] = {}
        for queue, reply in await self._each_queue(COUNTS, lambda _: ()):
            numbers = [int(n) for n in reply]
            if any(numbers):
                counts[queue] = dict(zip(JOB_STATES, numbers, strict=True))
        return counts

    async def queue_stats(self, queue: str, *, now: float) -> QueueStats:
        delayed, oldest = await self._script(QUEUE_STATS, queue, (repr(now),))
        oldest = _text(oldest)
        return QueueStats(delayed=int(delayed), oldest_due_at=float(oldest) if oldest else None)

    # -- shared records (key layout: blamequeue_redis._records_script) -------------------------
    def _record_base(self, kind: str) -> str:
        # Starts with the prefix, so an ACL user's key pattern of the prefix covers it.
        return f"{self._layout.prefix}:rec:{{{hash_tag(kind)}}}"

    def _record_kinds_key(self) -> str:
        return f"{self._layout.prefix}:rec-kinds"

    async def _record_script(self, script: Script, kind: str, args: Sequence[Any]) -> Any:
        transport = self._boundary.require()
        base = self._record_base(kind)
        if kind not in self._record_kinds:
            # The registry lives in another slot: written apart, once per kind and process,
            # before the first record of the kind (a sweep must find every kind it prunes).
            await self._boundary.call(transport.command("SADD", self._record_kinds_key(), kind))
            self._record_kinds.add(kind)
        return await self._boundary.call(transport.script(script, (base + ":keys",), (base, *args)))

    async def record_put(
        self,
        kind: str,
        key: str,
        value: bytes,
        *,
        now: float,
        expires_at: float | None = None,
        if_absent: bool = False,
    ) -> bool:
        # Values travel base64-encoded: the backend's client decodes replies as UTF-8.
        encoded = base64.b64encode(value).decode("ascii")
        args = (key, encoded, repr(now), _when(expires_at), "1" if if_absent else "")
        return int(await self._record_script(RECORD_PUT, kind, args)) == 1

    async def record_get(self, kind: str, key: str, *, now: float) -> Record | None:
        return (await self.record_get_many(kind, [key], now=now))[0]

    async def record_get_many(
        self, kind: str, keys: Sequence[str], *, now: float
    ) -> list[Record | None]:
        reply = await self._record_script(RECORD_GET, kind, (repr(now), *keys))
        return [None if row is None else _record(kind, row) for row in reply]

    async def record_list(
        self, kind: str, *, now: float, prefix: str = "", limit: int | None = None
    ) -> list[Record]:
        low = f"[{prefix}" if prefix else "-"
        bound = record_prefix_bound(prefix)
        high = "+" if bound is None else f"({bound}"
        args = (repr(now), low, high, -1 if limit is None else limit)
        reply = await self._record_script(RECORD_LIST, kind, args)
        return [_record(kind, row) for row in reply if _text(row[0]).startswith(prefix)]

    async def record_add(
        self,
        kind: str,
        key: str,
        deltas: Mapping[str, float],
        *,
        now: float,
        expires_at: float | None = None,
        once: str | None = None,
    ) -> tuple[Record, bool]:
        pairs = [item for name, delta in deltas.items() for item in (name, repr(delta))]
        args = (key, repr(now), _when(expires_at), once or "", *pairs)
        applied, row = await self._record_script(RECORD_ADD, kind, args)
        return _record(kind, row), int(applied) == 1

    async def record_delete(self, kind: str, key: str) -> bool:
        return int(await self._record_script(RECORD_DELETE, kind, (key,))) == 1

    async def _prune_records(self, now: float) -> None:
        transport = self._boundary.require()
        kinds = await self._boundary.call(transport.command("SMEMBERS", self._record_kinds_key()))
        calls = []
        for kind in sorted(_text(k) for k in kinds):
            base = self._record_base(kind)
            calls.append((RECORD_PRUNE, (base + ":keys",), (base, repr(now))))
        if calls:
            await self._boundary.call(transport.scripts(calls))

    def _worker_keys(self) -> tuple[str, str]:
        # One fixed hash tag, so both keys share a slot on a cluster; after the prefix, so an
        # ACL user's key pattern of the prefix covers them (a queue named "workers" shares
        # the slot, never a key: queues have no "records" or "beats" key).
        return (
            f"{self._layout.prefix}:{{workers}}:records",
            f"{self._layout.prefix}:{{workers}}:beats",
        )

    async def worker_heartbeat(self, worker: WorkerRecord) -> None:
        transport = self._boundary.require()
        records, beats = self._worker_keys()
        record = _dumps(
            [
                worker.id,
                worker.queue,
                worker.host,
                worker.pid,
                worker.concurrency,
                repr(worker.started_at),
                repr(worker.heartbeat_at),
                worker.in_flight,
                worker.succeeded,
                worker.failed,
            ]
        )
        args = (worker.id, repr(worker.heartbeat_at), record)
        await self._boundary.call(transport.script(WORKER_BEAT, (records, beats), args))

    async def worker_gone(self, worker_id: str) -> None:
        transport = self._boundary.require()
        records, beats = self._worker_keys()
        await self._boundary.call(transport.script(WORKER_GONE, (records, beats), (worker_id,)))

    async def list_workers(self, *, alive_since: float) -> list[WorkerRecord]:
        transport = self._boundary.require()
        records, beats = self._worker_keys()
        # One script: pruning and reading see the same registry (a heartbeat landing between
        # them is never pruned).
        values = await self._boundary.call(
            transport.script(WORKER_LIST, (records, beats), (repr(alive_since),))
        )
        workers: list[WorkerRecord] = []
        for value in values:
            r = json.loads(_text(value))
            worker = WorkerRecord(
                id=r[0],
                queue=r[1],
                host=r[2],
                pid=int(r[3]),
                concurrency=int(r[4]),
                started_at=float(r[5]),
                heartbeat_at=float(r[6]),
                in_flight=int(r[7]),
                succeeded=int(r[8]),
                failed=int(r[9]),
            )
            if worker.heartbeat_at >= alive_since:
                workers.append(worker)
        return sorted(workers, key=lambda w: (w.queue, w.started_at, w.id))


class _RedisFeed(QueueFeed):
    """One queue watch on the ``redis`` backend: ``XREAD BLOCK`` after its cursor wakes it,
    then the read script takes what came."""

    def __init__(self, backend: RedisBackend, queue: str, key: str, after: int) -> None:
        self._backend = backend
        self._queue = queue
        self._key = key
        self._after = after

    async def read(self, timeout: float) -> EventRead:
        missed, self._after, events = await self._backend._events_after(self._queue, self._after)
        if events or missed or timeout <= 0:
            return EventRead(events=events, missed=missed)
        backend = self._backend
        transport = backend._boundary.require()
        await backend._boundary.call(transport.wait_stream(self._key, f"{self._after}-0", timeout))
        missed, self._after, events = await backend._events_after(self._queue, self._after)
        return EventRead(events=events, missed=missed)


class _RedisWatch(JobWatch):
    """Reads the job's events channel in short slices, so the queue's clock (virtual in tests)
    decides when a wait ends."""

    def __init__(
        self,
        clock: Any,
        job_id: str,
        listener: Listener,
        guard: Callable[[Awaitable[Any]], Awaitable[Any]],
    ) -> None:
        super().__init__(clock)
        self._job_id = job_id
        self._listener = listener
        self._guard = guard

    async def next_event(self, timeout: float) -> str | None:
        end = self.clock.now() + timeout
        while (remaining := end - self.clock.now()) > 0:
            message: tuple[str, str] | None = await self._guard(self._listener.get(remaining))
            if message is None:
                continue
            channel, data = message
            if channel.endswith(":settled"):
                if self._job_id in data.split(" "):
                    return None
                continue
            return data[1:]
        await anyio.lowlevel.checkpoint()
        return None
