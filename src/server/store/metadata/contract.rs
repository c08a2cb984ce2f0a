//! What every [`Metadata`] backend must do, as checks each backend's tests run against a fresh
//! database of its own: `run_all(&|| fresh_backend())`. A check panics on the first difference
//! from the documented behaviour, naming it.
//!
//! The store's core relies on exactly these behaviours (the trash, dedupe, repairs, the audit
//! log, leases), so a backend that passes them all can be put under the core in place of
//! another.

use super::{Change, Metadata, StoredRow, Tx};
use crate::server::store::{MAX_REFUSED_ROWS, Record, SnapshotId, StoreError, now_ms};
use serde_json::json;
use std::time::Duration;

/// A backend under test over a database no other test sees.
pub(crate) struct Fresh {
    /// The backend, over an empty database at the current schema.
    pub(crate) meta: Box<dyn Metadata>,
    /// Opens another instance over the same database: a second replica (PostgreSQL) or another
    /// process on the same file (SQLite).
    pub(crate) open_again: Box<dyn Fn() -> Box<dyn Metadata>>,
    /// Appends `count` `refused` audit rows straight to the database, in one statement (one at
    /// a time through `record_refusals` would take minutes for [`MAX_REFUSED_ROWS`]).
    pub(crate) add_refused_rows: Box<dyn Fn(i64)>,
    /// Dropped last, after every instance: removes the database (a temporary folder, or a
    /// PostgreSQL database of its own).
    pub(crate) cleanup: Box<dyn std::any::Any>,
}

/// One check: a name to report and the behaviour it checks.
pub(crate) type Check = (&'static str, fn(&Fresh));

/// Every check, each to run on a database of its own.
pub(crate) const CHECKS: &[Check] = &[
    ("rows round trip", rows_round_trip),
    ("upsert brings a trashed row back", upsert_over_trashed_row),
    (
        "reindex keeps name, group, trash, rules",
        reindex_keeps_what_people_set,
    ),
    ("update applies each change", update_applies_each_change),
    ("update of a missing row is false", update_of_missing_row),
    ("remove", remove),
    ("live rows: order, trash left out", live_rows_order),
    ("trashed before a cutoff", trashed_before),
    ("a failed write leaves nothing", failed_write_leaves_nothing),
    ("a write sees its own changes", write_sees_its_own_changes),
    ("audit order and paging", audit_order_and_paging),
    ("last upload detail", last_upload_detail),
    ("refusals rows", refusals_rows),
    ("refusals rows are pruned", refusals_pruned),
    ("leases", leases),
    (
        "concurrent writers through two instances",
        concurrent_writers,
    ),
];

/// Runs every check, each against a database of its own from `fresh`.
pub(crate) fn run_all(fresh: &dyn Fn() -> Fresh) {
    for (name, check) in CHECKS {
        eprintln!("contract: {name}");
        let backend = fresh();
        check(&backend);
        let Fresh {
            meta,
            open_again,
            add_refused_rows,
            cleanup,
        } = backend;
        // The instances go before their database.
        drop((meta, open_again, add_refused_rows));
        drop(cleanup);
    }
}

fn id(n: u32) -> SnapshotId {
    let text = format!("{n:016x}");
    SnapshotId::parse(&text).expect("a valid id")
}

fn record(n: u32, uploaded_at_ms: i64) -> Record {
    Record {
        id: id(n),
        name: format!("snapshot {n}"),
        filename: format!("s{n}.pickle"),
        size_bytes: 1000 + u64::from(n),
        uploaded_at_ms,
        group: String::new(),
        summary: json!({"devices": [n], "peak": n * 7}),
        roles: None,
    }
}

fn write(meta: &dyn Metadata, mut work: impl FnMut(&mut dyn Tx) -> Result<(), StoreError>) {
    meta.write(&mut work).expect("the write commits");
}

fn upsert(meta: &dyn Metadata, record: &Record) {
    write(meta, |tx| tx.upsert(record));
}

fn row(meta: &dyn Metadata, n: u32) -> StoredRow {
    meta.row(&id(n)).expect("read").expect("the row is there")
}

fn summary(row: &StoredRow) -> serde_json::Value {
    serde_json::from_str(&row.summary).expect("a summary as JSON")
}

fn rows_round_trip(fresh: &Fresh) {
    let meta = &*fresh.meta;
    assert_eq!(meta.count().expect("count"), 0);
    assert!(meta.row(&id(1)).expect("read").is_none());
    let mut original = record(1, 1_700_000_000_000);
    original.group = "run 7".into();
    original.name = "naïve “quotes” ' and \\".into();
    upsert(meta, &original);
    let stored = row(meta, 1);
    assert_eq!(stored.deleted_at_ms, None);
    assert_eq!(summary(&stored), original.summary);
    let (decoded, error) = stored.decode();
    assert!(error.is_none());
    assert_eq!(decoded, original);
    assert_eq!(meta.count().expect("count"), 1);
    assert!(meta.has_size(1001).expect("has_size"));
    assert!(!meta.has_size(1002).expect("has_size"));
    assert!(
        !meta
            .has_size(u64::MAX)
            .expect("has_size of a size no row can have")
    );
    let summaries = meta.all_summaries().expect("summaries");
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].0, id(1));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&summaries[0].1).expect("JSON"),
        original.summary
    );
    assert_eq!(meta.live_rows().expect("live").len(), 1);
    meta.check().expect("the database answers");
    assert!(["sqlite", "postgres"].contains(&meta.kind()));
}

