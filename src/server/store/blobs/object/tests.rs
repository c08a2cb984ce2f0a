//! Against the real S3 server of `.ci/services up` (s3s-fs): each test under its own random
//! prefix of `SNAPVIEW_TEST_BLOBS`, with its own cache folders.

use super::*;
use std::time::Instant;

fn random_hex(bytes: usize) -> String {
    let mut random = vec![0u8; bytes];
    getrandom::fill(&mut random).expect("random bytes");
    hex::encode(random)
}

/// A fresh prefix of the test bucket; a missing variable is a failure, never a skip.
fn test_url() -> String {
    let base = std::env::var("SNAPVIEW_TEST_BLOBS").expect(
        "SNAPVIEW_TEST_BLOBS is not set: run `eval \"$(bash .ci/services up)\"` first (it starts the S3 server these tests use)",
    );
    format!("{}/{}", base.trim_end_matches('/'), random_hex(8))
}

fn random_id() -> SnapshotId {
    SnapshotId::parse(&random_hex(8)).expect("16 hex digits")
}

/// A backend on `url` with its own cache folder (kept alive by the returned guard).
fn open(url: &str, cache_bytes: u64) -> (ObjectBlobs, tempfile::TempDir) {
    let cache = tempfile::Builder::new()
        .prefix("i21-objects-cache-")
        .tempdir()
        .expect("cache dir");
    let blobs = ObjectBlobs::open(url, cache.path(), cache_bytes).expect("open the object store");
    (blobs, cache)
}

/// A file of `len` bytes (a pattern seeded by `seed`) in the backend's temp folder.
fn temp_file(blobs: &ObjectBlobs, len: usize, seed: u8) -> (PathBuf, Vec<u8>) {
    let bytes: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let path = blobs.temp_dir().join(format!("upload-{}", random_hex(4)));
    std::fs::write(&path, &bytes).expect("write temp file");
    (path, bytes)
}

/// A new blob of `len` bytes put through `blobs`: its id and bytes.
fn stored(blobs: &ObjectBlobs, len: usize, seed: u8) -> (SnapshotId, Vec<u8>) {
    let id = random_id();
    let (temp, bytes) = temp_file(blobs, len, seed);
    blobs.put(&id, &temp).expect("put");
    (id, bytes)
}

/// Every key under the backend's prefix.
fn keys(blobs: &ObjectBlobs) -> Vec<String> {
    let remote = blobs.remote.clone();
    let mut keys: Vec<String> = blobs.runtime.run(async move {
        let prefix = remote.prefix_path();
        remote
            .store
            .list(prefix.as_ref())
            .map_ok(|meta| meta.location.to_string())
            .try_collect::<Vec<String>>()
            .await
            .expect("list")
    });
    keys.sort();
    keys
}

#[test]
fn put_exists_entries_local_remove_round_trip() {
    let url = test_url();
    let (blobs, cache) = open(&url, 1 << 30);
    let id = random_id();
    assert!(!blobs.exists(&id).expect("exists"));
    let (temp, bytes) = temp_file(&blobs, 3000, 1);
    blobs.put(&id, &temp).expect("put");
    assert!(!temp.exists(), "put consumes its temporary file");
    assert!(blobs.exists(&id).expect("exists"));

    let entries = blobs.entries().expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].id.as_ref(), Some(&id));
    assert_eq!(entries[0].bytes, 3000);
    assert!(
        entries[0]
            .location
            .ends_with(&format!("blobs/{id}.snapshot"))
    );
    assert!(entries[0].modified_ms > 0);

    // The uploaded file became the cache's copy.
    let local = blobs.local(&id).expect("local");
    assert!(local.starts_with(cache.path()));
    assert_eq!(std::fs::read(&local).expect("read"), bytes);

    // Putting the same bytes again is harmless (skipped: the object is there).
    let (again, _) = temp_file(&blobs, 3000, 1);
    blobs.put(&id, &again).expect("put again");

    blobs.remove(&id).expect("remove");
    assert!(!blobs.exists(&id).expect("exists"));
    assert!(blobs.entries().expect("entries").is_empty());
    assert!(!local.exists(), "remove drops the cached copy too");
    match blobs.local(&id) {
        Err(StoreError::Io(error)) => assert_eq!(error.kind(), std::io::ErrorKind::NotFound),
        other => panic!("a removed blob is not found, got {other:?}"),
    }
    blobs.remove(&id).expect("removing what is gone is fine");
    assert_eq!(keys(&blobs), Vec::<String>::new());
    blobs.check().expect("the store answers");
    assert_eq!(blobs.kind(), "s3");
}

