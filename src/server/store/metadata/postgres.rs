//! The rows in PostgreSQL (`--database postgres://…`): the same tables and migrations as
//! SQLite's, through `tokio-postgres` and a `deadpool-postgres` pool run on a runtime of this
//! backend's own ([`BlockingRuntime`]), so the store's blocking methods can call it from anywhere.
//!
//! Several replicas share one database, so what SQLite's file lock gives for free is asked of
//! PostgreSQL explicitly:
//!
//! - **One writer at a time**: every [`Metadata::write`] (and every new refused-writes row)
//!   holds the transaction-scoped advisory lock [`WRITE_LOCK`] from its first statement to its
//!   commit, so writes are serial across replicas and the audit log's `seq` (taken inside the
//!   lock) increases in the order writes commit.
//! - **Migrations once**: they run at [`Postgres::connect`] in one transaction holding
//!   [`MIGRATION_LOCK`], so replicas starting together apply each migration once; a database at a
//!   newer version than this binary knows is refused, not written to.
//! - **A dead database fails requests fast**: connections, waits for a free connection and
//!   statements are all bounded ([`Limits`]); a connection the server dropped (a restart, an
//!   administrator's `pg_terminate_backend`) is checked out of the pool only after a test query,
//!   so the pool replaces it by itself.
//!
//! TLS is not built in (`NoTls`): the database is expected on a private network or behind a local
//! proxy; a URL asking for `sslmode=require` is refused by the driver with a clear error.

use super::{Change, Metadata, StoredRow, Tx, TxWork};
use crate::server::store::runtime::BlockingRuntime;
use crate::server::store::{AuditEntry, MAX_REFUSED_ROWS, Record, SnapshotId, StoreError, now_ms};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;

#[cfg(test)]
mod tests;

/// `SELECT <the columns [`stored_row`] reads> …` as one `&'static str`, so the statement cache
/// keys on it.
macro_rules! select_rows {
    ($tail:literal) => {
        concat!(
            "SELECT id, name, filename, size_bytes, uploaded_at_ms, grp, summary, deleted_at_ms, roles",
            $tail
        )
    };
}

/// What the errors of this backend call it.
const DATABASE: &str = "the database";

/// The advisory lock every write holds (`pg_advisory_xact_lock`): one writer at a time across
/// replicas. The number is arbitrary but fixed: every replica must use the same one ("snapview"
/// as ASCII, then `w`).
const WRITE_LOCK: i64 = 0x736e_6170_7669_6577;
/// The advisory lock the migrations hold at start-up, distinct from [`WRITE_LOCK`] so a replica
/// migrating never waits for another's long write ("snapview" as ASCII, then `m`).
const MIGRATION_LOCK: i64 = 0x736e_6170_7669_656d;

/// The schema, one step per version (version `n` is `MIGRATIONS[n - 1]`), numbered as SQLite's
/// list is: a change to what is stored is a new step appended to both lists, never an edit of an
/// old one.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: snapshots and the audit log.
    "CREATE TABLE snapshots (
         id TEXT PRIMARY KEY,
         name TEXT NOT NULL,
         filename TEXT NOT NULL,
         size_bytes BIGINT NOT NULL,
         uploaded_at_ms BIGINT NOT NULL,
         grp TEXT NOT NULL DEFAULT '',
         summary TEXT NOT NULL
     );
     CREATE INDEX snapshots_uploaded ON snapshots (uploaded_at_ms);
     CREATE TABLE audit (
         seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         at_ms BIGINT NOT NULL,
         actor TEXT,
         action TEXT NOT NULL,
         snapshot_id TEXT,
         detail TEXT NOT NULL DEFAULT '{}'
     );
     CREATE INDEX audit_snapshot ON audit (snapshot_id);
     CREATE INDEX audit_action ON audit (action, seq);",
    // 2: the trash.
    "ALTER TABLE snapshots ADD COLUMN deleted_at_ms BIGINT;",
    // 3: a snapshot's own role rules (NULL: the server's).
    "ALTER TABLE snapshots ADD COLUMN roles TEXT;",
    // 4: leases (one replica at a time on a piece of work).
    "CREATE TABLE leases (
         name TEXT PRIMARY KEY,
         holder TEXT NOT NULL,
         expires_at_ms BIGINT NOT NULL
     );",
];

