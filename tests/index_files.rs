//! What sits at a stored index's path is opened only if it is a regular file (issue 18, item
//! 10), over TCP against the real binary restarted on the same data folder: a FIFO there no
//! longer hangs the snapshot, a symlink is not followed (and what it names is left alone), both
//! are rebuilt from the pickle; and a dead writer's temporary index is removed at the next start
//! whatever its age, while one a live writer holds (its `flock`) is kept.

use crate::common;

use common::served::{Served, wait_until};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn index_path(data: &Path, id: &str) -> PathBuf {
    data.join("indexes").join(format!("{id}.snapidx"))
}

fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// A view of `id` that needs the snapshot loaded: its status and how long it took, within
/// 20 s (the load is bounded; a hung one is a failure, not a wait).
fn timeline(server: &Served, id: &str) -> (u16, Duration) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let started = Instant::now();
    let status = agent
        .get(&server.url(&format!("/api/snapshots/{id}/timeline?device=0&width=100")))
        .call()
        .map(|r| r.status().as_u16())
        .unwrap_or_else(|e| {
            panic!(
                "no answer within 20 s ({e}): the load hung; log:\n{}",
                server.log_text()
            )
        });
    (status, started.elapsed())
}

/// A server on `data` whose parse lease lives a second: each server here is killed once its
/// index file appears, which can be before the write's thread releases the lease, and the next
/// server would wait out a killed holder's full lease (30 s) before parsing.
fn start(data: &Path) -> Served {
    Served::builder()
        .data_dir(data)
        .env("SNAPVIEW_TEST_LEASE_TTL_MS", "1000")
        .start()
}

#[test]
fn a_fifo_or_symlink_at_the_index_path_is_refused_and_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let id = {
        let server = start(&data);
        let id = server.upload_streams();
        let index = index_path(&data, &id);
        wait_until("the index is written", Duration::from_secs(30), || {
            is_regular(&index)
        });
        id
    };
    let index = index_path(&data, &id);

    // A FIFO: opening it for reading used to wait for a writer forever.
    std::fs::remove_file(&index).expect("remove");
    let made = std::process::Command::new("mkfifo")
        .arg(&index)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    {
        let server = start(&data);
        let (status, took) = timeline(&server, &id);
        assert_eq!(status, 200, "{}", server.log_text());
        assert!(took < Duration::from_secs(10), "{took:?}");
        let log = server.log_text();
        assert!(
            log.contains("the index path holds a FIFO, not a regular file"),
            "the log says why: {log}"
        );
        wait_until("the index is rebuilt", Duration::from_secs(30), || {
            is_regular(&index)
        });
    }

    // A symlink to a sound index of this very snapshot: not followed, not written through.
    let aside = dir.path().join("elsewhere.snapidx");
    std::fs::rename(&index, &aside).expect("move aside");
    let before = std::fs::read(&aside).expect("aside");
    std::os::unix::fs::symlink(&aside, &index).expect("symlink");
    {
        let server = start(&data);
        let (status, _) = timeline(&server, &id);
        assert_eq!(status, 200, "{}", server.log_text());
        wait_until("the index is rebuilt", Duration::from_secs(30), || {
            is_regular(&index)
        });
        let log = server.log_text();
        assert!(
            log.contains("the index path holds a symbolic link"),
            "the log says why: {log}"
        );
        assert!(
            !log.contains("opened from its stored index"),
            "the symlink was followed: {log}"
        );
    }
    assert_eq!(
        std::fs::read(&aside).expect("aside"),
        before,
        "what the symlink named is untouched"
    );
}

#[test]
fn a_dead_writers_temporary_index_is_removed_at_start_and_a_live_ones_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    drop(Served::start(&data, &[]));
    let indexes = data.join("indexes");
    // Left by a writer killed with -9 a moment ago: young, and nobody holds its lock.
    let dead = indexes.join("0123456789abcdef.snapidx.tmp-999999-0");
    std::fs::write(&dead, vec![7u8; 4096]).expect("dead temp");
    // Being written by another server on the same folder: it holds the lock.
    let live = indexes.join("fedcba9876543210.snapidx.tmp-999998-0");
    let held = std::fs::File::create(&live).expect("live temp");
    held.lock().expect("lock");

    let server = Served::start(&data, &[]);
    assert!(!dead.exists(), "{}", server.log_text());
    assert!(live.exists(), "a live writer's file is kept");
    drop(server);
    // Once its writer is gone, the next start removes it too.
    drop(held);
    let server = Served::start(&data, &[]);
    assert!(!live.exists(), "{}", server.log_text());
}