fn upsert_over_trashed_row(fresh: &Fresh) {
    let meta = &*fresh.meta;
    upsert(meta, &record(1, 1000));
    write(meta, |tx| {
        assert!(tx.update(&id(1), &Change::DeletedAt(Some(5000)))?);
        assert!(tx.update(
            &id(1),
            &Change::Roles {
                roles: Some("[roles]".into()),
                summary: json!({"roles": true}),
            }
        )?);
        Ok(())
    });
    assert_eq!(row(meta, 1).deleted_at_ms, Some(5000));
    let mut again = record(1, 9000);
    again.name = "uploaded again".into();
    again.group = "g".into();
    upsert(meta, &again);
    let stored = row(meta, 1);
    assert_eq!(stored.deleted_at_ms, None, "back out of the trash");
    let (decoded, _) = stored.decode();
    assert_eq!(
        decoded, again,
        "as this upload made it, without the old rules"
    );
    assert_eq!(decoded.roles, None);
    assert_eq!(meta.count().expect("count"), 1);
}

fn reindex_keeps_what_people_set(fresh: &Fresh) {
    let meta = &*fresh.meta;
    // No row: inserted as given.
    let first = record(1, 1000);
    write(meta, |tx| tx.reindex(&first));
    assert_eq!(row(meta, 1).decode().0, first);
    write(meta, |tx| {
        tx.update(&id(1), &Change::Name("kept name".into()))?;
        tx.update(&id(1), &Change::Group("kept group".into()))?;
        tx.update(&id(1), &Change::DeletedAt(Some(4242)))?;
        tx.update(
            &id(1),
            &Change::Roles {
                roles: Some("kept rules".into()),
                summary: json!({"old": true}),
            },
        )?;
        Ok(())
    });
    let mut parsed_again = record(1, 777_777);
    parsed_again.name = "from the blob".into();
    parsed_again.size_bytes = 5555;
    parsed_again.summary = json!({"new": "summary"});
    write(meta, |tx| tx.reindex(&parsed_again));
    let stored = row(meta, 1);
    assert_eq!(stored.deleted_at_ms, Some(4242), "trash kept");
    let (decoded, _) = stored.decode();
    assert_eq!(decoded.name, "kept name");
    assert_eq!(decoded.group, "kept group");
    assert_eq!(decoded.roles.as_deref(), Some("kept rules"));
    assert_eq!(decoded.uploaded_at_ms, 1000);
    assert_eq!(decoded.size_bytes, 5555, "size replaced");
    assert_eq!(
        decoded.summary,
        json!({"new": "summary"}),
        "summary replaced"
    );
}

