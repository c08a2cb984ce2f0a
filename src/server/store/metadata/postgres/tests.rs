//! The PostgreSQL backend against a real server (`.ci/services up`): the shared contract, then
//! what only a shared, remote database has (migrations from each older version, replicas
//! starting together, connections dropped by the server, a dead or hung server, bounded waits).
//! Every test makes a database of its own and drops it at the end.

use super::super::contract::{self, Fresh};
use super::*;
use serde_json::json;
use std::time::Instant;

/// The server's admin URL, from `.ci/services up`; its absence fails the test.
fn admin_url() -> String {
    std::env::var("SNAPVIEW_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "SNAPVIEW_TEST_DATABASE_URL is not set: run `eval \"$(bash .ci/services up)\"` \
             first (the PostgreSQL tests need a real server)"
        )
    })
}

/// Runs `sql` (several statements allowed) on the database at `url`, on a connection of its own.
fn sql(url: &str, sql: &str) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let driver = tokio::spawn(connection);
        let answer = client.simple_query(sql).await.map_err(|e| describe(&e));
        drop(client);
        let _ = driver.await;
        answer
    })
}

/// The first column of the first row `query` answers.
fn value(url: &str, query: &str) -> String {
    sql(url, query)
        .expect("the query runs")
        .into_iter()
        .find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("a row")
}

/// A database of its own on the test server, dropped (best effort) at the end.
struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    fn create() -> Self {
        let admin_url = admin_url();
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).expect("random");
        let name = format!("t_{}", hex::encode(random));
        sql(&admin_url, &format!("CREATE DATABASE {name}")).expect("a test database");
        let url = with_database(&admin_url, &name);
        Self {
            admin_url,
            name,
            url,
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = sql(
            &self.admin_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// `url` (`postgres://…/db?…`) naming database `name` instead.
fn with_database(url: &str, name: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let (base, query) = match url.find('?') {
        Some(at) => url.split_at(at),
        None => (url, ""),
    };
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |at| after_scheme + at);
    format!("{}/{name}{query}", &base[..host_end])
}

fn connect(url: &str) -> Postgres {
    Postgres::connect(url).expect("connects and migrates")
}

fn fresh() -> Fresh {
    let database = TestDatabase::create();
    let url = database.url.clone();
    let again = url.clone();
    let refused = url.clone();
    Fresh {
        meta: Box::new(connect(&url)),
        open_again: Box::new(move || Box::new(connect(&again)) as Box<dyn Metadata>),
        add_refused_rows: Box::new(move |count: i64| {
            sql(
                &refused,
                &format!(
                    "INSERT INTO audit (at_ms, action, detail)
                     SELECT {}, 'refused', '{{\"bulk\": ' || n || '}}'
                     FROM generate_series(1, {count}) AS n",
                    now_ms()
                ),
            )
            .expect("refused rows added");
        }),
        cleanup: Box::new(database),
    }
}

/// The audit log's newest actions, newest first.
fn actions(meta: &Postgres) -> Vec<String> {
    let log = meta.audit_log(10, None).expect("audit");
    log.into_iter().map(|entry| entry.action).collect()
}

fn id(n: u32) -> SnapshotId {
    SnapshotId::parse(&format!("{n:016x}")).expect("an id")
}

#[test]
fn postgres_passes_the_contract() {
    contract::run_all(&fresh);
}

#[test]
fn test_urls_name_their_database() {
    assert_eq!(
        with_database("postgres://u@h:1/snapview", "t_1"),
        "postgres://u@h:1/t_1"
    );
    assert_eq!(
        with_database("postgres://u@h:1/snapview?sslmode=disable", "t_1"),
        "postgres://u@h:1/t_1?sslmode=disable"
    );
    assert_eq!(
        with_database("postgres://u@h:1", "t_1"),
        "postgres://u@h:1/t_1"
    );
}

/// Rows as each older version could hold them, written straight in SQL.
fn rows_at_version(version: usize) -> &'static str {
    match version {
        0 => "",
        1 => {
            "INSERT INTO snapshots (id, name, filename, size_bytes, uploaded_at_ms, grp, summary)
                 VALUES ('0000000000000001', 'old', 'old.pickle', 10, 1000, 'g', '{\"v\":1}');
             INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
                 VALUES (1000, 'alice', 'upload', '0000000000000001', '{\"size_bytes\":10}');"
        }
        2 => {
            "INSERT INTO snapshots (id, name, filename, size_bytes, uploaded_at_ms, grp, summary,
                                    deleted_at_ms)
                 VALUES ('0000000000000001', 'old', 'old.pickle', 10, 1000, 'g', '{\"v\":1}', 5);
             INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
                 VALUES (1000, 'alice', 'upload', '0000000000000001', '{\"size_bytes\":10}');"
        }
        _ => {
            "INSERT INTO snapshots (id, name, filename, size_bytes, uploaded_at_ms, grp, summary,
                                    deleted_at_ms, roles)
                 VALUES ('0000000000000001', 'old', 'old.pickle', 10, 1000, 'g', '{\"v\":1}', 5,
                         'rules');
             INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
                 VALUES (1000, 'alice', 'upload', '0000000000000001', '{\"size_bytes\":10}');"
        }
    }
}