/// The bounds on waiting for the database, so a dead or hung one makes requests fail within
/// seconds (503) instead of piling them up.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// Connections this process opens at most (the pool's size).
    pub(crate) pool_size: usize,
    /// Opening one connection, TCP and start-up together.
    pub(crate) connect: Duration,
    /// Waiting for a free connection when all are in use.
    pub(crate) pool_wait: Duration,
    /// One statement, the wait for [`WRITE_LOCK`] included (`statement_timeout`).
    pub(crate) statement: Duration,
    /// A transaction left open without a statement running (a hung replica holding the write
    /// lock): the server ends it and frees the lock (`idle_in_transaction_session_timeout`).
    pub(crate) idle_in_transaction: Duration,
    /// [`Metadata::check`]'s round trip, the wait for a connection included.
    pub(crate) check: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            pool_size: 16,
            connect: Duration::from_secs(5),
            pool_wait: Duration::from_secs(5),
            statement: Duration::from_secs(30),
            idle_in_transaction: Duration::from_secs(120),
            check: Duration::from_secs(3),
        }
    }
}

/// Times a write is tried in all when PostgreSQL aborts it to keep transactions serializable
/// (`40001`) or to break a deadlock (`40P01`); both are rare behind the write lock.
const WRITE_ATTEMPTS: u32 = 5;

/// A lease's time to live is clamped to this (a year), so `now + ttl` cannot overflow.
const MAX_LEASE_TTL_MS: i64 = 365 * 24 * 3600 * 1000;

/// Metadata in PostgreSQL.
pub struct Postgres {
    pool: Pool,
    check_timeout: Duration,
    /// Runs the driver's futures for the blocking methods; dropped last, after the pool.
    runtime: BlockingRuntime,
}

impl Postgres {
    /// Connects to the database at `url` (`postgres://user:password@host:port/dbname?…`) and
    /// brings its schema up to this binary's version.
    pub fn connect(url: &str) -> Result<Postgres, StoreError> {
        Self::connect_with(url, Limits::default())
    }

    /// [`Postgres::connect`] with other bounds (the tests' shorter ones).
    pub(crate) fn connect_with(url: &str, limits: Limits) -> Result<Postgres, StoreError> {
        let postgres = Self::open_pool(url, &limits)?;
        postgres.migrate(MIGRATIONS.len())?;
        Ok(postgres)
    }

