//! The migrations: a database at every older version, and the layouts from before the schema
//! was versioned, keeps its rows and ends at [`SCHEMA_VERSION`].

use super::*;

const ID: &str = "0123456789abcdef";

/// A row as version 1 stored it (the later columns, when present, take their defaults).
fn insert_v1_row(db: &Connection) {
    db.execute(
        "INSERT INTO snapshots (id, name, filename, size_bytes, uploaded_at_ms, grp, summary)
         VALUES (?1, 'old', 'old.pickle', 5, 1, 'g', '{\"devices\":[]}')",
        params![ID],
    )
    .expect("old row");
    db.execute(
        "INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
         VALUES (1, 'someone', 'upload', ?1, '{}')",
        params![ID],
    )
    .expect("old audit row");
}

/// Opens `path` with today's code and checks the row survived and the schema is current.
fn opens_current_with_the_row(path: &Path) -> Sqlite {
    let store = Sqlite::open(path).expect("open migrates");
    assert_eq!(store.version().expect("version"), SCHEMA_VERSION);
    let id = SnapshotId::parse(ID).expect("id");
    let row = store.row(&id).expect("row").expect("kept");
    assert_eq!(row.record.name, "old");
    assert_eq!(row.record.group, "g");
    assert_eq!(row.deleted_at_ms, None, "not trashed");
    assert_eq!(row.record.roles, None, "the server's rules");
    assert_eq!(store.live_rows().expect("live").len(), 1);
    // Every later table answers: the trash, the leases.
    assert!(store.trashed_before(i64::MAX).expect("trash").is_empty());
    assert!(store.try_lease("parse", "me", 1_000).expect("lease"));
    store
}

#[test]
fn a_database_at_each_older_version_is_brought_up_with_its_rows() {
    for version in 1..=SCHEMA_VERSION {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snapview.db");
        Sqlite::create_at_version(&path, version).expect("older database");
        insert_v1_row(&Connection::open(&path).expect("db"));
        let store = opens_current_with_the_row(&path);
        let audit = store.audit_log(10, None).expect("audit");
        assert_eq!(audit.len(), 1, "version {version}: the audit log is kept");
        assert_eq!(audit[0].actor.as_deref(), Some("someone"));
        drop(store);
        // Opening again finds nothing to do.
        opens_current_with_the_row(&path);
    }
}

/// `snapshots` as it was made before the trash (and the audit log) existed.
const BEFORE_THE_TRASH: &str = "CREATE TABLE snapshots (id TEXT PRIMARY KEY, name TEXT NOT NULL,
     filename TEXT NOT NULL, size_bytes INTEGER NOT NULL,
     uploaded_at_ms INTEGER NOT NULL, grp TEXT NOT NULL DEFAULT '',
     summary TEXT NOT NULL);";

#[test]
fn a_database_from_before_the_trash_is_brought_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("snapview.db");
    {
        let db = Connection::open(&path).expect("db");
        db.execute_batch(BEFORE_THE_TRASH).expect("old schema");
        db.execute(
            "INSERT INTO snapshots VALUES (?1, 'old', 'old.pickle', 5, 1, 'g', '{}')",
            params![ID],
        )
        .expect("old row");
    }
    opens_current_with_the_row(&path);
}

#[test]
fn a_database_from_before_role_rules_is_brought_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("snapview.db");
    {
        let db = Connection::open(&path).expect("db");
        // As the unversioned code made it: every table, the trash column, no roles, no leases.
        MIGRATIONS[0](&db).expect("tables");
        db.execute_batch("ALTER TABLE snapshots ADD COLUMN deleted_at_ms INTEGER")
            .expect("trash column");
        insert_v1_row(&db);
        db.execute(
            "UPDATE snapshots SET deleted_at_ms = 7 WHERE id = ?1",
            params![ID],
        )
        .expect("trashed");
    }
    let store = Sqlite::open(&path).expect("open migrates");
    assert_eq!(store.version().expect("version"), SCHEMA_VERSION);
    let id = SnapshotId::parse(ID).expect("id");
    let row = store.row(&id).expect("row").expect("kept");
    assert_eq!(row.deleted_at_ms, Some(7), "still in the trash");
    assert_eq!(row.record.roles, None);
    assert!(store.try_lease("parse", "me", 1_000).expect("lease"));
}

#[test]
fn a_database_newer_than_this_build_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("snapview.db");
    Sqlite::create_at_version(&path, SCHEMA_VERSION).expect("current");
    Connection::open(&path)
        .expect("db")
        .execute(
            "INSERT INTO schema_version VALUES (?1, 0)",
            params![SCHEMA_VERSION + 1],
        )
        .expect("newer");
    let Err(error) = Sqlite::open(&path) else {
        panic!("a newer schema opened");
    };
    assert!(
        error.to_string().contains("newer than this snapview"),
        "{error}"
    );
}

#[test]
fn leases_go_to_one_holder_until_they_expire_or_are_released() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Sqlite::open(&dir.path().join("snapview.db")).expect("open");
    assert!(store.try_lease("parse:a", "one", 60_000).expect("take"));
    assert!(!store.try_lease("parse:a", "two", 60_000).expect("held"));
    assert!(store.try_lease("parse:a", "one", 60_000).expect("extend"));
    store.release_lease("parse:a", "two").expect("not theirs");
    assert!(
        !store
            .try_lease("parse:a", "two", 60_000)
            .expect("still held")
    );
    store.release_lease("parse:a", "one").expect("release");
    assert!(store.try_lease("parse:a", "two", 0).expect("free"));
    // Expired at once (ttl 0): the next who asks takes it.
    assert!(store.try_lease("parse:a", "one", 60_000).expect("expired"));
}

/// The behaviour every metadata backend must show (`contract.rs`), on SQLite: each check on a
/// file of its own, a second instance being another process on the same file.
#[test]
fn sqlite_passes_the_contract() {
    super::super::contract::run_all(&|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snapview.db");
        let meta: Box<dyn Metadata> = Box::new(Sqlite::open(&path).expect("open"));
        let again = path.clone();
        let refused = path.clone();
        super::super::contract::Fresh {
            meta,
            open_again: Box::new(move || Box::new(Sqlite::open(&again).expect("open again"))),
            add_refused_rows: Box::new(move |count| {
                let db = rusqlite::Connection::open(&refused).expect("connection");
                db.execute(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                     INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
                     SELECT 0, NULL, 'refused', NULL, '{}' FROM n",
                    rusqlite::params![count],
                )
                .expect("refused rows");
            }),
            cleanup: Box::new(dir),
        }
    });
}