#[test]
fn each_older_version_is_brought_up_with_its_rows() {
    assert_eq!(
        MIGRATIONS.len(),
        4,
        "a new migration: add its rows to rows_at_version"
    );
    for version in 0..MIGRATIONS.len() {
        let database = TestDatabase::create();
        let old = Postgres::open_pool(&database.url, &Limits::default()).expect("a pool");
        old.migrate(version).expect("the older schema");
        drop(old);
        sql(&database.url, rows_at_version(version)).expect("rows of that version");
        if version >= 4 {
            sql(
                &database.url,
                "INSERT INTO leases VALUES ('kept', 'someone', 9999999999999)",
            )
            .expect("a lease");
        }
        let meta = connect(&database.url);
        assert_eq!(
            value(&database.url, "SELECT version FROM schema_version"),
            MIGRATIONS.len().to_string(),
            "from version {version}"
        );
        assert_eq!(
            value(&database.url, "SELECT COUNT(*) FROM schema_version"),
            "1"
        );
        if version >= 1 {
            let row = meta.row(&id(1)).expect("read").expect("the old row kept");
            assert_eq!(row.record.name, "old");
            assert_eq!(row.record.group, "g");
            assert_eq!(row.summary, "{\"v\":1}");
            assert_eq!(row.deleted_at_ms, (version >= 2).then_some(5));
            assert_eq!(
                row.record.roles.as_deref(),
                (version >= 3).then_some("rules")
            );
            let log = meta.audit_log(10, None).expect("audit");
            assert_eq!(log.len(), 1, "the old audit row kept");
            assert_eq!(log[0].detail, json!({"size_bytes": 10}));
        }
        // The newer columns and tables work on the migrated database; the audit log goes on
        // after the old rows' `seq`.
        meta.write(&mut |tx| {
            tx.update(&id(1), &Change::DeletedAt(None))?;
            tx.update(
                &id(1),
                &Change::Roles {
                    roles: Some("new".into()),
                    summary: json!({}),
                },
            )?;
            tx.audit(None, "set_roles", Some(&id(1)), &json!({}))
        })
        .expect("a write");
        let log = meta.audit_log(10, None).expect("audit");
        assert!(log.windows(2).all(|pair| pair[0].seq > pair[1].seq));
        assert!(meta.try_lease("new", "me", 1000).expect("lease"));
        if version >= 4 {
            assert!(
                !meta.try_lease("kept", "me", 1000).expect("lease"),
                "old lease kept"
            );
        }
        // Opening again changes nothing.
        drop(meta);
        connect(&database.url);
    }
}

#[test]
fn a_newer_schema_is_refused() {
    let database = TestDatabase::create();
    drop(connect(&database.url));
    sql(
        &database.url,
        &format!(
            "UPDATE schema_version SET version = {}",
            MIGRATIONS.len() + 1
        ),
    )
    .expect("a newer version");
    let Err(error) = Postgres::connect(&database.url) else {
        panic!("a database at a newer version must be refused");
    };
    let message = error.to_string();
    assert!(
        message.contains("version 5, newer than this snapview knows (version 4)"),
        "{message}"
    );
    assert_eq!(
        value(&database.url, "SELECT version FROM schema_version"),
        "5",
        "left as it was"
    );
}

#[test]
fn replicas_starting_together_migrate_once() {
    let database = TestDatabase::create();
    std::thread::scope(|scope| {
        let starting: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| Postgres::connect(&database.url).map(drop)))
            .collect();
        for replica in starting {
            replica
                .join()
                .expect("no panic")
                .expect("every replica starts");
        }
    });
    assert_eq!(
        value(
            &database.url,
            "SELECT COUNT(*) || ':' || MAX(version) FROM schema_version"
        ),
        format!("1:{}", MIGRATIONS.len())
    );
}