    /// The pool, without touching the database yet.
    fn open_pool(url: &str, limits: &Limits) -> Result<Postgres, StoreError> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|error| StoreError::Remote {
                what: DATABASE,
                // The URL itself is not repeated: it may hold a password.
                reason: format!(
                    "its URL is not a PostgreSQL URL (postgres://user@host/dbname): {error}"
                ),
            })?;
        config.connect_timeout(limits.connect);
        // A server that vanished without closing the connection (a host gone) is noticed
        // within about a minute instead of the system's two hours.
        config.keepalives_idle(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name("snapview");
        }
        let session = format!(
            "-c statement_timeout={} -c idle_in_transaction_session_timeout={}",
            limits.statement.as_millis(),
            limits.idle_in_transaction.as_millis()
        );
        let options = match config.get_options() {
            Some(theirs) if !theirs.is_empty() => format!("{theirs} {session}"),
            _ => session,
        };
        config.options(&options);
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                // A test query before each checkout: a connection the server dropped is replaced
                // instead of failing the request it was handed to.
                recycling_method: RecyclingMethod::Verified,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(limits.pool_size)
            .wait_timeout(Some(limits.pool_wait))
            .create_timeout(Some(limits.connect))
            .recycle_timeout(Some(limits.connect))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|error| StoreError::Remote {
                what: DATABASE,
                reason: format!("its connection pool could not be made: {error}"),
            })?;
        let runtime =
            BlockingRuntime::new("snapview-postgres", 2).map_err(|error| StoreError::Remote {
                what: DATABASE,
                reason: format!("its driver's threads could not be started: {error}"),
            })?;
        Ok(Postgres {
            pool,
            check_timeout: limits.check,
            runtime,
        })
    }

    /// Applies the migrations up to version `upto` (all of them but in tests) in one
    /// transaction holding [`MIGRATION_LOCK`]; refuses a database at a newer version than
    /// this binary knows.
    fn migrate(&self, upto: usize) -> Result<(), StoreError> {
        let known = MIGRATIONS.len();
        let current = self.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(db_error)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(db_error)?;
            tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
                .await
                .map_err(db_error)?;
            let current: i64 = tx
                .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
                .await
                .map_err(db_error)?
                .get(0);
            let current = usize::try_from(current).unwrap_or(usize::MAX);
            if current > known {
                // Rolled back when `tx` drops.
                return Ok(current);
            }
            for (step, sql) in MIGRATIONS.iter().enumerate().take(upto).skip(current) {
                tx.batch_execute(sql)
                    .await
                    .map_err(|error| StoreError::Remote {
                        what: DATABASE,
                        reason: format!(
                            "its schema could not be brought to version {}: {}",
                            step + 1,
                            describe(&error)
                        ),
                    })?;
            }
            if upto > current {
                tx.batch_execute("DELETE FROM schema_version")
                    .await
                    .map_err(db_error)?;
                tx.execute(
                    "INSERT INTO schema_version (version) VALUES ($1)",
                    &[&(upto as i64)],
                )
                .await
                .map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
            Ok(current)
        })?;
        if current > known {
            return Err(StoreError::Remote {
                what: DATABASE,
                reason: format!(
                    "its schema is at version {current}, newer than this snapview knows \
                     (version {known}): a newer snapview has used it; run that version, or \
                     point this one at another database"
                ),
            });
        }
        if upto > current {
            tracing::info!(from = current, to = upto, "database schema migrated");
        }
        Ok(())
    }

    /// Runs `work` with a connection from the pool, on this backend's runtime.
    fn run<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let pool = self.pool.clone();
        self.runtime.run(async move {
            let client = pool.get().await.map_err(pool_error)?;
            work(client).await
        })
    }

    /// One statement's rows.
    fn query(
        &self,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.run(move |client| async move {
            let statement = client.prepare_cached(sql).await.map_err(db_error)?;
            client
                .query(&statement, &as_params(&params))
                .await
                .map_err(db_error)
        })
    }

    /// One statement's count of rows changed.
    fn execute(&self, sql: &'static str, params: Vec<Param>) -> Result<u64, StoreError> {
        self.run(move |client| async move {
            let statement = client.prepare_cached(sql).await.map_err(db_error)?;
            client
                .execute(&statement, &as_params(&params))
                .await
                .map_err(db_error)
        })
    }

    /// One try of [`Metadata::write`]; the error says whether trying again may succeed.
    fn write_once(&self, work: TxWork<'_>) -> Result<(), (StoreError, bool)> {
        let client = self
            .runtime
            .run({
                let pool = self.pool.clone();
                async move { pool.get().await }
            })
            .map_err(|error| (pool_error(error), false))?;
        let mut tx = PgTx {
            runtime: &self.runtime,
            client: Some(Arc::new(client)),
            open: false,
            retryable: false,
        };
        // Nothing has run yet: a connection that broke here can be replaced and tried again.
        tx.statement("BEGIN", Vec::new())
            .map_err(|error| (error, true))?;
        tx.open = true;
        let done = tx
            .statement(
                "SELECT pg_advisory_xact_lock($1)",
                vec![Param::Int(WRITE_LOCK)],
            )
            .and_then(|_| work(&mut tx));
        match done {
            Ok(()) => {
                let committed = tx.statement("COMMIT", Vec::new());
                if committed.is_ok() {
                    tx.open = false;
                }
                committed.map(drop).map_err(|error| (error, tx.retryable))
            }
            Err(error) => {
                // A failed rollback leaves `open` set: the connection is closed, not reused.
                if tx.statement("ROLLBACK", Vec::new()).is_ok() {
                    tx.open = false;
                }
                Err((error, tx.retryable))
            }
        }
    }
}

