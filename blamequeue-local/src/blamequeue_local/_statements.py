"""The SQL of the ``local`` backend: the schema and one statement per state transition.

Every transition is a single statement, so it is atomic in SQLite itself and safe with several
processes on one file, and a batch of any size costs one statement (one worker-thread hop):
enqueue binds up to 2048 jobs as parameters of one multi-row insert (larger batches travel as
one JSON array read with ``json_each``); settle and extend send their batch as one JSON array.
Flows add nothing to a batch: a trigger on the table releases the jobs parked behind a flow job
inside the very statement that marks it done, and another applies the dependency policies of
the jobs parked behind one inside the statement that marks it dead or cancelled (see the
triggers in :class:`Statements`).  A flow's jobs may be on any queues of the table: both
triggers find them by flow id.
The only text spliced into SQL is the table and schema name, validated as plain identifiers
beforehand and quoted.
"""

from __future__ import annotations

from typing import Final

from blamequeue.abc import UNIQUE_HOLDING_STATES

__all__ = [
    "ADDED_COLUMNS",
    "COLUMNS",
    "ENQUEUE_COLUMNS",
    "ENQUEUE_PARAMETERS",
    "ENQUEUE_VALUES_MAX",
    "LEASE_ORDER",
    "MAX_PARAMETERS",
    "REPLACED_INDEXES",
    "REPLACED_TRIGGERS",
    "Statements",
    "WORKER_COLUMNS",
]

#: The columns of a job, in the order :func:`blamequeue_local._backend.stored_job` reads them.
COLUMNS: Final = (
    "id, queue, state, payload, priority, attempts, max_attempts, created_at, available_at, "
    "classification, trace_id, last_error, meta, flow_id, finished_at, seq, depends_on, "
    "group_key, result, lifo"
)

#: The columns of the worker registry, in the order of :class:`blamequeue.abc.WorkerRecord`.
WORKER_COLUMNS: Final = (
    "id, queue, host, pid, concurrency, started_at, heartbeat_at, in_flight, succeeded, failed"
)

#: The columns an enqueue stores, in order.  :meth:`Statements.enqueue_values` binds one
#: parameter per column but for the last: the third parameter, the job's *entry*, stands for
#: both ``state`` and ``lifo`` (see :func:`_entry_values`), so a job still takes 15
#: parameters and the largest batch of bound values stays within SQLite's limit.
ENQUEUE_COLUMNS: Final = (
    "id, queue, state, payload, priority, max_attempts, created_at, available_at, "
    "classification, trace_id, meta, flow_id, depends_on, group_key, flow_rule, lifo"
)

#: SQLite's default limit on bound parameters per statement (since 3.32).
MAX_PARAMETERS: Final = 32766

#: How many parameters :meth:`Statements.enqueue_values` binds per job.
ENQUEUE_PARAMETERS: Final = 15

#: The largest batch :meth:`Statements.enqueue_values` takes (a power of two, 15 parameters a
#: job, within MAX_PARAMETERS); larger batches travel as one JSON parameter.
ENQUEUE_VALUES_MAX: Final = 2048

#: Columns added after the first release, with their type: :meth:`Statements.add_column`
#: adds those an existing table lacks when the backend opens it.
ADDED_COLUMNS: Final = {
    "depends_on": "TEXT",
    "group_key": "TEXT",
    "unique_key": "TEXT",
    "unique_until": "REAL",
    "result": "TEXT",
    "flow_rule": "TEXT",
    "lifo": "INTEGER NOT NULL DEFAULT 0",
}

#: Triggers of earlier versions that a newer one under another name replaces: dropped when
#: the backend opens the table.
REPLACED_TRIGGERS: Final = ("flow_release",)

#: Indexes of earlier versions that a newer one under another name replaces: dropped when the
#: backend opens the table (``lease_idx`` knew no lifo lane; ``lease_order_idx`` replaces it).
REPLACED_INDEXES: Final = ("lease_idx",)

# The leasing order within a priority (SPEC §15, blamequeue.abc.Lifo): the lifo jobs first
# (``lifo DESC``), the one due latest first and, among those due at once, the one enqueued
# latest; then the others, the one due earliest first and then the one enqueued earliest.
# One ascending key does both lanes: a lifo job's time and seq are negated, which is exact
# in a double and in an integer.  The lease index is on these very expressions, so the
# lease's ORDER BY (spelt the same) is an index walk, with no sort.
_LANE_AT: Final = "(CASE WHEN lifo THEN -available_at ELSE available_at END)"
_LANE_SEQ: Final = "(CASE WHEN lifo THEN -seq ELSE seq END)"

#: The ORDER BY of every lease (and of the lease index, after ``queue, state``).
LEASE_ORDER: Final = f"priority DESC, lifo DESC, {_LANE_AT}, {_LANE_SEQ}"


# Due (available_at <= ?now) in terms of the indexed key, so the lease reads it from the
# index entry rather than the row: negating the key back is exact.
def _due(now: str) -> str:
    return f"(CASE WHEN lifo THEN -{_LANE_AT} ELSE {_LANE_AT} END) <= {now}"


