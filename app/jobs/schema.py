"""The job store's schema as a numbered list of migrations, applied in order at start-up.

Each migration is a list of statements written once for both databases; `{blob}`, `{real}`
and `{bigint}` are filled in per dialect. The applied versions are recorded in
`schema_migrations`, so a server only runs what its database lacks; a database newer than
the code (a rollback) is refused rather than written with an old schema. Never edit a
migration that has shipped: append a new one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    blob: str
    real: str
    bigint: str

    def render(self, statement: str) -> str:
        return statement.format(blob=self.blob, real=self.real, bigint=self.bigint)


SQLITE = Dialect("sqlite", blob="BLOB", real="REAL", bigint="INTEGER")
POSTGRES = Dialect("postgresql", blob="BYTEA", real="DOUBLE PRECISION", bigint="BIGINT")

MIGRATIONS: list[list[str]] = [
    # 1: jobs, their attempts (the audit trail), and the spool's reference counts
    [
        """CREATE TABLE jobs (
            name TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            request {blob} NOT NULL,
            audio_digest TEXT,
            audio_uri TEXT,
            progress INTEGER NOT NULL DEFAULT 0,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL,
            started_at {real},
            finished_at {real},
            attempts INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_expires_at {real},
            result {blob},
            error_code INTEGER,
            error_message TEXT,
            callback_url TEXT,
            callback_secret TEXT,
            webhook_state TEXT,
            webhook_attempts INTEGER NOT NULL DEFAULT 0,
            webhook_delivery_id TEXT,
            webhook_last_error TEXT,
            webhook_last_attempt_at {real},
            webhook_next_at {real}
        )""",
        "CREATE INDEX jobs_state_created ON jobs (state, created_at)",
        "CREATE INDEX jobs_created ON jobs (created_at, name)",
        "CREATE INDEX jobs_webhook_due ON jobs (webhook_state, webhook_next_at)",
        "CREATE INDEX jobs_audio_digest ON jobs (audio_digest)",
        """CREATE TABLE job_attempts (
            name TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            owner TEXT NOT NULL,
            started_at {real} NOT NULL,
            ended_at {real},
            outcome TEXT,
            PRIMARY KEY (name, attempt)
        )""",
        """CREATE TABLE spool (
            digest TEXT PRIMARY KEY,
            size {bigint} NOT NULL,
            refs INTEGER NOT NULL
        )""",
    ],
]
"""Index i holds schema version i + 1."""

SCHEMA_VERSION = len(MIGRATIONS)

CREATE_VERSIONS = "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)"


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer OASR than this one."""