/// A statement's parameter, owned so it can travel to the runtime's thread.
#[derive(Debug, Clone)]
enum Param {
    Int(i64),
    Text(String),
    MaybeInt(Option<i64>),
    MaybeText(Option<String>),
}

fn as_params(params: &[Param]) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
    params
        .iter()
        .map(|param| -> &(dyn tokio_postgres::types::ToSql + Sync) {
            match param {
                Param::Int(value) => value,
                Param::Text(value) => value,
                Param::MaybeInt(value) => value,
                Param::MaybeText(value) => value,
            }
        })
        .collect()
}

fn text(value: &str) -> Param {
    Param::Text(value.to_owned())
}

fn stored_row(row: &tokio_postgres::Row) -> Result<StoredRow, StoreError> {
    let read = || -> Result<StoredRow, tokio_postgres::Error> {
        Ok(StoredRow {
            record: Record {
                id: SnapshotId(row.try_get(0)?),
                name: row.try_get(1)?,
                filename: row.try_get(2)?,
                size_bytes: row.try_get::<_, i64>(3)?.max(0) as u64,
                uploaded_at_ms: row.try_get(4)?,
                group: row.try_get(5)?,
                summary: serde_json::Value::Null,
                roles: row.try_get(8)?,
            },
            summary: row.try_get(6)?,
            deleted_at_ms: row.try_get(7)?,
        })
    };
    read().map_err(db_error)
}

/// `record`'s columns as parameters `$1`…`$7` (id to summary) of an insert.
fn record_params(record: &Record) -> Result<Vec<Param>, StoreError> {
    Ok(vec![
        text(record.id.as_str()),
        text(&record.name),
        text(&record.filename),
        Param::Int(i64::try_from(record.size_bytes).unwrap_or(i64::MAX)),
        Param::Int(record.uploaded_at_ms),
        text(&record.group),
        Param::Text(serde_json::to_string(&record.summary)?),
    ])
}

/// A transaction of [`Metadata::write`]: each statement is sent from the caller's thread
/// through the runtime, on the one connection the transaction holds.
struct PgTx<'a> {
    runtime: &'a BlockingRuntime,
    /// Shared with the statement in flight only; `None` once detached.
    client: Option<Arc<Object>>,
    /// Between `BEGIN` and a successful `COMMIT` or `ROLLBACK`.
    open: bool,
    /// A statement failed in a way that makes trying the whole write again worthwhile.
    retryable: bool,
}

impl PgTx<'_> {
    fn send<T, F, Fut>(&mut self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Object>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
    {
        let Some(client) = self.client.clone() else {
            return Err(StoreError::Unavailable {
                what: DATABASE,
                reason: "the connection of this transaction was closed".into(),
            });
        };
        self.runtime.run(work(client)).map_err(|error| {
            if error.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
                || error.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED)
            {
                self.retryable = true;
            }
            db_error(error)
        })
    }

    fn statement(&mut self, sql: &'static str, params: Vec<Param>) -> Result<u64, StoreError> {
        self.send(move |client| async move {
            let statement = client.prepare_cached(sql).await?;
            client.execute(&statement, &as_params(&params)).await
        })
    }

    fn query(
        &mut self,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.send(move |client| async move {
            let statement = client.prepare_cached(sql).await?;
            client.query(&statement, &as_params(&params)).await
        })
    }
}

impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        // Still open: `work` panicked, or the `ROLLBACK` failed. The connection must not go
        // back to the pool inside a transaction holding the write lock, so it is closed instead;
        // the server then rolls back and frees the lock.
        if self.open
            && let Some(client) = self.client.take()
            && let Ok(client) = Arc::try_unwrap(client)
        {
            drop(Object::take(client));
        }
    }
}

