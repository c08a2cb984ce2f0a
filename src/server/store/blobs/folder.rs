//! [`Folder`]: blobs in the data folder, as every version of snapview has kept them:
//! `DIR/blobs/ab/abcdef….snapshot` (named by their content's hash), their stored indexes in
//! `DIR/indexes/abcdef….snapidx`, uploads in progress in `DIR/tmp/`. Renames into place are
//! fsync'd (the file, then the folder that holds the new name), so a blob that is listed
//! survives a power cut.

use super::{BlobEntry, Blobs};
use crate::server::store::{SnapshotId, StoreError, now_ms};
use std::path::{Path, PathBuf};

/// What every blob's file name ends with, after its id.
pub const BLOB_SUFFIX: &str = ".snapshot";

/// The folder of the stored indexes, one file per blob (`crate::index`).
const INDEX_DIR: &str = "indexes";

/// Blobs in a local folder.
pub struct Folder {
    dir: PathBuf,
}

impl Folder {
    /// Opens (or creates) the folders in `dir`, removing the leftovers of uploads a crash or a
    /// kill interrupted (`tmp/`).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir.join("blobs"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::create_dir_all(dir.join(INDEX_DIR))?;
        for entry in std::fs::read_dir(dir.join("tmp"))?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// Where the bytes of a stored snapshot are.
    pub fn blob_path(&self, id: &SnapshotId) -> PathBuf {
        // Ids are validated hex, so joining them is safe.
        self.dir
            .join("blobs")
            .join(&id.as_str()[..2])
            .join(format!("{}{BLOB_SUFFIX}", id.as_str()))
    }

    /// Removes the stored indexes whose blob is gone (purged, or removed by hand) and the
    /// temporary files of index writers that died (a `kill -9`, a power cut); returns how many
    /// files went. A writer holds an exclusive `flock` on its temporary file until it is
    /// renamed into place (`crate::index::write`), so a temporary file that can be locked here
    /// has no live writer, whatever its age, and one that cannot is another server's on the
    /// same folder, still writing, and is kept.
    fn sweep_indexes(&self) -> std::io::Result<usize> {
        let mut removed = 0;
        for entry in std::fs::read_dir(self.dir.join(INDEX_DIR))? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let gone = match name.strip_suffix(crate::index::FILE_SUFFIX) {
                Some(id) => {
                    let orphan =
                        !SnapshotId::parse(id).is_some_and(|id| self.blob_path(&id).is_file());
                    orphan && std::fs::remove_file(&path).is_ok()
                }
                None => remove_if_abandoned(&path),
            };
            if gone {
                tracing::info!(path = %path.display(), "removed a stored index without its snapshot, or a dead writer's temporary file");
                removed += 1;
            }
        }
        Ok(removed)
    }
}

impl Blobs for Folder {
    fn temp_dir(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    fn put(&self, id: &SnapshotId, temp_file: &Path) -> Result<(), StoreError> {
        std::fs::File::open(temp_file)?.sync_all()?;
        // The fresh upload's bytes are parsed and complete, so they replace whatever is at the
        // blob's path: an orphan a crash or a full disk left (possibly cut short) never blocks.
        let blob = self.blob_path(id);
        let folder = blob.parent().unwrap_or(&self.dir).to_owned();
        std::fs::create_dir_all(&folder)?;
        std::fs::rename(temp_file, &blob)?;
        sync_dir(&folder)?;
        Ok(())
    }

    fn exists(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        Ok(self.blob_path(id).is_file())
    }

    fn entries(&self) -> Result<Vec<BlobEntry>, StoreError> {
        let mut found = Vec::new();
        for folder in std::fs::read_dir(self.dir.join("blobs"))? {
            let folder = folder?.path();
            if !folder.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(&folder)? {
                let entry = entry?;
                let path = entry.path();
                let id = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(BLOB_SUFFIX))
                    .and_then(SnapshotId::parse);
                // A file removed since the listing (a purge meanwhile) is simply not there.
                let Ok(metadata) = entry.metadata() else {
                    continue;
                };
                let modified_ms = metadata
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .and_then(|d| i64::try_from(d.as_millis()).ok())
                    .unwrap_or_else(now_ms);
                found.push(BlobEntry {
                    id,
                    location: path.display().to_string(),
                    bytes: metadata.len(),
                    modified_ms,
                });
            }
        }
        found.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(found)
    }

    fn remove(&self, id: &SnapshotId) -> Result<(), StoreError> {
        remove_if_there(&self.blob_path(id))?;
        // Derived from the blob just removed; a failure leaves it to start-up's sweep.
        let _ = remove_if_there(&self.index_path(id));
        Ok(())
    }

    fn local(&self, id: &SnapshotId) -> Result<PathBuf, StoreError> {
        Ok(self.blob_path(id))
    }

    fn index_path(&self, id: &SnapshotId) -> PathBuf {
        // Ids are validated hex, so joining them is safe.
        self.dir
            .join(INDEX_DIR)
            .join(format!("{}{}", id.as_str(), crate::index::FILE_SUFFIX))
    }

    fn fetch_index(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        // Anything at the path is for the opener to judge, and to say why it is refused (a FIFO
        // or a symlink there is logged and the index rebuilt: `crate::index::open_regular`).
        Ok(std::fs::symlink_metadata(self.index_path(id)).is_ok())
    }

    fn publish_index(&self, _id: &SnapshotId) -> Result<(), StoreError> {
        // The index is written where every process on this folder reads it.
        Ok(())
    }

    fn remove_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        Ok(remove_if_there(&self.index_path(id))?)
    }

    fn sweep(&self, orphan: &dyn Fn(&BlobEntry) -> bool) -> Result<(usize, usize), StoreError> {
        let mut orphans = 0;
        for entry in self.entries()? {
            let Some(id) = entry.id.clone() else {
                continue;
            };
            if !orphan(&entry) {
                continue;
            }
            match remove_if_there(&self.blob_path(&id)) {
                Ok(()) => {
                    tracing::info!(%id, "removed an orphan blob (an upload a crash interrupted)");
                    orphans += 1;
                }
                Err(error) => tracing::warn!(%id, %error, "cannot remove an orphan blob"),
            }
        }
        Ok((orphans, self.sweep_indexes()?))
    }

    fn check(&self) -> Result<(), StoreError> {
        match std::fs::metadata(self.dir.join("blobs")) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(StoreError::Unavailable {
                what: "the blobs folder",
                reason: "it is not a folder".to_owned(),
            }),
            Err(e) => Err(StoreError::Unavailable {
                what: "the blobs folder",
                reason: format!("it cannot be read: {e}"),
            }),
        }
    }

    fn kind(&self) -> &'static str {
        "folder"
    }
}

/// Removes `path`, a file in `indexes/` that is no index, unless a live writer holds its lock;
/// the lock is held while removing, so a writer cannot take it in between. Something that is
/// not a regular file there (a FIFO, a symlink) is nobody's temporary file and goes too.
fn remove_if_abandoned(path: &Path) -> bool {
    match crate::index::open_regular(path) {
        Ok(file) => match file.try_lock() {
            Ok(()) => std::fs::remove_file(path).is_ok(),
            // Locked: another server is writing it.
            Err(std::fs::TryLockError::WouldBlock) => false,
            Err(std::fs::TryLockError::Error(error)) => {
                tracing::warn!(path = %path.display(), %error, "cannot tell whether a temporary index is being written; kept");
                false
            }
        },
        Err(crate::index::IndexError::NotRegular(_)) => std::fs::remove_file(path).is_ok(),
        Err(_) => false,
    }
}

/// Makes a rename durable: fsync of the folder that holds the new name.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
