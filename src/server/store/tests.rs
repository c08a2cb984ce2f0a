//! The [`Snapshots`] core's tests, over SQLite and the folder: each write and its audit row, the
//! trash, and the start-up repairs after a crash or a hand-edited folder.

use super::blobs::folder::{BLOB_SUFFIX, Folder};
use super::metadata::sqlite::Sqlite;
use super::*;
use rusqlite::{Connection, params};

/// The default store in `dir`: SQLite and the folder.
fn open_in(dir: &Path) -> Snapshots {
    open(&StoreOptions::local(dir)).expect("open")
}

/// A second connection to the store's database, to damage it as a disk fault or a hand edit
/// would.
fn database(dir: &Path) -> Connection {
    Connection::open(dir.join("snapview.db")).expect("db")
}

fn blob_path(store: &Snapshots, id: &SnapshotId) -> PathBuf {
    store.blob_file(id).expect("blob path")
}

#[test]
fn ids_are_validated_before_touching_paths() {
    assert!(SnapshotId::parse("0123456789abcdef").is_some());
    for bad in [
        "",
        "../../etc/passwd",
        "0123456789ABCDEF",
        "0123456789abcde",
        "0123456789abcdefg",
    ] {
        assert!(SnapshotId::parse(bad).is_none(), "{bad}");
    }
}

fn new_snapshot(id: &SnapshotId, name: &str) -> NewSnapshot {
    NewSnapshot {
        id: id.clone(),
        name: name.into(),
        filename: format!("{name}.pickle"),
        size_bytes: 5,
        group: String::new(),
        summary: serde_json::json!({"devices": []}),
    }
}

fn put_bytes(store: &Snapshots, id: &SnapshotId, name: &str) -> (Record, bool) {
    let temp = store.temp_dir().join(format!("upload-{name}"));
    std::fs::write(&temp, b"bytes").expect("write");
    store
        .put(new_snapshot(id, name), &temp, Some("tester"))
        .expect("put")
}

fn actions(store: &Snapshots) -> Vec<String> {
    let mut log = store.audit_log(100, None).expect("audit");
    log.reverse();
    log.into_iter().map(|e| e.action).collect()
}

#[test]
fn put_get_list_rename_delete_restore_purge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_in(dir.path());
    let id = SnapshotId::from_digest(&[0xab; 32]);
    let (record, created) = put_bytes(&store, &id, "run1");
    assert!(created);
    assert!(blob_path(&store, &id).exists());
    assert_eq!(std::fs::read_dir(store.temp_dir()).expect("tmp").count(), 0);
    let (again, created) = put_bytes(&store, &id, "other");
    assert!(!created);
    assert_eq!(again, record, "the same bytes keep the first record");
    assert_eq!(store.list().expect("list").len(), 1);
    let renamed = store
        .rename(&id, "better", Some("tester"))
        .expect("rename")
        .expect("exists");
    assert_eq!(renamed.name, "better");

    assert!(matches!(
        store.delete(&id, Some("tester")).expect("delete"),
        Lookup::Live(_)
    ));
    assert!(
        blob_path(&store, &id).exists(),
        "a deleted snapshot's file is kept in the trash"
    );
    assert!(store.get(&id).expect("get").is_none());
    assert!(store.list().expect("list").is_empty());
    assert!(matches!(
        store.lookup(&id).expect("lookup"),
        Lookup::Trashed { .. }
    ));
    assert!(
        store.rename(&id, "x", None).expect("rename").is_none(),
        "no rename in the trash"
    );
    assert!(matches!(
        store.delete(&id, None).expect("delete"),
        Lookup::Trashed { .. }
    ));

    let restored = store.restore(&id, Some("tester")).expect("restore");
    assert_eq!(restored.live().expect("live").name, "better");
    assert_eq!(store.list().expect("list").len(), 1);

    store.delete(&id, None).expect("delete");
    // Deleted now: a purge of what was trashed a day ago leaves it; one up to now takes it.
    let day_ago = now_ms() - 86_400_000;
    assert_eq!(
        store.purge_trashed_before(day_ago, None).expect("purge"),
        Purge::default()
    );
    assert!(blob_path(&store, &id).exists());
    let purge = store.purge_trashed_before(now_ms(), None).expect("purge");
    assert_eq!(purge.purged, vec![id.clone()]);
    assert!(!blob_path(&store, &id).exists());
    assert_eq!(store.lookup(&id).expect("lookup"), Lookup::Absent);
    assert_eq!(
        actions(&store),
        ["upload", "rename", "delete", "restore", "delete", "purge"]
    );
    let log = store.audit_log(2, None).expect("audit");
    assert_eq!(log.len(), 2, "the limit holds");
    assert_eq!(log[0].action, "purge", "newest first");
    assert_eq!(store.audit_log(100, None).expect("audit")[1].actor, None);
    assert_eq!(
        store.audit_log(100, None).expect("audit")[2]
            .actor
            .as_deref(),
        Some("tester")
    );
}