fn update_applies_each_change(fresh: &Fresh) {
    let meta = &*fresh.meta;
    upsert(meta, &record(1, 1000));
    type Holds = Box<dyn Fn(&StoredRow) -> bool>;
    let cases: Vec<(Change, Holds)> = vec![
        (
            Change::Name("renamed".into()),
            Box::new(|r: &StoredRow| r.record.name == "renamed"),
        ),
        (
            Change::Group("grouped".into()),
            Box::new(|r: &StoredRow| r.record.group == "grouped"),
        ),
        (
            Change::DeletedAt(Some(123)),
            Box::new(|r: &StoredRow| r.deleted_at_ms == Some(123)),
        ),
        (
            Change::DeletedAt(None),
            Box::new(|r: &StoredRow| r.deleted_at_ms.is_none()),
        ),
        (
            Change::Roles {
                roles: Some("rules".into()),
                summary: json!({"with": "rules"}),
            },
            Box::new(|r: &StoredRow| {
                r.record.roles.as_deref() == Some("rules") && summary(r) == json!({"with": "rules"})
            }),
        ),
        (
            Change::Roles {
                roles: None,
                summary: json!({"without": "rules"}),
            },
            Box::new(|r: &StoredRow| {
                r.record.roles.is_none() && summary(r) == json!({"without": "rules"})
            }),
        ),
        (
            Change::Summary(json!({"repaired": 1})),
            Box::new(|r: &StoredRow| summary(r) == json!({"repaired": 1})),
        ),
    ];
    for (change, holds) in cases {
        write(meta, |tx| {
            assert!(tx.update(&id(1), &change)?, "{change:?} finds the row");
            Ok(())
        });
        assert!(holds(&row(meta, 1)), "{change:?} is stored");
    }
}

fn update_of_missing_row(fresh: &Fresh) {
    let meta = &*fresh.meta;
    upsert(meta, &record(1, 1000));
    write(meta, |tx| {
        assert!(!tx.update(&id(2), &Change::Name("nobody".into()))?);
        assert!(!tx.update(&id(2), &Change::DeletedAt(Some(1)))?);
        assert!(!tx.update(&id(2), &Change::Summary(json!({})))?);
        Ok(())
    });
    assert!(meta.row(&id(2)).expect("read").is_none(), "not inserted");
    assert_eq!(
        row(meta, 1).record.name,
        "snapshot 1",
        "another row untouched"
    );
}

fn remove(fresh: &Fresh) {
    let meta = &*fresh.meta;
    upsert(meta, &record(1, 1000));
    upsert(meta, &record(2, 2000));
    write(meta, |tx| {
        tx.remove(&id(1))?;
        // Removing what is not there is not an error (a purge racing another).
        tx.remove(&id(9))
    });
    assert!(meta.row(&id(1)).expect("read").is_none());
    assert_eq!(meta.count().expect("count"), 1);
    assert!(!meta.has_size(1001).expect("has_size"));
}

fn live_rows_order(fresh: &Fresh) {
    let meta = &*fresh.meta;
    upsert(meta, &record(3, 1000));
    upsert(meta, &record(1, 3000));
    upsert(meta, &record(2, 3000));
    upsert(meta, &record(0xab, 2000));
    upsert(meta, &record(4, 5000));
    write(meta, |tx| {
        tx.update(&id(4), &Change::DeletedAt(Some(6000))).map(drop)
    });
    let order: Vec<SnapshotId> = meta
        .live_rows()
        .expect("live")
        .into_iter()
        .map(|row| row.record.id)
        .collect();
    // Newest upload first, ties by id; the trashed row left out.
    assert_eq!(order, vec![id(1), id(2), id(0xab), id(3)]);
    assert_eq!(meta.count().expect("count"), 5, "trashed rows count");
    assert_eq!(meta.all_summaries().expect("summaries").len(), 5);
}

