"""The SQL of the ``local`` backend: the schema and one statement per state transition.

Every transition is a single statement, so it is atomic in SQLite itself and safe with several
processes on one file, and a batch of any size costs one statement (one worker-thread hop):
enqueue binds up to 2048 jobs as parameters of one multi-row insert (larger batches travel as
one JSON array read with ``json_each``); settle and extend send their batch as one JSON array.
The only text spliced into SQL is the table and schema name, validated as plain identifiers
beforehand and quoted.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "COLUMNS",
    "ENQUEUE_COLUMNS",
    "ENQUEUE_VALUES_MAX",
    "MAX_PARAMETERS",
    "Statements",
]

#: The columns of a job, in the order :func:`blamequeue_local._backend.stored_job` reads them.
COLUMNS: Final = (
    "id, queue, state, payload, priority, attempts, max_attempts, created_at, available_at, "
    "classification, trace_id, last_error, meta, flow_id, finished_at, seq"
)

#: The columns :meth:`Statements.enqueue_values` binds, in order.
ENQUEUE_COLUMNS: Final = (
    "id, queue, state, payload, priority, max_attempts, created_at, available_at, "
    "classification, trace_id, meta, flow_id"
)

#: SQLite's default limit on bound parameters per statement (since 3.32).
MAX_PARAMETERS: Final = 32766

#: The largest batch :meth:`Statements.enqueue_values` takes (a power of two, 12 parameters a
#: job, within MAX_PARAMETERS); larger batches travel as one JSON parameter.
ENQUEUE_VALUES_MAX: Final = 2048

_LIVE: Final = "('pending', 'inflight', 'parked')"


class Statements:
    """The SQL text for one jobs table (built once per backend)."""

    def __init__(self, table: str, schema: str | None) -> None:
        self._enqueue_values: dict[int, str] = {}
        prefix = f'"{schema}".' if schema is not None else ""
        t = f'{prefix}"{table}"'
        self.table = t

        # ``seq`` (the rowid) is the enqueue order; ``id`` is the public job id.  payload,
        # last_error and meta are opaque text from the core, stored verbatim.
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
                lease_expires_at REAL
            )"""
        # The lease index's columns follow the lease ORDER BY, so taking the next N jobs is
        # an index range walk whatever the backlog; it also serves size() and purge().  The
        # other three are partial: they hold only the rows their query reads, so enqueueing
        # and leasing pending jobs never touches them.
        self.schema = (
            create_table,
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_lease_idx" '
            f'ON "{table}" (queue, state, priority DESC, available_at, seq)',
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_sweep_idx" '
            f"ON \"{table}\" (lease_expires_at) WHERE state = 'inflight'",
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_retention_idx" '
            f"ON \"{table}\" (finished_at) WHERE state = 'done'",
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_dlq_idx" '
            f"ON \"{table}\" (queue, finished_at) WHERE state = 'dead'",
        )

        # For batches beyond ENQUEUE_VALUES_MAX jobs: one JSON array per job: [id, queue,
        # payload, priority, max_attempts, created_at, available_at, classification, trace_id,
        # meta, flow_id, parked].  ORDER BY key keeps the batch order, which becomes seq order.
        self.enqueue = f"""
            INSERT INTO {t} ({ENQUEUE_COLUMNS})
            SELECT value ->> 0, value ->> 1,
                   CASE WHEN value ->> 11 THEN 'parked' ELSE 'pending' END,
                   value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6,
                   value ->> 7, value ->> 8, value ->> 9, value ->> 10
            FROM json_each(?1) ORDER BY key"""

        # Params: token, expires_at, queue, now, limit.  RETURNING order is unspecified; the
        # backend sorts the rows again.
        self.lease = f"""
            UPDATE {t}
            SET state = 'inflight', attempts = attempts + 1,
                lease_token = ?1, lease_expires_at = ?2
            WHERE seq IN (
                SELECT seq FROM {t}
                WHERE queue = ?3 AND state = 'pending' AND available_at <= ?4
                ORDER BY priority DESC, available_at, seq
                LIMIT ?5)
            RETURNING {COLUMNS}"""

        # One JSON array per settlement: [id, token, outcome, at, error].
        self.settle = self._settle(
            "SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS outcome, "
            "value ->> 3 AS at, value ->> 4 AS error FROM json_each(?)"
        )

        # ``done`` without retention: [id, token] pairs, deleted under the same fence.
        self.settle_delete = f"""
            DELETE FROM {t}
            WHERE seq IN (
                SELECT j.seq FROM json_each(?1) AS p
                JOIN {t} AS j ON j.id = p.value ->> 0 AND j.lease_token = p.value ->> 1
                WHERE j.state = 'inflight')
            RETURNING id, lease_token"""

        # Params: expires_at, JSON [[id, token], ...].
        self.extend = f"""
            UPDATE {t} AS t SET lease_expires_at = ?1
            FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(?2)) AS s
            WHERE t.id = s.id AND t.lease_token = s.token AND t.state = 'inflight'
            RETURNING id, lease_token"""

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

        self.size = f"SELECT count(*) FROM {t} WHERE queue = ?1 AND state IN {_LIVE}"

        # RETURNING one flag per deleted row: 1 for a live job, 0 for a retained done one.
        self.purge = f"""
            DELETE FROM {t}
            WHERE queue = ?1 AND state IN ('pending', 'inflight', 'parked', 'done')
            RETURNING state <> 'done'"""

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
                lease_token = NULL, lease_expires_at = NULL
            WHERE seq = ?2 AND state = 'dead' AND attempts = ?3
              AND finished_at IS ?4 AND last_error IS ?5"""

        self.dlq_size = f"SELECT count(*) FROM {t} WHERE queue = ?1 AND state = 'dead'"

        self.dlq_purge = f"DELETE FROM {t} WHERE queue = ?1 AND state = 'dead'"

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
                lease_expires_at = NULL
            FROM ({source}) AS s
            WHERE t.id = s.id AND t.lease_token = s.token AND t.state = 'inflight'
            RETURNING id, lease_token"""

    def enqueue_values(self, rows: int) -> str:
        """Insert up to ``rows`` jobs bound as 12 parameters each, in ``ENQUEUE_COLUMNS`` order.

        Rows whose id is NULL are padding and skipped: the backend pads a batch to the next
        power of two, so a dozen statement texts serve every batch size from the connection's
        statement cache.  Bound values are also exact where JSON is not (a NUL character).
        """
        sql = self._enqueue_values.get(rows)
        if sql is None:
            values = ",".join(["(?,?,?,?,?,?,?,?,?,?,?,?)"] * rows)
            columns = ", ".join(f"column{n}" for n in range(1, 13))
            sql = self._enqueue_values[rows] = (
                f"INSERT INTO {self.table} ({ENQUEUE_COLUMNS}) "
                f"SELECT {columns} FROM (VALUES {values}) WHERE column1 IS NOT NULL"
            )
        return sql

    # SQLite's JSON functions cut text at a NUL character, so the rare settlement whose error
    # holds one binds its values as plain parameters instead.
    def settle_bound(self, rows: int) -> str:
        """:attr:`settle` for ``rows`` settlements bound as 5 parameters each."""
        values = ", ".join(["(?, ?, ?, ?, ?)"] * rows)
        return self._settle(
            "SELECT column1 AS id, column2 AS token, column3 AS outcome, column4 AS at, "
            f"column5 AS error FROM (VALUES {values})"
        )
