//! The blob files: `DIR/blobs/ab/abcdef….snapshot`, named by their content's hash, and the
//! file-system steps that make their renames and removals durable.

use super::*;

/// What every blob's file name ends with, after its id.
pub(super) const BLOB_SUFFIX: &str = ".snapshot";

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