fn trashed_before(fresh: &Fresh) {
    let meta = &*fresh.meta;
    for n in 1..=4 {
        upsert(meta, &record(n, 1000));
    }
    write(meta, |tx| {
        tx.update(&id(1), &Change::DeletedAt(Some(100)))?;
        tx.update(&id(2), &Change::DeletedAt(Some(200)))?;
        tx.update(&id(3), &Change::DeletedAt(Some(300)))?;
        Ok(())
    });
    let mut before = meta.trashed_before(200).expect("trashed");
    before.sort();
    assert_eq!(before, vec![id(1), id(2)], "at the cutoff or before");
    assert!(meta.trashed_before(99).expect("trashed").is_empty());
    assert_eq!(meta.trashed_before(i64::MAX).expect("trashed").len(), 3);
}

fn failed_write_leaves_nothing(fresh: &Fresh) {
    let meta = &*fresh.meta;
    upsert(meta, &record(1, 1000));
    let audit_before = meta.audit_log(100, None).expect("audit").len();
    let mut work = |tx: &mut dyn Tx| -> Result<(), StoreError> {
        tx.upsert(&record(2, 2000))?;
        tx.update(&id(1), &Change::Name("half done".into()))?;
        tx.audit(None, "upload", Some(&id(2)), &json!({}))?;
        Err(StoreError::Io(std::io::Error::other(
            "the blob could not be moved",
        )))
    };
    let outcome = meta.write(&mut work);
    assert!(
        matches!(outcome, Err(StoreError::Io(_))),
        "the work's own error comes back: {outcome:?}"
    );
    assert!(meta.row(&id(2)).expect("read").is_none(), "rolled back");
    assert_eq!(row(meta, 1).record.name, "snapshot 1", "rolled back");
    assert_eq!(
        meta.audit_log(100, None).expect("audit").len(),
        audit_before
    );
    // The backend is still usable after a rollback.
    upsert(meta, &record(3, 3000));
    assert_eq!(meta.count().expect("count"), 2);
}

fn write_sees_its_own_changes(fresh: &Fresh) {
    let meta = &*fresh.meta;
    write(meta, |tx| {
        assert!(tx.row(&id(1))?.is_none());
        tx.upsert(&record(1, 1000))?;
        let inside = tx.row(&id(1))?.expect("its own insert");
        assert_eq!(inside.record.name, "snapshot 1");
        tx.update(&id(1), &Change::DeletedAt(Some(5)))?;
        assert_eq!(tx.row(&id(1))?.expect("row").deleted_at_ms, Some(5));
        tx.audit(Some("alice"), "upload", Some(&id(1)), &json!({"n": 1}))?;
        assert_eq!(
            tx.last_upload_detail(&id(1))?.as_deref(),
            Some(r#"{"n":1}"#)
        );
        Ok(())
    });
}

fn audit_order_and_paging(fresh: &Fresh) {
    let meta = &*fresh.meta;
    assert!(meta.audit_log(10, None).expect("audit").is_empty());
    let started = now_ms();
    for n in 0..25u32 {
        write(meta, |tx| {
            let actor = n.is_multiple_of(2).then_some("alice");
            let snapshot = (!n.is_multiple_of(3)).then(|| id(n));
            tx.audit(actor, "rename", snapshot.as_ref(), &json!({"n": n}))
        });
    }
    let all = meta.audit_log(100, None).expect("audit");
    assert_eq!(all.len(), 25);
    // Newest first: the detail counts down, the seq strictly decreases.
    for (i, entry) in all.iter().enumerate() {
        let n = 24 - i as u32;
        assert_eq!(entry.detail, json!({"n": n}));
        assert_eq!(entry.action, "rename");
        assert_eq!(
            entry.actor.as_deref(),
            n.is_multiple_of(2).then_some("alice")
        );
        assert_eq!(
            entry.snapshot_id.as_deref(),
            (!n.is_multiple_of(3))
                .then(|| id(n))
                .as_ref()
                .map(SnapshotId::as_str)
        );
        assert!(entry.at_ms >= started && entry.at_ms <= now_ms());
    }
    assert!(all.windows(2).all(|pair| pair[0].seq > pair[1].seq));
    // Paging: each page older than the last seen `seq`, together the whole log, in order.
    let mut paged = Vec::new();
    let mut before = None;
    loop {
        let page = meta.audit_log(10, before).expect("page");
        assert!(page.len() <= 10);
        let Some(last) = page.last() else { break };
        before = Some(last.seq);
        paged.extend(page);
    }
    assert_eq!(paged, all);
    assert!(meta.audit_log(0, None).expect("audit").is_empty());
    assert_eq!(
        meta.audit_log(3, Some(all[0].seq)).expect("audit"),
        all[1..4]
    );
    // Detail that is not JSON is not a failure of the log (a hand-edited row): none can be
    // written through the trait, so only well-formed detail is checked here.
}

fn last_upload_detail(fresh: &Fresh) {
    let meta = &*fresh.meta;
    write(meta, |tx| {
        assert_eq!(tx.last_upload_detail(&id(1))?, None);
        tx.audit(None, "upload", Some(&id(1)), &json!({"first": true}))?;
        tx.audit(None, "rename", Some(&id(1)), &json!({"rename": true}))?;
        tx.audit(None, "upload", Some(&id(2)), &json!({"other": true}))?;
        Ok(())
    });
    write(meta, |tx| {
        tx.audit(None, "upload", Some(&id(1)), &json!({"second": true}))?;
        tx.audit(None, "delete", Some(&id(1)), &json!({}))
    });
    write(meta, |tx| {
        let detail = tx.last_upload_detail(&id(1))?.expect("an upload");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&detail).expect("JSON"),
            json!({"second": true}),
            "the newest upload's, not a later entry's of another action"
        );
        Ok(())
    });
}

