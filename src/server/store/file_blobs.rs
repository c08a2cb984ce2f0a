//! The blob files: `DIR/blobs/ab/abcdef….snapshot`, named by their content's hash, and the
//! file-system steps that make their renames and removals durable.

use super::*;

/// What every blob's file name ends with, after its id.
pub(super) const BLOB_SUFFIX: &str = ".snapshot";

/// The folder of the stored indexes, one file per blob (`crate::index`).
pub(super) const INDEX_DIR: &str = "indexes";

impl FileStore {
    /// Every blob file in `blobs/`, with its id when its name is one.
    pub(super) fn blob_files(&self) -> std::io::Result<Vec<(Option<SnapshotId>, PathBuf)>> {
        let mut found = Vec::new();
        for folder in std::fs::read_dir(self.dir.join("blobs"))? {
            let folder = folder?.path();
            if !folder.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(&folder)? {
                let path = entry?.path();
                let id = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(BLOB_SUFFIX))
                    .and_then(SnapshotId::parse);
                found.push((id, path));
            }
        }
        found.sort();
        Ok(found)
    }
}

impl FileStore {
    /// Removes the stored indexes whose blob is gone (purged, or removed by hand) and the
    /// temporary files of index writers that died (a `kill -9`, a power cut); returns how many
    /// files went. Run at start. A writer holds an exclusive `flock` on its temporary file
    /// until it is renamed into place (`crate::index::write`), so a temporary file that can be
    /// locked here has no live writer, whatever its age, and one that cannot is another
    /// server's on the same folder, still writing, and is kept.
    pub(super) fn sweep_indexes(&self) -> std::io::Result<usize> {
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
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

pub(super) fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
