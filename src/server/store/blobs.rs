//! The blob files: `DIR/blobs/ab/abcdef….snapshot`, named by their content's hash, and the
//! file-system steps that make their renames and removals durable.

use super::*;

/// What every blob's file name ends with, after its id.
pub(super) const BLOB_SUFFIX: &str = ".snapshot";

/// The folder of the stored indexes, one file per blob (`crate::index`).
pub(super) const INDEX_DIR: &str = "indexes";

/// A temporary index file (`….snapidx.tmp-PID-N`) older than this is a writer's that died:
/// younger ones may be another server's, still writing.
const STALE_INDEX_TEMP: std::time::Duration = std::time::Duration::from_secs(3600);

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
    /// temporary files of index writers that died; returns how many files went.
    pub(super) fn sweep_indexes(&self) -> std::io::Result<usize> {
        let mut removed = 0;
        for entry in std::fs::read_dir(self.dir.join(INDEX_DIR))? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let keep = match name.strip_suffix(crate::index::FILE_SUFFIX) {
                Some(id) => SnapshotId::parse(id).is_some_and(|id| self.blob_path(&id).is_file()),
                None => !is_stale(&path),
            };
            if !keep && std::fs::remove_file(&path).is_ok() {
                tracing::info!(path = %path.display(), "removed a stored index without its snapshot");
                removed += 1;
            }
        }
        Ok(removed)
    }
}

fn is_stale(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|modified| modified.elapsed().ok())
        .is_some_and(|age| age > STALE_INDEX_TEMP)
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