fn refusals_rows(fresh: &Fresh) {
    let meta = &*fresh.meta;
    let seq = meta
        .record_refusals(None, None, &json!({"count": 1}))
        .expect("a new row");
    let again = meta
        .record_refusals(Some(seq), Some("10.0.0.1"), &json!({"count": 2}))
        .expect("brought up to date");
    assert_eq!(again, seq, "the same row");
    let log = meta.audit_log(10, None).expect("audit");
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].action, "refused");
    assert_eq!(log[0].detail, json!({"count": 2}));
    assert_eq!(
        log[0].actor.as_deref(),
        Some("10.0.0.1"),
        "an actor filled in"
    );
    // An actor once set stays.
    meta.record_refusals(Some(seq), Some("other"), &json!({"count": 3}))
        .expect("updated");
    assert_eq!(
        meta.audit_log(1, None).expect("audit")[0].actor.as_deref(),
        Some("10.0.0.1")
    );
    // A row that is not a refusals row is never written over; a new one is made.
    write(meta, |tx| {
        tx.audit(None, "upload", Some(&id(1)), &json!({"upload": 1}))
    });
    let upload_seq = meta.audit_log(1, None).expect("audit")[0].seq;
    let fresh_seq = meta
        .record_refusals(Some(upload_seq), None, &json!({"count": 1}))
        .expect("a new row");
    assert!(fresh_seq > upload_seq);
    let log = meta.audit_log(10, None).expect("audit");
    assert_eq!(log.len(), 3);
    assert_eq!(
        log[1].detail,
        json!({"upload": 1}),
        "the upload row untouched"
    );
    // A row that is gone (pruned): a new one.
    let missing = meta
        .record_refusals(Some(fresh_seq + 1000), None, &json!({"count": 9}))
        .expect("a new row");
    assert!(missing > fresh_seq);
}

fn refusals_pruned(fresh: &Fresh) {
    let meta = &*fresh.meta;
    write(meta, |tx| {
        tx.audit(None, "upload", Some(&id(1)), &json!({"kept": true}))
    });
    (fresh.add_refused_rows)(MAX_REFUSED_ROWS);
    let newest = meta
        .record_refusals(None, None, &json!({"newest": true}))
        .expect("a new row");
    let limit = usize::try_from(MAX_REFUSED_ROWS).expect("fits") + 10;
    let log = meta.audit_log(limit, None).expect("audit");
    let refused: Vec<_> = log.iter().filter(|e| e.action == "refused").collect();
    assert_eq!(
        refused.len() as i64,
        MAX_REFUSED_ROWS,
        "the oldest refused row went"
    );
    assert_eq!(refused[0].seq, newest, "the newest kept");
    assert_eq!(refused[0].detail, json!({"newest": true}));
    assert!(
        log.iter().any(|e| e.action == "upload"),
        "other rows are never pruned"
    );
    // An update of a pruned row makes a new one, and the count stays bounded.
    let oldest_kept = refused.last().expect("rows").seq;
    let again = meta
        .record_refusals(Some(oldest_kept - 1), None, &json!({"again": true}))
        .expect("a new row");
    assert!(again > newest);
    let refused = meta
        .audit_log(limit, None)
        .expect("audit")
        .into_iter()
        .filter(|e| e.action == "refused")
        .count();
    assert_eq!(refused as i64, MAX_REFUSED_ROWS);
}

