"""SQL for the shared records (``Capabilities.records``) of the ``local`` backend.

Two tables beside the jobs table: ``<table>_records`` (one row per live or not yet swept
record: its value, its counters as a JSON object, its expiry) and ``<table>_record_tokens``
(the ``once`` tokens each record applied).  Every method is one statement, atomic on its own
like the rest of the backend: an expired record is recreated in place by bumping its ``gen``,
which makes its old tokens meaningless (a trigger deletes them), and ``record_add`` inserts its
token through a trigger on the very row it updates, so the check and the write cannot be split
by another process.
"""

from __future__ import annotations

__all__ = ["RecordStatements"]

RECORD_COLUMNS = "key, value, counters, expires_at"


class RecordStatements:
    """The SQL text for the records of one jobs table."""

    def __init__(self, table: str, schema: str | None) -> None:
        prefix = f'"{schema}".' if schema is not None else ""
        r = f'{prefix}"{table}_records"'
        tk = f'{prefix}"{table}_record_tokens"'
        bare_r, bare_tk = f'"{table}_records"', f'"{table}_record_tokens"'
        expired = "(r.expires_at IS NOT NULL AND r.expires_at <= ?4)"
        live = "(expires_at IS NULL OR expires_at > ?{now})"

        self.schema = (
            f"""
            CREATE TABLE IF NOT EXISTS {r} (
                kind TEXT NOT NULL,
                key TEXT NOT NULL,
                value BLOB,
                counters TEXT NOT NULL DEFAULT '{{}}',
                expires_at REAL,
                gen INTEGER NOT NULL DEFAULT 0,
                last_token TEXT,
                PRIMARY KEY (kind, key)
            ) WITHOUT ROWID""",
            f'CREATE INDEX IF NOT EXISTS {prefix}"{table}_records_expiry_idx" '
            f"ON {bare_r} (expires_at) WHERE expires_at IS NOT NULL",
            f"""
            CREATE TABLE IF NOT EXISTS {tk} (
                kind TEXT NOT NULL,
                key TEXT NOT NULL,
                gen INTEGER NOT NULL,
                token TEXT NOT NULL,
                PRIMARY KEY (kind, key, gen, token)
            ) WITHOUT ROWID""",
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_record_token_new"
            AFTER INSERT ON {bare_r} FOR EACH ROW WHEN NEW.last_token IS NOT NULL
            BEGIN
                INSERT OR IGNORE INTO {bare_tk} VALUES (NEW.kind, NEW.key, NEW.gen, NEW.last_token);
            END""",
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_record_token_update"
            AFTER UPDATE ON {bare_r} FOR EACH ROW
            BEGIN
                DELETE FROM {bare_tk}
                WHERE OLD.gen <> NEW.gen AND kind = OLD.kind AND key = OLD.key AND gen = OLD.gen;
                INSERT OR IGNORE INTO {bare_tk}
                SELECT NEW.kind, NEW.key, NEW.gen, NEW.last_token WHERE NEW.last_token IS NOT NULL;
            END""",
            f"""
            CREATE TRIGGER IF NOT EXISTS {prefix}"{table}_record_gone"
            AFTER DELETE ON {bare_r} FOR EACH ROW
            BEGIN
                DELETE FROM {bare_tk} WHERE kind = OLD.kind AND key = OLD.key;
            END""",
        )

        # Params: kind, key, value, now, expires_at.  Keeps the counters of a live record;
        # an expired one starts afresh (new gen, no counters).
        self.put = f"""
            INSERT INTO {r} AS r (kind, key, value, expires_at) VALUES (?1, ?2, ?3, ?5)
            ON CONFLICT (kind, key) DO UPDATE SET
                value = ?3, expires_at = ?5,
                counters = CASE WHEN {expired} THEN '{{}}' ELSE r.counters END,
                gen = CASE WHEN {expired} THEN r.gen + 1 ELSE r.gen END,
                last_token = CASE WHEN {expired} THEN NULL ELSE r.last_token END"""

        # The same, only when no live record exists (a claim): changes 0 rows otherwise.
        self.put_if_absent = f"""
            INSERT INTO {r} AS r (kind, key, value, expires_at) VALUES (?1, ?2, ?3, ?5)
            ON CONFLICT (kind, key) DO UPDATE SET
                value = ?3, expires_at = ?5, counters = '{{}}', gen = r.gen + 1,
                last_token = NULL
            WHERE {expired}"""

        # Params: kind, key, deltas (JSON object), now, expires_at, once.  Returns the record
        # when the deltas were applied, no row when the token had been applied already.
        merged = f"""(
            SELECT json_group_object(k, s) FROM (
                SELECT key AS k, sum(value) AS s FROM (
                    SELECT key, value FROM json_each(
                        CASE WHEN {expired} THEN '{{}}' ELSE r.counters END)
                    UNION ALL SELECT key, value FROM json_each(?3))
                GROUP BY key))"""
        self.add = f"""
            INSERT INTO {r} AS r (kind, key, counters, expires_at, last_token)
            VALUES (?1, ?2, (SELECT json_group_object(key, value) FROM json_each(?3)), ?5, ?6)
            ON CONFLICT (kind, key) DO UPDATE SET
                counters = {merged},
                value = CASE WHEN {expired} THEN NULL ELSE r.value END,
                gen = CASE WHEN {expired} THEN r.gen + 1 ELSE r.gen END,
                expires_at = CASE WHEN ?5 IS NOT NULL THEN ?5
                                  WHEN {expired} THEN NULL ELSE r.expires_at END,
                last_token = ?6
            WHERE {expired} OR ?6 IS NULL OR NOT EXISTS (
                SELECT 1 FROM {tk} AS tk
                WHERE tk.kind = ?1 AND tk.key = ?2 AND tk.gen = r.gen AND tk.token = ?6)
            RETURNING {RECORD_COLUMNS}"""

        # Params: kind, key, now.
        self.get = f"""
            SELECT {RECORD_COLUMNS} FROM {r}
            WHERE kind = ?1 AND key = ?2 AND {live.format(now=3)}"""

        # Params: kind, keys (JSON array), now.
        self.get_many = f"""
            SELECT {RECORD_COLUMNS} FROM {r}
            WHERE kind = ?1 AND key IN (SELECT value FROM json_each(?2))
              AND {live.format(now=3)}"""

        # Params: kind, prefix, upper bound (NULL: none), now, limit (-1: none).  The bound
        # keeps the scan to the prefix's range of the primary key; substr() is the exact test.
        self.list = f"""
            SELECT {RECORD_COLUMNS} FROM {r}
            WHERE kind = ?1 AND key >= ?2 AND (?3 IS NULL OR key < ?3)
              AND substr(key, 1, length(?2)) = ?2 AND {live.format(now=4)}
            ORDER BY key LIMIT ?5"""

        # Params: kind, key.
        self.delete = f"DELETE FROM {r} WHERE kind = ?1 AND key = ?2"

        # Param: now.
        self.prune = f"DELETE FROM {r} WHERE expires_at IS NOT NULL AND expires_at <= ?1"