#[test]
fn uploading_trashed_bytes_makes_them_live_with_the_new_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_in(dir.path());
    let id = SnapshotId::from_digest(&[0x12; 32]);
    put_bytes(&store, &id, "first");
    store.delete(&id, None).expect("delete");
    let (record, created) = put_bytes(&store, &id, "second");
    assert!(created);
    assert_eq!(record.name, "second");
    assert_eq!(store.get(&id).expect("get"), Some(record));
    let log = store.audit_log(1, None).expect("audit");
    assert_eq!(log[0].detail["was_in_trash"], true);
}

#[test]
fn a_missing_blob_is_unlisted_and_repaired_by_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_in(dir.path());
    let id = SnapshotId::from_digest(&[0x34; 32]);
    put_bytes(&store, &id, "run");
    std::fs::remove_file(blob_path(&store, &id)).expect("remove");
    let listing = store.listing().expect("listing");
    assert!(listing.records.is_empty());
    assert_eq!(listing.unlisted.len(), 1);
    assert!(matches!(
        store.lookup(&id).expect("lookup"),
        Lookup::FileMissing(_)
    ));
    let (record, created) = put_bytes(&store, &id, "again");
    assert!(!created);
    assert_eq!(record.name, "run", "the repair keeps the record");
    assert!(store.get(&id).expect("get").is_some());
    assert_eq!(actions(&store), ["upload", "repair"]);
}

#[test]
fn a_bad_summary_row_is_left_out_not_fatal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_in(dir.path());
    let good = SnapshotId::from_digest(&[0x01; 32]);
    let bad = SnapshotId::from_digest(&[0x02; 32]);
    put_bytes(&store, &good, "good");
    put_bytes(&store, &bad, "bad");
    database(dir.path())
        .execute(
            "UPDATE snapshots SET summary = '{not json' WHERE id = ?1",
            params![bad.as_str()],
        )
        .expect("corrupt");
    let listing = store.listing().expect("the list still answers");
    assert_eq!(listing.records.len(), 1);
    assert_eq!(listing.records[0].id, good);
    assert_eq!(listing.unlisted[0].id, bad);
    // The snapshot itself is still reachable; start-up rebuilds its summary.
    assert!(store.get(&bad).expect("get").is_some());
    let report = store
        .start_up(false, 86_400_000, &|_| {
            Ok(serde_json::json!({"devices": [1]}))
        })
        .expect("start up");
    assert_eq!(report.summaries_repaired, 1);
    assert_eq!(store.list().expect("list").len(), 2);
}

#[test]
fn start_up_sweeps_orphans_and_reindexes_an_empty_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kept = SnapshotId::from_digest(&[0x56; 32]);
    let orphan = SnapshotId::from_digest(&[0x78; 32]);
    {
        let store = open_in(dir.path());
        put_bytes(&store, &kept, "kept");
        std::fs::create_dir_all(blob_path(&store, &orphan).parent().expect("folder"))
            .expect("folder");
        std::fs::write(blob_path(&store, &orphan), b"half").expect("orphan");
        std::fs::write(store.temp_dir().join("upload-1-1"), b"partial").expect("temp");
    }
    let store = open_in(dir.path());
    assert_eq!(std::fs::read_dir(store.temp_dir()).expect("tmp").count(), 0);
    let summarize = |_: &Path| Ok(serde_json::json!({"devices": []}));
    let report = store
        .start_up(false, 86_400_000, &summarize)
        .expect("start");
    assert_eq!(report.orphans_removed, 1);
    assert!(!blob_path(&store, &orphan).exists());
    assert!(blob_path(&store, &kept).exists());

    // The index lost: the blobs rebuild it, names from the audit log when it survived.
    database(dir.path())
        .execute("DELETE FROM snapshots", [])
        .expect("lose rows");
    let report = store
        .start_up(false, 86_400_000, &summarize)
        .expect("start");
    assert_eq!(report.reindexed, 1);
    assert_eq!(store.get(&kept).expect("get").expect("back").name, "kept");
    // With the audit log gone too, the id names it; a blob that does not parse is kept.
    database(dir.path())
        .execute_batch("DELETE FROM snapshots; DELETE FROM audit;")
        .expect("lose all");
    std::fs::write(blob_path(&store, &orphan), b"junk").expect("junk blob");
    let picky = |path: &Path| {
        if path.ends_with(format!("{orphan}{BLOB_SUFFIX}")) {
            Err("not a snapshot".to_owned())
        } else {
            Ok(serde_json::json!({"devices": []}))
        }
    };
    let report = store.start_up(false, 86_400_000, &picky).expect("start");
    assert_eq!(report.reindexed, 1);
    assert_eq!(report.unreadable_blobs.len(), 1);
    assert!(
        blob_path(&store, &orphan).exists(),
        "an unreadable blob is kept"
    );
    assert_eq!(
        store.get(&kept).expect("get").expect("back").name,
        kept.as_str()
    );
}