#[test]
fn connections_the_server_dropped_are_replaced() {
    let database = TestDatabase::create();
    let meta = connect(&database.url);
    // Several connections in the pool: concurrent calls each take one.
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..5 {
                    meta.live_rows().expect("read");
                }
            });
        }
    });
    let terminated = value(
        &admin_url(),
        &format!(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = '{}' AND pid <> pg_backend_pid()",
            database.name
        ),
    );
    assert_ne!(terminated, "0", "the pool's connections were there to end");
    // As after a restart of the server: at most one call may fail, then all succeed.
    let failures = (0..3)
        .map(|n| {
            meta.write(&mut |tx| {
                tx.upsert(&Record {
                    id: id(n + 1),
                    name: "after".into(),
                    filename: "f".into(),
                    size_bytes: 1,
                    uploaded_at_ms: 1,
                    group: String::new(),
                    summary: json!({}),
                    roles: None,
                })
            })
        })
        .filter(Result::is_err)
        .count();
    assert!(
        failures <= 1,
        "{failures} calls failed after the connections ended"
    );
    meta.check().expect("ready again");
    assert!(meta.count().expect("count") >= 2);
}

/// A server that takes TCP connections and never answers them (hung), and its URL.
fn hung_server() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("address").port();
    (
        listener,
        format!("postgres://nobody:secret@127.0.0.1:{port}/nothing"),
    )
}

#[test]
fn a_hung_server_fails_within_the_connect_bound() {
    let (_listener, url) = hung_server();
    let started = Instant::now();
    let Err(error) = Postgres::connect(&url) else {
        panic!("nothing answers there");
    };
    let waited = started.elapsed();
    assert!(
        matches!(
            error,
            StoreError::Unavailable {
                what: "the database",
                ..
            }
        ),
        "{error:?}"
    );
    let bound = Limits::default().connect;
    assert_eq!(bound, Duration::from_secs(5));
    assert!(waited >= bound - Duration::from_millis(500), "{waited:?}");
    assert!(waited < bound + Duration::from_secs(2), "{waited:?}");
    assert!(!error.to_string().contains("secret"), "{error}");
}

#[test]
fn a_dead_server_fails_at_once_and_check_is_bounded() {
    // Nothing listens: refused at once.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.local_addr().expect("address").port()
    };
    let started = Instant::now();
    let error = Postgres::connect(&format!("postgres://u@127.0.0.1:{port}/db"))
        .err()
        .expect("nothing listens");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(
        error.to_string().starts_with("the database is unavailable"),
        "{error}"
    );
    // `check` on a hung server answers within its own bound.
    let (_listener, url) = hung_server();
    let limits = Limits {
        check: Duration::from_millis(700),
        ..Limits::default()
    };
    let meta = Postgres::open_pool(&url, &limits).expect("a pool (not connected yet)");
    let started = Instant::now();
    let error = meta.check().expect_err("not ready");
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert_eq!(Limits::default().check, Duration::from_secs(3));
}

#[test]
fn a_url_that_is_not_one_is_refused_without_echoing_it() {
    let error = Postgres::connect("postgres://user:secret@host:notaport/db")
        .err()
        .expect("not a URL");
    let message = error.to_string();
    assert!(message.contains("not a PostgreSQL URL"), "{message}");
    assert!(!message.contains("secret"), "{message}");
}

#[test]
fn waits_for_the_write_lock_are_bounded() {
    let database = TestDatabase::create();
    let limits = Limits {
        statement: Duration::from_millis(300),
        ..Limits::default()
    };
    let a = Postgres::connect_with(&database.url, limits.clone()).expect("a");
    let b = Postgres::connect_with(&database.url, limits).expect("b");
    let (locked, lock_taken) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            a.write(&mut |tx| {
                tx.audit(None, "holder", None, &json!({}))?;
                let _ = locked.send(());
                std::thread::sleep(Duration::from_millis(1200));
                Ok(())
            })
            .expect("the holder commits");
        });
        lock_taken.recv().expect("a holds the lock");
        let started = Instant::now();
        let error = b
            .write(&mut |tx| tx.audit(None, "waiter", None, &json!({})))
            .expect_err("b gives up waiting");
        assert!(started.elapsed() < Duration::from_millis(1000), "bounded");
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
        assert!(error.to_string().contains("statement timeout"), "{error}");
    });
    b.write(&mut |tx| tx.audit(None, "waiter", None, &json!({})))
        .expect("free once a committed");
    assert_eq!(actions(&b), ["waiter", "holder"]);
    assert_eq!(Limits::default().statement, Duration::from_secs(30));
}

