//! The bounded local cache of an object-storage backend (`--cache-dir`, `--cache-size`): the
//! blobs and stored indexes that readers map, fetched on first use and evicted least recently
//! used first once their bytes pass the bound.
//!
//! Layout under the cache folder: `blobs/<id>.snapshot`, `indexes/<id>.snapidx`, and `tmp/`
//! (uploads being received, downloads being written; renamed into place when whole, so a file
//! under `blobs/` or `indexes/` is always complete).
//!
//! Recency is the file's modification time, set to now whenever a file is handed out, so it
//! survives restarts without a separate ledger. Eviction unlinks files: a reader that has the
//! file open or mapped keeps reading it (on Linux an unlinked file lives until its last
//! descriptor and mapping go), so evicting never breaks a reader already holding it. The file
//! being handed out at that moment is never the one evicted.

use super::super::SnapshotId;
use crate::index::FILE_SUFFIX as INDEX_SUFFIX;
use std::collections::HashMap;
use std::fs::{File, FileTimes};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// What every cached blob's file name ends with, after its id.
pub(super) const BLOB_SUFFIX: &str = ".snapshot";

/// Which of the two kinds of cached file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Blob,
    Index,
}

/// The cache folder, its bound, and the per-id locks that make concurrent fetches of one file
/// do the work once.
pub(super) struct Cache {
    root: PathBuf,
    limit_bytes: u64,
    /// One lock per file being fetched, by its cache path: the second caller waits for the
    /// first, then finds the file in place.
    fetching: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    /// Serialises evictions, so two of them never count the same bytes twice.
    evicting: Mutex<()>,
}

impl Cache {
    /// Opens (creating) the cache folder with its three subfolders, and removes what uploads
    /// and downloads a crash or a kill interrupted left in `tmp/`: the cache folder is this
    /// process's own (as the data folder's `tmp/` is, see `Folder::open`), so nothing there is
    /// another's work in flight.
    pub(super) fn open(root: &Path, limit_bytes: u64) -> std::io::Result<Self> {
        for sub in ["blobs", "indexes", "tmp"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        for entry in std::fs::read_dir(root.join("tmp"))?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        Ok(Self {
            root: root.to_path_buf(),
            limit_bytes,
            fetching: Mutex::new(HashMap::new()),
            evicting: Mutex::new(()),
        })
    }

    pub(super) fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Where `id`'s file of `kind` is kept.
    pub(super) fn path(&self, kind: Kind, id: &SnapshotId) -> PathBuf {
        match kind {
            Kind::Blob => self.root.join("blobs").join(format!("{id}{BLOB_SUFFIX}")),
            Kind::Index => self
                .root
                .join("indexes")
                .join(format!("{id}{INDEX_SUFFIX}")),
        }
    }

    /// A fresh temporary file name in `tmp/` for a download of `id`.
    pub(super) fn temp_path(&self, id: &SnapshotId) -> PathBuf {
        let mut random = [0u8; 6];
        let _ = getrandom::fill(&mut random);
        self.tmp_dir()
            .join(format!("{id}.download-{}", hex::encode(random)))
    }

    /// Runs `fetch` holding the lock of `path`, so concurrent callers for one file do its
    /// work once: each re-checks whether the file is there inside `fetch`.
    pub(super) fn with_file_lock<T>(&self, path: &Path, fetch: impl FnOnce() -> T) -> T {
        let lock = {
            let mut locks = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
            locks.entry(path.to_path_buf()).or_default().clone()
        };
        let answer = {
            let _held = lock.lock().unwrap_or_else(PoisonError::into_inner);
            fetch()
        };
        let mut locks = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the map and this call hold it: nobody waits, the entry can go.
        if Arc::strong_count(&lock) == 2 {
            locks.remove(path);
        }
        answer
    }

    /// Marks `path` as just used (its modification time is the cache's recency); true when
    /// the file is there.
    pub(super) fn touch(path: &Path) -> bool {
        let Ok(file) = File::options().write(true).open(path) else {
            return false;
        };
        let now = SystemTime::now();
        // A failed touch only makes the file look older than it is: still served.
        let _ = file.set_times(FileTimes::new().set_accessed(now).set_modified(now));
        true
    }

    /// Removes least recently used files (blobs and indexes together) until the cache holds at
    /// most its bound, never `keep` (the file being handed out now). A file larger than the
    /// whole bound is still kept while it is handed out (the cache overflows for it) and is the
    /// first to go at the next eviction, whatever its recency. Returns the bytes cached after.
    pub(super) fn evict(&self, keep: Option<&Path>) -> u64 {
        let _one_at_a_time = self.evicting.lock().unwrap_or_else(PoisonError::into_inner);
        let mut files = self.cached_files();
        let mut total: u64 = files.iter().map(|f| f.bytes).sum();
        // Oversized files first, then the least recently used.
        files.sort_by_key(|f| (f.bytes <= self.limit_bytes, f.used));
        for file in files {
            if total <= self.limit_bytes {
                break;
            }
            if Some(file.path.as_path()) == keep {
                continue;
            }
            match std::fs::remove_file(&file.path) {
                Ok(()) => {
                    total -= file.bytes;
                    tracing::debug!(path = %file.path.display(), bytes = file.bytes, "evicted from the blob cache");
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    total -= file.bytes;
                }
                Err(error) => {
                    tracing::warn!(path = %file.path.display(), %error, "could not evict a cached file");
                }
            }
        }
        metrics::gauge!("snapview_cache_bytes", "kind" => "blobs").set(total as f64);
        total
    }

    /// Every whole cached file (temporary ones excluded), with its size and last use.
    fn cached_files(&self) -> Vec<CachedFile> {
        let mut files = Vec::new();
        for (sub, suffix) in [("blobs", BLOB_SUFFIX), ("indexes", INDEX_SUFFIX)] {
            let Ok(entries) = std::fs::read_dir(self.root.join(sub)) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let named_right = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.strip_suffix(suffix).and_then(SnapshotId::parse).is_some());
                let Ok(meta) = entry.metadata() else { continue };
                if named_right && meta.is_file() {
                    files.push(CachedFile {
                        path,
                        bytes: meta.len(),
                        used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    });
                }
            }
        }
        files
    }

    /// Removes the cached blobs and indexes whose snapshot `stored` says is no longer in the
    /// store (purged through another replica, or while this one was down): they would only
    /// take room, or be mistaken for the snapshot of the same id uploaded again. Returns how
    /// many went. A file cached after `stored` was listed may go too; it is fetched again.
    pub(super) fn drop_unstored(&self, stored: &dyn Fn(&str) -> bool) -> usize {
        let mut removed = 0;
        for file in self.cached_files() {
            let id = file
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('.').next())
                .unwrap_or_default();
            if !stored(id) && std::fs::remove_file(&file.path).is_ok() {
                tracing::info!(path = %file.path.display(), "sweep: removed a cached file whose snapshot is no longer stored");
                removed += 1;
            }
        }
        removed
    }

    /// Removes files in `tmp/` not written to for `stale` (their writer died); returns how
    /// many went. Files still being written keep a fresh modification time.
    pub(super) fn clear_tmp(&self, stale: Duration) -> usize {
        let Ok(entries) = std::fs::read_dir(self.tmp_dir()) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m| now.duration_since(m).unwrap_or_default() >= stale);
            if old && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

struct CachedFile {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}