#[test]
fn an_orphan_blob_cut_short_is_replaced_by_the_next_upload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_in(dir.path());
    let id = SnapshotId::from_digest(&[0x9a; 32]);
    std::fs::create_dir_all(blob_path(&store, &id).parent().expect("folder")).expect("folder");
    std::fs::write(blob_path(&store, &id), b"by").expect("orphan");
    let (_, created) = put_bytes(&store, &id, "run");
    assert!(created);
    assert_eq!(
        std::fs::read(blob_path(&store, &id)).expect("blob"),
        b"bytes"
    );
}

#[test]
fn an_index_without_the_trash_column_is_migrated() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = Connection::open(dir.path().join("snapview.db")).expect("db");
        db.execute_batch(
            "CREATE TABLE snapshots (id TEXT PRIMARY KEY, name TEXT NOT NULL,
             filename TEXT NOT NULL, size_bytes INTEGER NOT NULL,
             uploaded_at_ms INTEGER NOT NULL, grp TEXT NOT NULL DEFAULT '',
             summary TEXT NOT NULL);
             INSERT INTO snapshots VALUES ('0123456789abcdef', 'old', 'old.pickle', 5, 1, '', '{}');",
        )
        .expect("old schema");
    }
    let store = open_in(dir.path());
    let id = SnapshotId::parse("0123456789abcdef").expect("id");
    // Both later columns were added: not trashed, and no role rules of its own.
    assert!(matches!(
        store.lookup(&id).expect("lookup"),
        Lookup::FileMissing(Record { roles: None, .. })
    ));
}

#[test]
fn a_snapshots_role_rules_and_summary_change_together_and_are_audited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_in(dir.path());
    let id = SnapshotId::parse("00000000000000aa").expect("id");
    put_bytes(&store, &id, "a");
    let summary = serde_json::json!({"devices": [], "notes": ["by rules"]});
    let record = store
        .set_roles(&id, Some("[[rule]]"), &summary, Some("tester"))
        .expect("set")
        .expect("live");
    assert_eq!(record.roles.as_deref(), Some("[[rule]]"));
    assert_eq!(record.summary, summary);
    let cleared = store
        .set_roles(&id, None, &serde_json::json!({"devices": []}), None)
        .expect("clear")
        .expect("live");
    assert_eq!(cleared.roles, None);
    let actions: Vec<String> = store
        .audit_log(2, None)
        .expect("audit")
        .into_iter()
        .map(|entry| entry.action)
        .collect();
    assert_eq!(actions, ["remove_roles", "set_roles"]);
    // Not live: nothing written.
    let absent = SnapshotId::parse("00000000000000bb").expect("id");
    assert!(
        store
            .set_roles(&absent, Some("x"), &summary, None)
            .expect("ok")
            .is_none()
    );
}

/// The folder, except that the first blob put is removed again at once: what a purge of the
/// same bytes, or another replica's sweep, does between an upload's put and its row.
struct LosesTheFirstPut {
    folder: Folder,
    lost: std::sync::atomic::AtomicBool,
}

impl blobs::Blobs for LosesTheFirstPut {
    fn temp_dir(&self) -> PathBuf {
        self.folder.temp_dir()
    }
    fn put(&self, id: &SnapshotId, temp_file: &Path) -> Result<(), StoreError> {
        self.folder.put(id, temp_file)?;
        if !self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.folder.remove(id)?;
        }
        Ok(())
    }
    fn exists(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        self.folder.exists(id)
    }
    fn entries(&self) -> Result<Vec<blobs::BlobEntry>, StoreError> {
        self.folder.entries()
    }
    fn remove(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.folder.remove(id)
    }
    fn local(&self, id: &SnapshotId) -> Result<PathBuf, StoreError> {
        self.folder.local(id)
    }
    fn sweep(
        &self,
        orphan: &dyn Fn(&blobs::BlobEntry) -> bool,
    ) -> Result<(usize, usize), StoreError> {
        self.folder.sweep(orphan)
    }
    fn index_path(&self, id: &SnapshotId) -> PathBuf {
        self.folder.index_path(id)
    }
    fn kind(&self) -> &'static str {
        "folder"
    }
    fn fetch_index(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        self.folder.fetch_index(id)
    }
    fn check(&self) -> Result<(), StoreError> {
        self.folder.check()
    }
    fn publish_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.folder.publish_index(id)
    }
    fn remove_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.folder.remove_index(id)
    }
}

#[test]
fn a_blob_removed_before_its_row_is_written_is_put_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Snapshots::new(
        Box::new(Sqlite::open(&dir.path().join("snapview.db")).expect("db")),
        Box::new(LosesTheFirstPut {
            folder: Folder::open(dir.path()).expect("folder"),
            lost: Default::default(),
        }),
    );
    let id = SnapshotId::from_digest(&[0x5e; 32]);
    let (record, created) = put_bytes(&store, &id, "run");
    assert!(created);
    assert_eq!(
        store.get(&id).expect("get"),
        Some(record),
        "live, with its file"
    );
    assert_eq!(
        std::fs::read(blob_path(&store, &id)).expect("blob"),
        b"bytes"
    );
    assert_eq!(
        std::fs::read_dir(store.temp_dir()).expect("tmp").count(),
        0,
        "the spare name is gone"
    );
}