fn leases(fresh: &Fresh) {
    let meta = &*fresh.meta;
    assert!(
        meta.try_lease("parse:1", "a", 60_000).expect("lease"),
        "taken"
    );
    assert!(
        meta.try_lease("parse:1", "a", 60_000).expect("lease"),
        "extended by its holder"
    );
    assert!(
        !meta.try_lease("parse:1", "b", 60_000).expect("lease"),
        "refused to another"
    );
    assert!(
        meta.try_lease("parse:2", "b", 60_000).expect("lease"),
        "another name is free"
    );
    meta.release_lease("parse:1", "b").expect("release");
    assert!(
        !meta.try_lease("parse:1", "b", 60_000).expect("lease"),
        "only the holder gives a lease up"
    );
    meta.release_lease("parse:1", "a").expect("release");
    assert!(
        meta.try_lease("parse:1", "b", 300).expect("lease"),
        "free after release"
    );
    assert!(
        !meta.try_lease("parse:1", "a", 60_000).expect("lease"),
        "b's until it expires"
    );
    // Extending moves the expiry on: b keeps it past the first 300 ms.
    std::thread::sleep(Duration::from_millis(150));
    assert!(
        meta.try_lease("parse:1", "b", 400).expect("lease"),
        "extended"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !meta.try_lease("parse:1", "a", 60_000).expect("lease"),
        "still b's"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        meta.try_lease("parse:1", "a", 60_000).expect("lease"),
        "taken after expiry"
    );
    assert!(
        !meta.try_lease("parse:1", "b", 60_000).expect("lease"),
        "the old holder lost it"
    );
    // A second instance (another replica) sees the same leases.
    let other = (fresh.open_again)();
    assert!(!other.try_lease("parse:1", "c", 60_000).expect("lease"));
    assert!(other.try_lease("parse:1", "a", 60_000).expect("lease"));
    // A ttl of 0 (or less) is free to the next who asks.
    assert!(other.try_lease("parse:3", "a", 0).expect("lease"));
    assert!(meta.try_lease("parse:3", "b", -5).expect("lease"));
}

fn concurrent_writers(fresh: &Fresh) {
    const THREADS: u32 = 8;
    const WRITES: u32 = 25;
    let replicas = [(fresh.open_again)(), (fresh.open_again)()];
    upsert(&*fresh.meta, &record(1, 1000));
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let meta = &*replicas[thread as usize % 2];
            scope.spawn(move || {
                for _ in 0..WRITES {
                    // A read-modify-write: a lost update shows as a count short of the total.
                    write(meta, |tx| {
                        let row = tx.row(&id(1))?.expect("the counter row");
                        let count: u32 = row.record.name.parse().unwrap_or(0) + 1;
                        tx.update(&id(1), &Change::Name(count.to_string()))?;
                        tx.audit(
                            Some("writer"),
                            "rename",
                            Some(&id(1)),
                            &json!({"count": count}),
                        )
                    });
                }
            });
        }
    });
    let total = THREADS * WRITES;
    assert_eq!(
        row(&*fresh.meta, 1).record.name,
        total.to_string(),
        "no lost update"
    );
    let log = fresh.meta.audit_log(1000, None).expect("audit");
    let renames: Vec<_> = log.iter().filter(|e| e.action == "rename").collect();
    assert_eq!(renames.len(), total as usize, "every audit row is there");
    // `seq` follows commit order: newest first, the counts run down from the total.
    for (i, entry) in renames.iter().enumerate() {
        assert_eq!(entry.detail, json!({"count": total - i as u32}));
    }
}