impl Tx for PgTx<'_> {
    fn row(&mut self, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError> {
        const SQL: &str = select_rows!(" FROM snapshots WHERE id = $1");
        self.query(SQL, vec![text(id.as_str())])?
            .first()
            .map(stored_row)
            .transpose()
    }

    fn upsert(&mut self, record: &Record) -> Result<(), StoreError> {
        // A trashed row comes back as this upload made it: out of the trash, without rules.
        self.statement(
            "INSERT INTO snapshots
                 (id, name, filename, size_bytes, uploaded_at_ms, grp, summary, deleted_at_ms, roles)
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL)
             ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name,
                 filename = EXCLUDED.filename, size_bytes = EXCLUDED.size_bytes,
                 uploaded_at_ms = EXCLUDED.uploaded_at_ms, grp = EXCLUDED.grp,
                 summary = EXCLUDED.summary, deleted_at_ms = NULL, roles = NULL",
            record_params(record)?,
        )?;
        Ok(())
    }

    fn reindex(&mut self, record: &Record) -> Result<(), StoreError> {
        let mut params = record_params(record)?;
        params.push(Param::MaybeText(record.roles.clone()));
        self.statement(
            "INSERT INTO snapshots
                 (id, name, filename, size_bytes, uploaded_at_ms, grp, summary, deleted_at_ms, roles)
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8)
             ON CONFLICT (id) DO UPDATE SET summary = EXCLUDED.summary,
                 size_bytes = EXCLUDED.size_bytes",
            params,
        )?;
        Ok(())
    }

    fn update(&mut self, id: &SnapshotId, change: &Change) -> Result<bool, StoreError> {
        let id = text(id.as_str());
        let changed = match change {
            Change::Name(name) => self.statement(
                "UPDATE snapshots SET name = $2 WHERE id = $1",
                vec![id, text(name)],
            )?,
            Change::Group(group) => self.statement(
                "UPDATE snapshots SET grp = $2 WHERE id = $1",
                vec![id, text(group)],
            )?,
            Change::DeletedAt(at) => self.statement(
                "UPDATE snapshots SET deleted_at_ms = $2 WHERE id = $1",
                vec![id, Param::MaybeInt(*at)],
            )?,
            Change::Roles { roles, summary } => self.statement(
                "UPDATE snapshots SET roles = $2, summary = $3 WHERE id = $1",
                vec![
                    id,
                    Param::MaybeText(roles.clone()),
                    Param::Text(serde_json::to_string(summary)?),
                ],
            )?,
            Change::Summary(summary) => self.statement(
                "UPDATE snapshots SET summary = $2 WHERE id = $1",
                vec![id, Param::Text(serde_json::to_string(summary)?)],
            )?,
        };
        Ok(changed == 1)
    }

    fn remove(&mut self, id: &SnapshotId) -> Result<(), StoreError> {
        self.statement(
            "DELETE FROM snapshots WHERE id = $1",
            vec![text(id.as_str())],
        )?;
        Ok(())
    }

    fn audit(
        &mut self,
        actor: Option<&str>,
        action: &str,
        id: Option<&SnapshotId>,
        detail: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.statement(
            "INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
             VALUES ($1, $2, $3, $4, $5)",
            vec![
                Param::Int(now_ms()),
                Param::MaybeText(actor.map(str::to_owned)),
                text(action),
                Param::MaybeText(id.map(|id| id.as_str().to_owned())),
                Param::Text(serde_json::to_string(detail)?),
            ],
        )?;
        Ok(())
    }

    fn last_upload_detail(&mut self, id: &SnapshotId) -> Result<Option<String>, StoreError> {
        self.query(
            "SELECT detail FROM audit WHERE snapshot_id = $1 AND action = 'upload'
             ORDER BY seq DESC LIMIT 1",
            vec![text(id.as_str())],
        )?
        .first()
        .map(|row| row.try_get(0).map_err(db_error))
        .transpose()
    }
}

impl Metadata for Postgres {
    fn write(&self, work: TxWork<'_>) -> Result<(), StoreError> {
        let mut attempt = 1;
        loop {
            match self.write_once(&mut *work) {
                Ok(()) => return Ok(()),
                Err((error, true)) if attempt < WRITE_ATTEMPTS => {
                    tracing::debug!(%error, attempt, "a database write is tried again");
                    // A short pause that grows, so writers that collided do not collide again.
                    std::thread::sleep(Duration::from_millis(10 << attempt));
                    attempt += 1;
                }
                Err((error, _)) => return Err(error),
            }
        }
    }