#[test]
fn a_large_file_goes_up_in_parts_and_comes_down_into_an_empty_cache() {
    let url = test_url();
    let (uploader, _cache) = open(&url, 1 << 30);
    let len = 40 << 20;
    let (id, bytes) = stored(&uploader, len, 7);
    // 40 MiB in 8 MiB parts, at most PARTS_IN_FLIGHT of them in memory at once.
    assert_eq!(uploader.parts_put(), 5);
    assert_eq!(
        keys(&uploader),
        vec![format!(
            "{}/blobs/{id}.snapshot",
            url.trim_start_matches("s3://snapview/")
        )],
        "the object, and no marker left behind"
    );

    let (reader, cache) = open(&url, 1 << 30);
    let local = reader.local(&id).expect("download into an empty cache");
    assert!(local.starts_with(cache.path()));
    assert_eq!(std::fs::metadata(&local).expect("meta").len(), len as u64);
    assert!(
        std::fs::read(&local).expect("read") == bytes,
        "the bytes came down whole"
    );
    let tmp_left: Vec<_> = std::fs::read_dir(reader.temp_dir()).expect("tmp").collect();
    assert!(
        tmp_left.is_empty(),
        "the download's temporary file was renamed"
    );
}

#[test]
fn concurrent_reads_of_one_blob_download_it_once() {
    let url = test_url();
    let (uploader, _cache) = open(&url, 1 << 30);
    let (id, bytes) = stored(&uploader, 200_000, 3);

    let (reader, _reader_cache) = open(&url, 1 << 30);
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| {
                let local = reader.local(&id).expect("local");
                assert_eq!(std::fs::read(local).expect("read"), bytes);
            });
        }
    });
    assert_eq!(reader.downloads(), 1, "six readers, one download");
}