def _entry_values(value: list[str]) -> str:
    """The SELECT list storing ``ENQUEUE_COLUMNS`` from the 15 enqueue values of one job
    (SQL expressions, in order): the third, the job's entry, is 0 (pending), 1 (parked), 2
    (pending, lifo) or 3 (parked, lifo), and gives the ``state`` and the ``lifo`` columns."""
    entry = value[2]
    state = f"CASE WHEN {entry} & 1 THEN 'parked' ELSE 'pending' END"
    return ", ".join([*value[:2], state, *value[3:], f"{entry} >> 1"])


#: Seconds a progress event stays in the events table (only to reach current subscribers).
EVENTS_KEPT: Final = 10.0

#: Events each queue's log keeps for ``Queue.watch`` (about: it is trimmed every
#: :data:`QUEUE_EVENTS_TRIM_EVERY` rows of the table).
QUEUE_EVENTS_KEPT: Final = 10_000
QUEUE_EVENTS_TRIM_EVERY: Final = 256

_LIVE: Final = "('pending', 'inflight', 'parked')"
_HOLDING: Final = "(" + ", ".join(f"'{state}'" for state in UNIQUE_HOLDING_STATES) + ")"


def _holds(queue: int, key: int, now: int) -> str:
    """The condition of a job holding a unique key, with parameters at those positions."""
    return (
        f"queue = ?{queue} AND unique_key = ?{key} AND state IN {_HOLDING} "
        f"AND (unique_until IS NULL OR unique_until > ?{now})"
    )