    fn row(&self, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError> {
        const SQL: &str = select_rows!(" FROM snapshots WHERE id = $1");
        self.query(SQL, vec![text(id.as_str())])?
            .first()
            .map(stored_row)
            .transpose()
    }

    fn live_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        // `COLLATE "C"`: ids are ordered by bytes, as SQLite orders them.
        const SQL: &str = select_rows!(
            " FROM snapshots WHERE deleted_at_ms IS NULL
              ORDER BY uploaded_at_ms DESC, id COLLATE \"C\""
        );
        self.query(SQL, Vec::new())?
            .iter()
            .map(stored_row)
            .collect()
    }

    fn all_summaries(&self) -> Result<Vec<(SnapshotId, String)>, StoreError> {
        self.query("SELECT id, summary FROM snapshots", Vec::new())?
            .iter()
            .map(|row| Ok((SnapshotId(row.try_get(0)?), row.try_get(1)?)))
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(db_error)
    }

    fn count(&self) -> Result<u64, StoreError> {
        let rows = self.query("SELECT COUNT(*) FROM snapshots", Vec::new())?;
        let count: i64 = rows
            .first()
            .map_or(Ok(0), |row| row.try_get(0))
            .map_err(db_error)?;
        Ok(count.max(0) as u64)
    }

    fn has_size(&self, size_bytes: u64) -> Result<bool, StoreError> {
        let Ok(size_bytes) = i64::try_from(size_bytes) else {
            return Ok(false);
        };
        Ok(!self
            .query(
                "SELECT 1 FROM snapshots WHERE size_bytes = $1 LIMIT 1",
                vec![Param::Int(size_bytes)],
            )?
            .is_empty())
    }

    fn trashed_before(&self, cutoff_ms: i64) -> Result<Vec<SnapshotId>, StoreError> {
        self.query(
            "SELECT id FROM snapshots WHERE deleted_at_ms IS NOT NULL AND deleted_at_ms <= $1
             ORDER BY deleted_at_ms, id COLLATE \"C\"",
            vec![Param::Int(cutoff_ms)],
        )?
        .iter()
        .map(|row| row.try_get(0).map(SnapshotId))
        .collect::<Result<_, _>>()
        .map_err(db_error)
    }