#[test]
fn the_cache_evicts_least_recently_used_files_beyond_its_bound() {
    let url = test_url();
    let (uploader, _cache) = open(&url, 1 << 30);
    let ids: Vec<SnapshotId> = (0..4).map(|n| stored(&uploader, 1000, n).0).collect();
    let (big, _) = stored(&uploader, 5000, 9);

    // Room for three of the 1000-byte blobs.
    let (reader, _reader_cache) = open(&url, 3500);
    let cached = |id: &SnapshotId| reader.cache.path(Kind::Blob, id).exists();
    for id in &ids[..3] {
        reader.local(id).expect("local");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ids[0] used again: ids[1] is now the least recently used.
    reader.local(&ids[0]).expect("local");
    std::thread::sleep(Duration::from_millis(20));
    reader.local(&ids[3]).expect("local");
    assert!(cached(&ids[0]) && cached(&ids[2]) && cached(&ids[3]));
    assert!(!cached(&ids[1]), "the least recently used went");
    assert!(reader.cache.evict(None) <= 3500);

    // Larger than the whole cache: still served, alone; the next file evicts it first.
    let local = reader
        .local(&big)
        .expect("a blob larger than the cache is served");
    assert_eq!(std::fs::metadata(&local).expect("meta").len(), 5000);
    assert!(
        ids.iter().all(|id| !cached(id)),
        "everything else made room"
    );
    std::thread::sleep(Duration::from_millis(20));
    reader.local(&ids[1]).expect("local");
    assert!(!cached(&big), "the oversized file goes first");
    assert!(cached(&ids[1]));
}

#[test]
fn an_index_published_by_one_replica_is_fetched_by_another() {
    let url = test_url();
    let (first, _first_cache) = open(&url, 1 << 30);
    let (second, _second_cache) = open(&url, 1 << 30);
    let (id, _) = stored(&first, 100, 1);

    assert!(!second.fetch_index(&id).expect("nothing to fetch yet"));
    let index = first.index_path(&id);
    std::fs::write(&index, b"an index's bytes").expect("write index");
    first.publish_index(&id).expect("publish");
    assert_ne!(first.index_path(&id), second.index_path(&id));
    assert!(second.fetch_index(&id).expect("fetch"));
    assert_eq!(
        std::fs::read(second.index_path(&id)).expect("read"),
        b"an index's bytes"
    );

    first.remove_index(&id).expect("remove index");
    assert!(!index.exists());
    let (third, _third_cache) = open(&url, 1 << 30);
    assert!(!third.fetch_index(&id).expect("gone from the store"));
    // The second replica's copy stays until its own removal; the blob is untouched.
    assert!(second.exists(&id).expect("exists"));
}

#[test]
fn sweep_aborts_a_dead_uploaders_multipart_upload() {
    let url = test_url();
    let (blobs, _cache) = open(&url, 1 << 30);
    let id = random_id();
    let remote = blobs.remote.clone();
    let key = remote.key("blobs", &format!("{id}{BLOB_SUFFIX}"));
    // A dead uploader: a multipart upload with one part and its marker, then nothing (the
    // process was killed before completing or aborting).
    let multipart_id = blobs.runtime.run({
        let (remote, key) = (remote.clone(), key.clone());
        async move {
            let multipart_id = remote
                .multipart
                .create_multipart(&key)
                .await
                .expect("create");
            remote
                .multipart
                .put_part(&key, &multipart_id, 0, vec![7u8; 5 << 20].into())
                .await
                .expect("part");
            let marker = Marker {
                key: key.to_string(),
                multipart_id: multipart_id.clone(),
                started_ms: now_ms(),
            };
            remote
                .store
                .put(
                    &remote.key("uploads", &format!("{multipart_id}.json")),
                    serde_json::to_string(&marker).expect("json").into(),
                )
                .await
                .expect("marker");
            multipart_id
        }
    });
    let s3_folder = std::path::PathBuf::from(
        std::env::var("SNAPVIEW_SERVICES_DIR").unwrap_or_else(|_| "/tmp/snapview-services".into()),
    )
    .join("s3");
    let parts_on_disk = || {
        std::fs::read_dir(&s3_folder)
            .map(|dir| {
                dir.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .contains(multipart_id.as_str())
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let s3s_fs_here = s3_folder.is_dir();
    if s3s_fs_here {
        assert!(
            parts_on_disk() > 0,
            "s3s-fs keeps the unfinished part in {}",
            s3_folder.display()
        );
    }

    // A fresh marker is a live uploader's: kept.
    assert_eq!(blobs.sweep(&|_| true).expect("sweep"), (0, 0));
    assert_eq!(keys(&blobs).len(), 1);

    let blobs = blobs.with_sweep_ages(SweepAges {
        abandoned_upload: Duration::ZERO,
        ..SweepAges::default()
    });
    assert_eq!(blobs.sweep(&|_| true).expect("sweep"), (0, 1));
    assert_eq!(keys(&blobs), Vec::<String>::new(), "marker gone, no object");
    assert!(!blobs.exists(&id).expect("exists"));
    if s3s_fs_here {
        assert_eq!(
            parts_on_disk(),
            0,
            "the aborted upload's parts are gone from s3s-fs's folder"
        );
    }
}

#[test]
fn sweep_removes_old_orphans_indexes_without_blobs_and_stale_temporary_files() {
    let url = test_url();
    let (blobs, _cache) = open(&url, 1 << 30);
    let (kept, _) = stored(&blobs, 100, 1);
    let (orphan, _) = stored(&blobs, 100, 2);
    let indexed_only = random_id();
    // An index whose blob was never stored (or is gone).
    std::fs::write(blobs.index_path(&indexed_only), b"index").expect("write index");
    blobs.publish_index(&indexed_only).expect("publish");
    std::fs::write(blobs.temp_dir().join("dead-writer"), b"x").expect("temp file");
    let is_orphan = |entry: &BlobEntry| entry.id.as_ref() == Some(&orphan);

    // The orphan is too young: another replica may be about to commit its row.
    assert_eq!(blobs.sweep(&is_orphan).expect("sweep"), (0, 1));
    assert!(blobs.exists(&orphan).expect("exists"));
    assert!(
        blobs.temp_dir().join("dead-writer").exists(),
        "a fresh temp file is kept"
    );

    let blobs = blobs.with_sweep_ages(SweepAges {
        abandoned_upload: Duration::ZERO,
        orphan_blob: Duration::ZERO,
        stale_temp: Duration::ZERO,
    });
    assert_eq!(blobs.sweep(&is_orphan).expect("sweep"), (1, 1));
    assert!(!blobs.exists(&orphan).expect("exists"));
    assert!(blobs.exists(&kept).expect("exists"));
    assert!(!blobs.cache.path(Kind::Blob, &orphan).exists());
    assert!(!blobs.temp_dir().join("dead-writer").exists());
    let prefix = url.trim_start_matches("s3://snapview/");
    assert_eq!(
        keys(&blobs),
        vec![format!("{prefix}/blobs/{kept}.snapshot")]
    );
}

#[test]
fn an_unreachable_store_is_unavailable_within_seconds() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let cache = tempfile::tempdir().expect("cache dir");
    let blobs = ObjectBlobs::open_at(
        "s3://snapview/outage",
        Some(&format!("http://127.0.0.1:{port}")),
        cache.path(),
        1 << 20,
    )
    .expect("open needs no answer");
    let id = random_id();
    let fails_fast = |what: &str, call: &dyn Fn() -> Result<(), StoreError>| {
        let started = Instant::now();
        match call() {
            Err(StoreError::Unavailable {
                what: "object storage",
                reason,
            }) => {
                assert!(reason.contains("127.0.0.1"), "{what}: {reason}");
            }
            other => panic!("{what}: expected Unavailable, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: an outage fails fast, not after {:?}",
            started.elapsed()
        );
    };
    fails_fast("check", &|| blobs.check());
    fails_fast("exists", &|| blobs.exists(&id).map(drop));
    fails_fast("local", &|| blobs.local(&id).map(drop));
    fails_fast("entries", &|| blobs.entries().map(drop));
    fails_fast("sweep", &|| blobs.sweep(&|_| false).map(drop));
}

#[test]
fn urls_that_are_not_s3_are_refused_with_a_sentence() {
    let cache = tempfile::tempdir().expect("cache dir");
    for url in ["gs://bucket/x", "s3://", "/a/folder"] {
        match ObjectBlobs::open(url, cache.path(), 1) {
            Err(StoreError::Io(error)) => {
                assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
                assert!(error.to_string().contains(url), "{error}");
            }
            Err(other) => panic!("{url}: {other}"),
            Ok(_) => panic!("{url} was accepted"),
        }
    }
}