#[test]
fn a_hung_writer_loses_the_lock_and_its_changes() {
    let database = TestDatabase::create();
    let limits = Limits {
        idle_in_transaction: Duration::from_millis(300),
        ..Limits::default()
    };
    let hung = Postgres::connect_with(&database.url, limits).expect("hung");
    let other = connect(&database.url);
    let error = hung
        .write(&mut |tx| {
            tx.audit(None, "hung", None, &json!({}))?;
            std::thread::sleep(Duration::from_millis(900));
            Ok(())
        })
        .expect_err("the server ended the idle transaction");
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    let started = Instant::now();
    other
        .write(&mut |tx| tx.audit(None, "next", None, &json!({})))
        .expect("the lock is free");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(actions(&other), ["next"], "the hung write rolled back");
    // The hung instance's pool replaces the connection the server ended.
    hung.check().expect("ready again");
    hung.write(&mut |tx| tx.audit(None, "recovered", None, &json!({})))
        .expect("writes again");
    assert_eq!(
        Limits::default().idle_in_transaction,
        Duration::from_secs(120)
    );
}

#[test]
fn the_pool_is_bounded_and_its_wait_too() {
    let database = TestDatabase::create();
    assert_eq!(
        connect(&database.url).pool.status().max_size,
        16,
        "the default size"
    );
    let limits = Limits {
        pool_size: 2,
        pool_wait: Duration::from_millis(300),
        ..Limits::default()
    };
    let meta = Postgres::connect_with(&database.url, limits).expect("a small pool");
    let (holding, held) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        // Both connections busy: one holds the write lock, the other waits for it.
        for _ in 0..2 {
            let holding = holding.clone();
            let meta = &meta;
            scope.spawn(move || {
                meta.write(&mut |_tx| {
                    let _ = holding.send(());
                    std::thread::sleep(Duration::from_millis(1000));
                    Ok(())
                })
                .expect("commits");
            });
        }
        held.recv().expect("one holds the lock");
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        let error = meta.count().expect_err("no connection free");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_millis(900), "{waited:?}");
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    });
    assert_eq!(Limits::default().pool_wait, Duration::from_secs(5));
}

#[test]
fn a_panicking_write_frees_the_lock() {
    let database = TestDatabase::create();
    let meta = connect(&database.url);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = meta.write(&mut |tx| {
            tx.audit(None, "panicked", None, &json!({}))?;
            panic!("a bug in the work");
        });
    }));
    assert!(panicked.is_err());
    let other = connect(&database.url);
    let started = Instant::now();
    other
        .write(&mut |tx| tx.audit(None, "next", None, &json!({})))
        .expect("the lock is free");
    assert!(started.elapsed() < Duration::from_secs(2));
    meta.write(&mut |tx| tx.audit(None, "same", None, &json!({})))
        .expect("the panicking instance writes again");
    assert_eq!(actions(&other), ["same", "next"]);
}

#[test]
fn errors_of_the_database_itself_are_remote() {
    let database = TestDatabase::create();
    let meta = connect(&database.url);
    sql(&database.url, "DROP TABLE leases").expect("dropped");
    let error = meta.try_lease("x", "me", 1000).expect_err("no table");
    assert!(
        matches!(
            error,
            StoreError::Remote {
                what: "the database",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("leases"), "{error}");
}

#[test]
fn a_list_of_ten_thousand_rows_is_fast() {
    let database = TestDatabase::create();
    let meta = connect(&database.url);
    // A summary row the size of a real one (devices, peaks, notes): about 400 bytes.
    sql(
        &database.url,
        "INSERT INTO snapshots (id, name, filename, size_bytes, uploaded_at_ms, grp, summary)
         SELECT lpad(to_hex(n), 16, '0'), 'snapshot ' || n, 'rank' || n || '.pickle',
                1000000 + n, 1700000000000 + n, 'job ' || (n % 10),
                '{\"devices\":[0,1,2,3],\"peak_bytes\":' || (n * 1000) || ',\"allocated_bytes\":'
                || n || ',\"reserved_bytes\":' || n || ',\"ooms\":0,\"events\":123456,'
                || '\"segments\":789,\"notes\":[\"fragmentation\",\"large_free_blocks\"],'
                || '\"trace_entries\":100000,\"categories\":{\"activations\":1,\"weights\":2,'
                || '\"optimizer\":3,\"unknown\":4},\"max_entries\":100000,'
                || '\"pytorch\":\"2.5.0\",\"padding\":\"' || repeat('x', 100) || '\"}'
         FROM generate_series(1, 10000) AS n",
    )
    .expect("10,000 rows");
    let mut times = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let rows = meta.live_rows().expect("the list");
        times.push(started.elapsed());
        assert_eq!(rows.len(), 10_000);
        assert!(rows[0].record.uploaded_at_ms > rows[1].record.uploaded_at_ms);
    }
    times.sort();
    let median = times[times.len() / 2];
    eprintln!(
        "live_rows of 10,000 rows: median {median:?}, fastest {:?}",
        times[0]
    );
    assert!(median < Duration::from_millis(100), "{median:?}");
}