    fn audit_log(&self, limit: usize, before: Option<i64>) -> Result<Vec<AuditEntry>, StoreError> {
        self.query(
            "SELECT seq, at_ms, actor, action, snapshot_id, detail FROM audit
             WHERE seq < $2 ORDER BY seq DESC LIMIT $1",
            vec![
                Param::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
                Param::Int(before.unwrap_or(i64::MAX)),
            ],
        )?
        .iter()
        .map(|row| {
            let detail: String = row.try_get(5)?;
            Ok(AuditEntry {
                seq: row.try_get(0)?,
                at_ms: row.try_get(1)?,
                actor: row.try_get(2)?,
                action: row.try_get(3)?,
                snapshot_id: row.try_get(4)?,
                detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(db_error)
    }

    fn record_refusals(
        &self,
        row: Option<i64>,
        actor: Option<&str>,
        detail: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        let detail = serde_json::to_string(detail)?;
        let actor = actor.map(str::to_owned);
        if let Some(seq) = row {
            let updated = self.execute(
                "UPDATE audit SET detail = $2, actor = COALESCE(actor, $3)
                 WHERE seq = $1 AND action = 'refused'",
                vec![
                    Param::Int(seq),
                    Param::Text(detail.clone()),
                    Param::MaybeText(actor.clone()),
                ],
            )?;
            if updated == 1 {
                return Ok(seq);
            }
            // Pruned meanwhile: written again as a new row.
        }
        let at_ms = now_ms();
        self.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(db_error)?;
            // Under the write lock, as every other audit row, so `seq` keeps commit order.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
                .await
                .map_err(db_error)?;
            let seq: i64 = tx
                .query_one(
                    "INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
                     VALUES ($1, $2, 'refused', NULL, $3) RETURNING seq",
                    &[&at_ms, &actor, &detail],
                )
                .await
                .map_err(db_error)?
                .get(0);
            tx.execute(
                "DELETE FROM audit WHERE action = 'refused' AND seq <= (
                     SELECT seq FROM audit WHERE action = 'refused'
                     ORDER BY seq DESC LIMIT 1 OFFSET $1)",
                &[&MAX_REFUSED_ROWS],
            )
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            Ok(seq)
        })
    }

    fn try_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<bool, StoreError> {
        // The database's clock, not this replica's: every replica then agrees on when a lease
        // expired, whatever their own clocks say.
        let taken = self.execute(
            "INSERT INTO leases (name, holder, expires_at_ms)
             VALUES ($1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT + $3)
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder,
                 expires_at_ms = EXCLUDED.expires_at_ms
             WHERE leases.holder = EXCLUDED.holder
                 OR leases.expires_at_ms <= EXCLUDED.expires_at_ms - $3",
            vec![
                text(name),
                text(holder),
                Param::Int(ttl_ms.clamp(0, MAX_LEASE_TTL_MS)),
            ],
        )?;
        Ok(taken == 1)
    }

    fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM leases WHERE name = $1 AND holder = $2",
            vec![text(name), text(holder)],
        )?;
        Ok(())
    }

    fn check(&self) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        let limit = self.check_timeout;
        self.runtime.run(async move {
            let round_trip = async {
                let client = pool.get().await.map_err(pool_error)?;
                client.simple_query("SELECT 1").await.map_err(db_error)
            };
            match tokio::time::timeout(limit, round_trip).await {
                Ok(answer) => answer.map(drop),
                Err(_) => Err(StoreError::Unavailable {
                    what: DATABASE,
                    reason: format!("it did not answer within {} s", limit.as_secs_f32()),
                }),
            }
        })
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }
}

/// A driver error as a store error: [`StoreError::Unavailable`] (503, try later) when the
/// database cannot be reached or refuses service now, [`StoreError::Remote`] otherwise.
fn db_error(error: tokio_postgres::Error) -> StoreError {
    let reason = describe(&error);
    if is_unavailable(&error) {
        StoreError::Unavailable {
            what: DATABASE,
            reason,
        }
    } else {
        StoreError::Remote {
            what: DATABASE,
            reason,
        }
    }
}

fn is_unavailable(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        Some(code) => {
            let code = code.code();
            // 08: connection exceptions; 53: out of resources (connections, memory, disk);
            // 57P: the server shutting down or starting; 57014: a statement cancelled by
            // `statement_timeout` (the database is overloaded, or the write lock held too long).
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "57014"
        }
        // No SQLSTATE: the driver's own failures. Those of the connection (connecting, I/O,
        // a timeout) are the server being away; the others (a value of an unexpected type)
        // are this program's mistake.
        None => {
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                if cause.is::<std::io::Error>() {
                    return true;
                }
                source = cause.source();
            }
            let text = error.to_string();
            text.starts_with("error connecting") || text.starts_with("timeout")
        }
    }
}

/// The driver's error in one line: the server's message and code, or the driver's words.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => match std::error::Error::source(error) {
            Some(cause) if !error.to_string().contains(&cause.to_string()) => {
                format!("{error}: {cause}")
            }
            _ => error.to_string(),
        },
    }
}

fn pool_error(error: PoolError) -> StoreError {
    match error {
        PoolError::Backend(error) => db_error(error),
        PoolError::Timeout(_) => StoreError::Unavailable {
            what: DATABASE,
            reason: format!("no connection to it within the time allowed ({error})"),
        },
        PoolError::Closed => StoreError::Unavailable {
            what: DATABASE,
            reason: "its connection pool is closed".into(),
        },
        other => StoreError::Remote {
            what: DATABASE,
            reason: other.to_string(),
        },
    }
}