class Statements:
    """The SQL text for one jobs table (built once per backend)."""

    def __init__(self, table: str, schema: str | None) -> None:
        self._enqueue_values: dict[int, str] = {}
        prefix = f'"{schema}".' if schema is not None else ""
        t = f'{prefix}"{table}"'
        self.table = t
        w = self.workers = f'{prefix}"{table}_workers"'
        e = self.events = f'{prefix}"{table}_events"'
        self.queue_events = f'{prefix}"{table}_queue_events"'
        self.queue_event_trims = f'{prefix}"{table}_queue_event_trims"'
        self.watchers = f'{prefix}"{table}_queue_watchers"'

        # ``seq`` (the rowid) is the enqueue order; ``id`` is the public job id.  payload,
        # last_error and meta are opaque text from the core, stored verbatim.  depends_on is
        # a JSON array of job ids (NULL when none): a ``parked`` job waits for all of them.
        # flow_rule is NULL or a JSON array [on_dependency_failure, dependants_error] (see
        # NewJob): what the job does when a dependency dies, and the last error its own
        # dependants that fail get when it dies (NULL: wait, and none fails with it).
        create_table = f"""
            CREATE TABLE IF NOT EXISTS {t} (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                queue TEXT NOT NULL,
                state TEXT NOT NULL,
                payload TEXT NOT NULL,
                priority INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                max_attempts INTEGER NOT NULL,
                created_at REAL NOT NULL,
                available_at REAL NOT NULL,
                classification TEXT,
                trace_id TEXT,
                last_error TEXT,
                meta TEXT,
                flow_id TEXT,
                finished_at REAL,
                lease_token TEXT,
                lease_expires_at REAL,
                depends_on TEXT,
                group_key TEXT,
                unique_key TEXT,
                unique_until REAL,
                result TEXT,
                flow_rule TEXT,
                lifo INTEGER NOT NULL DEFAULT 0
            )"""
        # The lease index's columns follow the lease ORDER BY (LEASE_ORDER), so taking the
        # next N jobs is an index range walk, with no sort, whatever the backlog (the entries
        # of jobs not yet due ahead of the due ones of their priority are stepped over: those
        # of higher priorities, and the delayed lifo jobs of the same one); it also serves
        # size(), purge() and next_due().  The other three are partial: they hold only the
        # rows their query reads, so enqueueing and leasing pending jobs never touches them.
        self.schema: tuple[str, ...] = (
            create_table,
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_lease_order_idx" '
            f'ON "{table}" (queue, state, {LEASE_ORDER})',
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_sweep_idx" '
            f"ON \"{table}\" (lease_expires_at) WHERE state = 'inflight'",
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_retention_idx" '
            f"ON \"{table}\" (finished_at) WHERE state = 'done'",
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_dlq_idx" '
            f"ON \"{table}\" (queue, finished_at) WHERE state = 'dead'",
            # Cancelled jobs are retained like done ones: the sweep prunes them by this index.
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_cancelled_idx" '
            f"ON \"{table}\" (finished_at) WHERE state = 'cancelled'",
            # Flows: flow_jobs() and the release of parked jobs (the trigger below).
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_flow_idx" '
            f'ON "{table}" (flow_id, seq) WHERE flow_id IS NOT NULL',
            # Flows: when a flow job becomes done, each parked job waiting on it becomes
            # pending, due at its finished_at, if every job it depends on is now done or gone
            # (deleted done jobs count as done; for a job that ignores dead dependencies, dead
            # and cancelled ones count too).  A trigger runs inside the statement that settles
            # the job, so the release is atomic with it, with no extra round trip, and correct
            # with several processes: SQLite serialises writers, and the last of two concurrent
            # completions sees the other one done.  Its WHEN clause keeps every other update
            # (leasing, retries, jobs outside flows) from doing any flow work.  The body may not
            # qualify table names; they resolve in the trigger's schema.  Its aliases are the
            # table's name with a suffix, so they never clash with the table's own name.  (It
            # replaces the trigger flow_release of earlier versions, which knew no dependency
            # policies.)
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_flow_done"
            AFTER UPDATE OF state ON "{table}" FOR EACH ROW
            WHEN NEW.state = 'done' AND OLD.state <> 'done' AND NEW.flow_id IS NOT NULL
            BEGIN
                UPDATE "{table}" SET state = 'pending', available_at = NEW.finished_at
                WHERE flow_id = NEW.flow_id AND state = 'parked'
                  AND EXISTS (SELECT 1 FROM json_each("{table}".depends_on) AS "{table}_w"
                              WHERE "{table}_w".value = NEW.id)
                  AND NOT EXISTS (
                      SELECT 1 FROM json_each("{table}".depends_on) AS "{table}_d"
                      JOIN "{table}" AS "{table}_p" ON "{table}_p".id = "{table}_d".value
                      WHERE "{table}_p".state <> 'done'
                        AND NOT ("{table}_p".state IN ('dead', 'cancelled')
                                 AND "{table}".flow_rule ->> 0 = 'ignore'));
            END""",
            # Flows: when a flow job dies (dead or cancelled, from a live state), the jobs
            # parked behind it follow their on_dependency_failure in the same statement.
            # First every job reached through a chain of parked 'fail' jobs becomes dead, with
            # the dependants_error of the job it waited for (``fallen`` walks the chain: id,
            # the job's own dependants_error, the error it gets; a job reached twice, as the
            # join of a diamond, takes one of them).  Then each parked 'ignore' job of the flow
            # whose every dependency is done, dead, cancelled or gone becomes pending, due at
            # the dying job's finished_at.  The first update does not fire this trigger again
            # (SQLite's triggers do not recurse unless asked to): the walk covers the chain.
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_flow_fall"
            AFTER UPDATE OF state ON "{table}" FOR EACH ROW
            WHEN NEW.state IN ('dead', 'cancelled') AND OLD.state IN {_LIVE}
                 AND NEW.flow_id IS NOT NULL
            BEGIN
                UPDATE "{table}" SET state = 'dead', finished_at = NEW.finished_at,
                                     last_error = "{table}_f".error, lease_expires_at = NULL
                FROM (
                    WITH RECURSIVE "{table}_fallen"(id, notice, error) AS (
                        SELECT NEW.id, NEW.flow_rule ->> 1, NULL
                        UNION
                        SELECT "{table}_c".id, "{table}_c".flow_rule ->> 1, "{table}_fallen".notice
                        FROM "{table}_fallen" JOIN "{table}" AS "{table}_c"
                          ON "{table}_c".flow_id = NEW.flow_id AND "{table}_c".state = 'parked'
                         AND "{table}_c".flow_rule ->> 0 = 'fail'
                         AND EXISTS (SELECT 1 FROM json_each("{table}_c".depends_on) AS "{table}_w"
                                     WHERE "{table}_w".value = "{table}_fallen".id))
                    SELECT id, min(error) AS error FROM "{table}_fallen"
                    WHERE id <> NEW.id GROUP BY id
                ) AS "{table}_f"
                WHERE "{table}".id = "{table}_f".id AND "{table}".state = 'parked';
                UPDATE "{table}" SET state = 'pending', available_at = NEW.finished_at
                WHERE flow_id = NEW.flow_id AND state = 'parked' AND flow_rule ->> 0 = 'ignore'
                  AND NOT EXISTS (
                      SELECT 1 FROM json_each("{table}".depends_on) AS "{table}_d"
                      JOIN "{table}" AS "{table}_p" ON "{table}_p".id = "{table}_d".value
                      WHERE "{table}_p".state NOT IN ('done', 'dead', 'cancelled'));
            END""",
            # Inspection: list_jobs pages through one state of a queue in enqueue order
            # (keyset on seq), so a page costs the same wherever it starts.
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_list_idx" '
            f'ON "{table}" (queue, state, seq)',
            # Unique jobs: the enqueue_unique check finds a key's live holder through it.
            # Partial: jobs enqueued without a key never touch it.
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_unique_idx" '
            f'ON "{table}" (queue, unique_key) WHERE unique_key IS NOT NULL',
            # The worker registry: one row per running consumer, refreshed by its heartbeat.
            f"""
            CREATE TABLE IF NOT EXISTS {self.workers} (
                id TEXT PRIMARY KEY,
                queue TEXT NOT NULL,
                host TEXT NOT NULL,
                pid INTEGER NOT NULL,
                concurrency INTEGER NOT NULL,
                started_at REAL NOT NULL,
                heartbeat_at REAL NOT NULL,
                in_flight INTEGER NOT NULL DEFAULT 0,
                succeeded INTEGER NOT NULL DEFAULT 0,
                failed INTEGER NOT NULL DEFAULT 0
            )""",
            # Live progress events (SPEC §10): written by a handler's ctx.progress, read by
            # subscribers in any process (woken by the WAL watch), and pruned by the trigger
            # below once EVENTS_KEPT seconds old: never a record, only a mailbox.
            f"""
            CREATE TABLE IF NOT EXISTS {e} (
                seq INTEGER PRIMARY KEY,
                job_id TEXT NOT NULL,
                at REAL NOT NULL,
                event TEXT NOT NULL
            )""",
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_events_job_idx" '
            f'ON "{table}_events" (job_id, seq)',
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_events_at_idx" ON "{table}_events" (at)',
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_events_prune"
            AFTER INSERT ON "{table}_events" FOR EACH ROW
            BEGIN
                DELETE FROM "{table}_events" WHERE at < NEW.at - {EVENTS_KEPT};
            END""",
            # Queue.watch (SPEC §15): each queue's event log, appended by the publishers of
            # every process and read by watchers after a cursor (seq, never reused); trimmed
            # by the trigger below to about QUEUE_EVENTS_KEPT rows per queue, the newest kept,
            # noting in the trims table the last seq it deleted (a watcher behind it missed
            # events).  The watchers table holds, per queue, until when someone watches.
            f"""
            CREATE TABLE IF NOT EXISTS {self.queue_events} (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                queue TEXT NOT NULL,
                event TEXT NOT NULL
            )""",
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_queue_events_idx" '
            f'ON "{table}_queue_events" (queue, seq)',
            f"""
            CREATE TABLE IF NOT EXISTS {self.queue_event_trims} (
                queue TEXT PRIMARY KEY,
                seq INTEGER NOT NULL
            )""",
            f"""
            CREATE TABLE IF NOT EXISTS {self.watchers} (
                queue TEXT PRIMARY KEY,
                until REAL NOT NULL
            )""",
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_queue_events_trim"
            AFTER INSERT ON "{table}_queue_events" FOR EACH ROW
            WHEN NEW.seq % {QUEUE_EVENTS_TRIM_EVERY} = 0
            BEGIN
                INSERT INTO "{table}_queue_event_trims" (queue, seq)
                SELECT NEW.queue, seq FROM "{table}_queue_events"
                WHERE queue = NEW.queue ORDER BY seq DESC LIMIT 1 OFFSET {QUEUE_EVENTS_KEPT}
                ON CONFLICT (queue) DO UPDATE SET seq = max(seq, excluded.seq);
                DELETE FROM "{table}_queue_events" WHERE queue = NEW.queue AND seq <= (
                    SELECT seq FROM "{table}_queue_event_trims" WHERE queue = NEW.queue
                );
            END""",
        )
        # Migration of a table made by an earlier version: which columns it has.  Missing
        # columns are added after the CREATE TABLE and before everything else.
        self.table_info = f'PRAGMA {prefix}table_info("{table}")'
        self.drop_replaced = tuple(
            f'DROP TRIGGER IF EXISTS {prefix}"{table}_{name}"' for name in REPLACED_TRIGGERS
        ) + tuple(f'DROP INDEX IF EXISTS {prefix}"{table}_{name}"' for name in REPLACED_INDEXES)

        # For batches beyond ENQUEUE_VALUES_MAX jobs: one JSON array per job, of the values of
        # ENQUEUE_COLUMNS in order (what enqueue_values binds for it; depends_on is JSON text or
        # null).  ORDER BY key keeps the batch order, which becomes seq order.
        self.enqueue = f"""
            INSERT INTO {t} ({ENQUEUE_COLUMNS})
            SELECT {_entry_values([f"value ->> {n}" for n in range(ENQUEUE_PARAMETERS)])}
            FROM json_each(?1) ORDER BY key"""

        self.limits_schema = (
            # Fleet-wide rate limits: one token bucket per queue (see lease_limited).
            f"""
            CREATE TABLE IF NOT EXISTS {prefix}"{table}_buckets" (
                queue TEXT PRIMARY KEY,
                tokens REAL NOT NULL,
                refilled_at REAL NOT NULL
            )""",
            # A rate-limited lease takes one token per job it leases.  Its tokens start with
            # 'r:' (other leases' tokens are hex), so this trigger does nothing on every other
            # update, and the bucket changes inside the very statement that leases the jobs:
            # several processes can never spend the same token.
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_rate_take"
            AFTER UPDATE OF state ON "{table}" FOR EACH ROW
            WHEN NEW.state = 'inflight' AND OLD.state = 'pending'
                 AND substr(NEW.lease_token, 1, 2) = 'r:'
            BEGIN
                UPDATE "{table}_buckets" SET tokens = tokens - 1 WHERE queue = NEW.queue;
            END""",
        )
        self.schema = (*self.schema, *self.limits_schema)

        # Refill a queue's bucket up to now (a bucket never seen starts full); refilling on
        # its own is safe at any time, so it may run as a statement before the lease.
        # Params: queue, now, rate_max, rate_per_seconds.
        self.refill = f"""
            INSERT INTO {prefix}"{table}_buckets" (queue, tokens, refilled_at)
            VALUES (?1, ?3, ?2)
            ON CONFLICT (queue) DO UPDATE SET
                tokens = min(?3, tokens + max(0.0, ?2 - refilled_at) * ?3 / ?4),
                refilled_at = max(refilled_at, ?2)"""

        # The lease under fleet-wide limits.  Params: token, expires_at, queue, now, limit,
        # group_concurrency (NULL: none), rate-limited (NULL: no).  ``busy`` counts each
        # group's inflight jobs (the lease index's (queue, 'inflight') range: as many rows as
        # jobs in flight); ``cand`` walks the lease index in lease order, skipping groups at
        # their limit, for up to four times ``limit`` jobs; ``ranked`` keeps, per group, only
        # as many of them as the group has free slots, and the first ``limit`` of those (at
        # most as many as whole tokens are left) are leased.  Jobs of saturated groups ahead
        # of the eligible ones are skipped one index entry at a time; when one lease's own
        # jobs fill a group beyond the overscan, it returns fewer than ``limit`` and the next
        # lease takes the rest.
        self.lease_limited = f"""
            UPDATE {t}
            SET state = 'inflight', attempts = attempts + 1,
                lease_token = ?1, lease_expires_at = ?2
            WHERE seq IN (
                WITH busy AS (
                    SELECT group_key, count(*) AS n FROM {t}
                    WHERE ?6 IS NOT NULL AND queue = ?3 AND state = 'inflight'
                      AND group_key IS NOT NULL
                    GROUP BY group_key),
                cand AS (
                    SELECT seq, group_key, priority, lifo, available_at FROM {t}
                    WHERE queue = ?3 AND state = 'pending' AND {_due("?4")}
                      AND (group_key IS NULL OR ?6 IS NULL
                           OR group_key NOT IN (SELECT group_key FROM busy WHERE n >= ?6))
                    ORDER BY {LEASE_ORDER}
                    LIMIT 4 * ?5),
                ranked AS (
                    SELECT seq, group_key, priority, lifo, available_at, row_number() OVER (
                        PARTITION BY group_key ORDER BY {LEASE_ORDER}) AS rn
                    FROM cand)
                SELECT r.seq FROM ranked AS r LEFT JOIN busy AS b ON b.group_key = r.group_key
                WHERE r.group_key IS NULL OR ?6 IS NULL OR r.rn + coalesce(b.n, 0) <= ?6
                ORDER BY {LEASE_ORDER}
                LIMIT max(0, min(?5, CASE WHEN ?7 IS NULL THEN ?5 ELSE coalesce(
                    (SELECT CAST(tokens + 1e-9 AS INTEGER) FROM {prefix}"{table}_buckets"
                     WHERE queue = ?3), 0) END)))
            RETURNING {COLUMNS}"""
        # Unique jobs: insert one job (the ENQUEUE_PARAMETERS of enqueue_values, then
        # unique_key, unique_until, queue, now) unless a job of its queue holds the key: it is
        # pending or inflight and its unique_until (NULL: none) has not passed.  One statement,
        # so SQLite's write lock makes the check and the insert one step for every process.
        # Nothing marks a key released: leaving the live states (done, dead, any state added
        # later), a delete (purge, retention) or dlq_retry (which drops the key) frees it.
        n = ENQUEUE_PARAMETERS
        self.enqueue_unique = f"""
            INSERT INTO {t} ({ENQUEUE_COLUMNS}, unique_key, unique_until)
            SELECT {_entry_values([f"?{i}" for i in range(1, n + 1)])}, ?{n + 1}, ?{n + 2}
            WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE {_holds(n + 3, n + 1, n + 4)})
            RETURNING id"""
        # Params: queue, unique_key, now.  The key's holder, when the insert found one (the
        # latest, should an earlier holder's unique_until be about to pass).
        self.unique_holder = f"""
            SELECT id FROM {t} WHERE {_holds(1, 2, 3)} ORDER BY seq DESC LIMIT 1"""

        # Params: token, expires_at, queue, now, limit.  RETURNING order is unspecified; the
        # backend sorts the rows again.
        self.lease = f"""
            UPDATE {t}
            SET state = 'inflight', attempts = attempts + 1,
                lease_token = ?1, lease_expires_at = ?2
            WHERE seq IN (
                SELECT seq FROM {t}
                WHERE queue = ?3 AND state = 'pending' AND {_due("?4")}
                ORDER BY {LEASE_ORDER}
                LIMIT ?5)
            RETURNING {COLUMNS}"""

        # One JSON array per settlement: [id, token, outcome, at, error, result].
        self.settle = self._settle(
            "SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS outcome, "
            "value ->> 3 AS at, value ->> 4 AS error, value ->> 5 AS result FROM json_each(?)"
        )

        # ``done`` without retention: [id, token] pairs, deleted under the same fence (flow
        # jobs once :attr:`settle_done_flow_jobs` has marked them done).
        self.settle_delete = f"""
            DELETE FROM {t}
            WHERE seq IN (
                SELECT j.seq FROM json_each(?1) AS p
                JOIN {t} AS j ON j.id = p.value ->> 0 AND j.lease_token = p.value ->> 1
                WHERE j.state = 'inflight' AND j.flow_id IS NULL
                   OR j.state = 'done' AND j.flow_id IS NOT NULL)
            RETURNING id, lease_token"""

        # ``done`` without retention of flow jobs, [id, token, at] triples: a delete would
        # not fire the release trigger, so they are first marked done (releasing what waits
        # on them, due at ``at``) and then deleted by :attr:`settle_delete` under the same
        # token.  Should the delete not happen, the job is a done job like any other, and
        # the next sweep prunes it.
        self.settle_done_flow_jobs = f"""
            UPDATE {t} AS t SET state = 'done', finished_at = s.value ->> 2,
                                lease_expires_at = NULL
            FROM json_each(?1) AS s
            WHERE t.id = s.value ->> 0 AND t.lease_token = s.value ->> 1
              AND t.state = 'inflight' AND t.flow_id IS NOT NULL
            RETURNING id, lease_token"""

        # Param: the flow id.
        self.flow_jobs = f"SELECT {COLUMNS} FROM {t} WHERE flow_id = ?1 ORDER BY seq"

        # Params: expires_at, JSON [[id, token], ...].  A cancelled job keeps the token of the
        # lease it was cancelled under: that pair comes back with state 'cancelled' (and its
        # row unchanged), which tells the worker to stop the handler.
        self.extend = f"""
            UPDATE {t} AS t
            SET lease_expires_at = CASE WHEN t.state = 'inflight' THEN ?1
                                        ELSE t.lease_expires_at END
            FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(?2)) AS s
            WHERE t.id = s.id AND t.lease_token = s.token AND t.state IN ('inflight', 'cancelled')
            RETURNING id, lease_token, state"""

        # Params: job id, now.  Any live job, in one statement; the lease token stays, so the
        # old lease settles nothing (settle wants 'inflight') and extend reports the cancel.
        self.cancel = f"""
            UPDATE {t} SET state = 'cancelled', finished_at = ?2, lease_expires_at = NULL
            WHERE id = ?1 AND state IN {_LIVE}
            RETURNING {COLUMNS}"""

        # Params: now, expired_error.
        self.sweep_expired = f"""
            UPDATE {t}
            SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
                available_at = CASE WHEN attempts >= max_attempts THEN available_at ELSE ?1 END,
                finished_at = CASE WHEN attempts >= max_attempts THEN ?1 END,
                last_error = CASE WHEN attempts >= max_attempts THEN ?2 ELSE last_error END,
                lease_expires_at = NULL
            WHERE state = 'inflight' AND lease_expires_at <= ?1
            RETURNING {COLUMNS}"""

        # Param: the cutoff (now - retain_done).
        self.prune_done = f"DELETE FROM {t} WHERE state = 'done' AND finished_at < ?1"
        self.prune_cancelled = f"DELETE FROM {t} WHERE state = 'cancelled' AND finished_at < ?1"

        # The retention limits (prune_finished).  The queues holding dead jobs, or done and
        # cancelled ones, found by one index seek each (a loose scan of the dead-letter index
        # or the finished index), then per queue: dead jobs older than a cutoff, and the jobs
        # beyond the N most recently finished (a walk of the N kept index entries).
        finished = "state IN ('done', 'cancelled')"
        self.finished_index = (
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_finished_idx" '
            f'ON "{table}" (queue, finished_at) WHERE {finished}'
        )
        self.dead_queues, self.finished_queues = (
            f"""
            WITH RECURSIVE names(queue) AS (
                SELECT min(queue) FROM {t} INDEXED BY "{index}" WHERE {where}
                UNION ALL
                SELECT (SELECT min(queue) FROM {t} INDEXED BY "{index}"
                        WHERE {where} AND queue > names.queue)
                FROM names WHERE names.queue IS NOT NULL)
            SELECT queue FROM names WHERE queue IS NOT NULL"""
            for where, index in (
                ("state = 'dead'", f"{table}_dlq_idx"),
                (finished, f"{table}_finished_idx"),
            )
        )
        # Params: queue, cutoff.
        self.prune_dead = f"""
            DELETE FROM {t} WHERE seq IN (
                SELECT seq FROM {t} INDEXED BY "{table}_dlq_idx"
                WHERE queue = ?1 AND state = 'dead' AND finished_at < ?2)"""
        # Params: queue, how many to keep.
        self.trim_dead, self.trim_finished = (
            f"""
            DELETE FROM {t} WHERE seq IN (
                SELECT seq FROM {t} INDEXED BY "{index}" WHERE queue = ?1 AND {where}
                ORDER BY finished_at DESC LIMIT -1 OFFSET ?2)"""
            for where, index in (
                ("state = 'dead'", f"{table}_dlq_idx"),
                (finished, f"{table}_finished_idx"),
            )
        )

        self.size = f"SELECT count(*) FROM {t} WHERE queue = ?1 AND state IN {_LIVE}"

        # The earliest available_at of a queue's pending jobs, in index seeks only (the lease
        # index orders by priority first, so a plain MIN would read every pending row): walk
        # the distinct priorities from the highest down, one seek each, and take the earliest
        # job of each lane of each (two seeks more: the first entry of the plain lane, the
        # last of the lifo lane, whose key is the negated time).  A few priorities are in
        # use, not thousands.
        level = "queue = ?1 AND state = 'pending' AND priority = levels.priority"
        self.next_due = f"""
            WITH RECURSIVE levels(priority) AS (
                SELECT max(priority) FROM {t} WHERE queue = ?1 AND state = 'pending'
                UNION ALL
                SELECT (SELECT max(priority) FROM {t}
                        WHERE queue = ?1 AND state = 'pending' AND priority < levels.priority)
                FROM levels WHERE levels.priority IS NOT NULL),
            lanes(at) AS (
                SELECT (SELECT {_LANE_AT} FROM {t} WHERE {level} AND lifo = 0
                        ORDER BY {_LANE_AT} LIMIT 1)
                FROM levels WHERE levels.priority IS NOT NULL
                UNION ALL
                SELECT (SELECT -{_LANE_AT} FROM {t} WHERE {level} AND lifo = 1
                        ORDER BY {_LANE_AT} DESC LIMIT 1)
                FROM levels WHERE levels.priority IS NOT NULL)
            SELECT min(at) FROM lanes"""

        # RETURNING one flag per deleted row: 1 for a live job, 0 for a retained done or
        # cancelled one.
        self.purge = f"""
            DELETE FROM {t}
            WHERE queue = ?1 AND state IN ('pending', 'inflight', 'parked', 'done', 'cancelled')
            RETURNING state IN {_LIVE}"""

        # Params: queue, limit (-1: no limit).
        self.dlq_list = f"""
            SELECT {COLUMNS} FROM {t}
            WHERE queue = ?1 AND state = 'dead'
            ORDER BY finished_at DESC, seq DESC
            LIMIT ?2"""

        self.dlq_get = f"SELECT {COLUMNS} FROM {t} WHERE id = ?1 AND state = 'dead'"

        # Compare-and-set on everything a dead row can differ in, so the job returned is
        # exactly the one moved even if it was retried and died again in between.
        # Params: now, seq, attempts, finished_at, last_error.
        self.dlq_retry = f"""
            UPDATE {t}
            SET state = 'pending', attempts = 0, available_at = ?1, finished_at = NULL,
                lease_token = NULL, lease_expires_at = NULL, unique_key = NULL
            WHERE seq = ?2 AND state = 'dead' AND attempts = ?3
              AND finished_at IS ?4 AND last_error IS ?5"""

        self.dlq_size = f"SELECT count(*) FROM {t} WHERE queue = ?1 AND state = 'dead'"

        # -- job edits: each one statement, conditional on the job's state ---------------------
        # Params: job id, now.  Only a pending job not yet due.
        self.promote = f"""
            UPDATE {t} SET available_at = ?2
            WHERE id = ?1 AND state = 'pending' AND available_at > ?2
            RETURNING {COLUMNS}"""

        # Params: job id, available_at.
        self.change_delay = f"""
            UPDATE {t} SET available_at = ?2
            WHERE id = ?1 AND state = 'pending'
            RETURNING {COLUMNS}"""

        # Params: job id, priority.
        self.change_priority = f"""
            UPDATE {t} SET priority = ?2
            WHERE id = ?1 AND state IN ('pending', 'parked')
            RETURNING {COLUMNS}"""

        # Params: job id, payload, and the place it was sealed for: queue, flow_id, meta.
        self.update_payload = f"""
            UPDATE {t} SET payload = ?2
            WHERE id = ?1 AND state IN ('pending', 'parked')
              AND queue = ?3 AND flow_id IS ?4 AND meta IS ?5
            RETURNING {COLUMNS}"""

        # A finished job back to pending, as dlq_retry moves a dead one; compare-and-set on
        # the state and finish time read just before, so the state it left is known exactly.
        # Params: now, seq, state, finished_at.
        self.rerun = f"""
            UPDATE {t}
            SET state = 'pending', attempts = 0, available_at = ?1, finished_at = NULL,
                lease_token = NULL, lease_expires_at = NULL, unique_key = NULL,
                unique_until = NULL, result = NULL
            WHERE seq = ?2 AND state = ?3 AND state IN ('done', 'dead', 'cancelled')
              AND finished_at IS ?4
            RETURNING {COLUMNS}"""

        self.dlq_purge = f"DELETE FROM {t} WHERE queue = ?1 AND state = 'dead'"

        # -- inspection ----------------------------------------------------------------------
        self.get_job = f"SELECT {COLUMNS} FROM {t} WHERE id = ?1"

        # Params: queue, state, after seq (0: from the start), limit.
        self.list_jobs = f"""
            SELECT {COLUMNS} FROM {t}
            WHERE queue = ?1 AND state = ?2 AND seq > ?3
            ORDER BY seq
            LIMIT ?4"""

        self.queue_counts = f"SELECT queue, state, count(*) FROM {t} GROUP BY queue, state"

        # Params: the WORKER_COLUMNS, in order.
        self.worker_heartbeat = f"""
            INSERT INTO {w} ({WORKER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
            ON CONFLICT (id) DO UPDATE SET
                queue = excluded.queue, host = excluded.host, pid = excluded.pid,
                concurrency = excluded.concurrency, started_at = excluded.started_at,
                heartbeat_at = excluded.heartbeat_at, in_flight = excluded.in_flight,
                succeeded = excluded.succeeded, failed = excluded.failed"""

        self.worker_gone = f"DELETE FROM {w} WHERE id = ?1"

        # -- progress events -------------------------------------------------------------------
        # Params: job_id, at, event.
        self.event_publish = f"INSERT INTO {e} (job_id, at, event) VALUES (?1, ?2, ?3)"
        self.event_last = f"SELECT coalesce(max(seq), 0) FROM {e}"
        # Params: job_id, after seq.
        self.event_read = f"SELECT seq, event FROM {e} WHERE job_id = ?1 AND seq > ?2 ORDER BY seq"

        # -- queue events (Queue.watch) --------------------------------------------------------
        # Params: queue, a JSON array of event texts (appended in its order, in one statement).
        self.queue_events_publish = f"""
            INSERT INTO {self.queue_events} (queue, event)
            SELECT ?1, value FROM json_each(?2) ORDER BY key"""
        self.queue_events_last = f"SELECT coalesce(max(seq), 0) FROM {self.queue_events}"
        # Params: queue, after seq, limit.  First a row (-1, the last seq trimmed) when events
        # of the queue after that seq were trimmed before being read.
        self.queue_events_read = f"""
            SELECT seq, event FROM (
                SELECT -1 AS seq, trims.seq AS event FROM {self.queue_event_trims} AS trims
                WHERE trims.queue = ?1 AND trims.seq > ?2
                UNION ALL
                SELECT * FROM (
                    SELECT seq, event FROM {self.queue_events}
                    WHERE queue = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3
                )
            ) ORDER BY seq"""
        # Params: queue, until.
        self.watch_mark = f"""
            INSERT INTO {self.watchers} (queue, until) VALUES (?1, ?2)
            ON CONFLICT (queue) DO UPDATE SET until = max(until, excluded.until)"""
        # Params: queue, now.
        self.watched = f"SELECT 1 FROM {self.watchers} WHERE queue = ?1 AND until > ?2"

        # Params: queue, now.  Health checks: one pass over the queue's pending jobs.
        self.queue_stats = f"""
            SELECT count(*) FILTER (WHERE available_at > ?2),
                   min(available_at) FILTER (WHERE available_at <= ?2)
            FROM {t} WHERE queue = ?1 AND state = 'pending'"""

        # Param: alive_since.  Records of workers that died without deregistering.
        self.workers_prune = f"DELETE FROM {w} WHERE heartbeat_at < ?1"

        # Param: alive_since.
        self.workers_list = f"""
            SELECT {WORKER_COLUMNS} FROM {w}
            WHERE heartbeat_at >= ?1
            ORDER BY queue, started_at, id"""

    def _settle(self, source: str) -> str:
        # The token stays on the row after settlement, so RETURNING (which may only read the
        # updated table) can say which (id, token) pair was applied.
        return f"""
            UPDATE {self.table} AS t
            SET state = CASE s.outcome WHEN 'done' THEN 'done' WHEN 'dead' THEN 'dead'
                                       ELSE 'pending' END,
                available_at = CASE WHEN s.outcome IN ('retry', 'release') THEN s.at
                                    ELSE t.available_at END,
                finished_at = CASE WHEN s.outcome IN ('done', 'dead') THEN s.at END,
                last_error = CASE WHEN s.outcome IN ('retry', 'dead') THEN s.error
                                  WHEN s.outcome = 'release' THEN coalesce(s.error, t.last_error)
                                  ELSE t.last_error END,
                attempts = CASE WHEN s.outcome = 'release' THEN max(t.attempts - 1, 0)
                                ELSE t.attempts END,
                result = CASE WHEN s.outcome = 'done' THEN s.result ELSE t.result END,
                lease_expires_at = NULL
            FROM ({source}) AS s
            WHERE t.id = s.id AND t.lease_token = s.token AND t.state = 'inflight'
            RETURNING id, lease_token"""

    def add_column(self, column: str) -> str:
        """Add one of :data:`ADDED_COLUMNS` to a table made by an earlier version."""
        return f"ALTER TABLE {self.table} ADD COLUMN {column} {ADDED_COLUMNS[column]}"

    def enqueue_absent(self, rows: int) -> str:
        """:meth:`enqueue_values` storing only the jobs whose id no row holds (in any state),
        and the first of two with one id; returns the ids it stored.  One statement: SQLite's
        write lock makes the check and the insert one step for every process."""
        return self.enqueue_values(rows) + " ON CONFLICT (id) DO NOTHING RETURNING id"

    def enqueue_values(self, rows: int) -> str:
        """Insert up to ``rows`` jobs bound as 15 parameters each, in ``ENQUEUE_COLUMNS`` order
        (the third, the job's entry, gives both ``state`` and ``lifo``).

        Rows whose id is NULL are padding and skipped: the backend pads a batch to the next
        power of two, so a dozen statement texts serve every batch size from the connection's
        statement cache.  Bound values are also exact where JSON is not (a NUL character).
        """
        sql = self._enqueue_values.get(rows)
        if sql is None:
            values = ",".join(["(" + ",".join("?" * ENQUEUE_PARAMETERS) + ")"] * rows)
            columns = _entry_values([f"column{n}" for n in range(1, ENQUEUE_PARAMETERS + 1)])
            sql = self._enqueue_values[rows] = (
                f"INSERT INTO {self.table} ({ENQUEUE_COLUMNS}) "
                f"SELECT {columns} FROM (VALUES {values}) WHERE column1 IS NOT NULL"
            )
        return sql

    # SQLite's JSON functions cut text at a NUL character, so the rare settlement whose error
    # holds one binds its values as plain parameters instead.
    def settle_bound(self, rows: int) -> str:
        """:attr:`settle` for ``rows`` settlements bound as 6 parameters each."""
        values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows)
        return self._settle(
            "SELECT column1 AS id, column2 AS token, column3 AS outcome, column4 AS at, "
            f"column5 AS error, column6 AS result FROM (VALUES {values})"
        )
