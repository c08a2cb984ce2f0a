//! Which backends a server's store is made of, from `serve`'s flags: SQLite and the data
//! folder by default; PostgreSQL with `--database postgres://…`; object storage behind a local
//! cache with `--blobs s3://bucket/prefix`.

use super::StoreError;
use super::blobs::Blobs;
use super::blobs::folder::Folder;
use super::core::Snapshots;
use super::metadata::Metadata;
use super::metadata::sqlite::Sqlite;
use std::path::{Path, PathBuf};

/// `--cache-size`'s default: room for a few dozen large snapshots' blobs and indexes.
pub const DEFAULT_CACHE_BYTES: u64 = 20 << 30;

/// The URL schemes `--database` accepts.
pub const DATABASE_SCHEMES: [&str; 2] = ["postgres", "postgresql"];

/// The URL schemes `--blobs` accepts.
pub const BLOBS_SCHEMES: [&str; 1] = ["s3"];

/// What a store is opened from.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The data folder: SQLite's file and the blobs when no URL says otherwise, and the
    /// default home of the cache.
    pub data_dir: PathBuf,
    /// `--database`: a `postgres://` URL; `None`: SQLite in the data folder.
    pub database: Option<String>,
    /// `--blobs`: an `s3://bucket/prefix` URL; `None`: the data folder.
    pub blobs: Option<String>,
    /// `--cache-dir`: local copies of remote blobs and indexes; `None`: `DATA_DIR/cache`.
    pub cache_dir: Option<PathBuf>,
    /// `--cache-size`: bytes the cache may hold before the least recently used go.
    pub cache_bytes: u64,
}

impl StoreOptions {
    /// SQLite and blobs in `data_dir`, as `snapview serve` alone keeps them.
    pub fn local(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_owned(),
            database: None,
            blobs: None,
            cache_dir: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }

    /// Where remote blobs are cached.
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("cache"))
    }
}

/// The scheme of `url` (before `://`), when it is one of `accepted`.
fn scheme_in<'a>(url: &str, accepted: &[&'a str]) -> Option<&'a str> {
    let (scheme, rest) = url.split_once("://")?;
    if rest.is_empty() {
        return None;
    }
    accepted
        .iter()
        .find(|known| known.eq_ignore_ascii_case(scheme))
        .copied()
}

/// Checks that `url` is one `--database` accepts; the error says which are.
pub fn check_database_url(url: &str) -> Result<(), String> {
    match scheme_in(url, &DATABASE_SCHEMES) {
        Some(_) => Ok(()),
        None => Err(format!(
            "{:?} is not a database URL snapview knows: give postgres://USER:PASSWORD@HOST:PORT/DB \
             (postgresql:// too), or leave --database out for SQLite in the data folder",
            redact(url)
        )),
    }
}

/// Checks that `url` is one `--blobs` accepts; the error says which are.
pub fn check_blobs_url(url: &str) -> Result<(), String> {
    let bucket = url
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""));
    match scheme_in(url, &BLOBS_SCHEMES) {
        Some(_) if bucket.is_some_and(|b| !b.is_empty()) => Ok(()),
        _ => Err(format!(
            "{url:?} is not a blobs URL snapview knows: give s3://BUCKET or s3://BUCKET/PREFIX \
             (the endpoint, region and keys come from the AWS_* environment variables), or \
             leave --blobs out for the data folder"
        )),
    }
}

/// `url` without its password, for messages (a database URL may carry one).
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:…@{host}{}", &rest[authority_end..])
        }
        None => url.to_owned(),
    }
}

/// Opens the store `options` describe: its backends connected and their schemas current, not
/// yet repaired (see [`Snapshots::start_up`]).
pub fn open(options: &StoreOptions) -> Result<Snapshots, StoreError> {
    std::fs::create_dir_all(&options.data_dir)?;
    let metadata: Box<dyn Metadata> = match &options.database {
        None => Box::new(Sqlite::open(&options.data_dir.join("snapview.db"))?),
        Some(url) => {
            check_database_url(url).map_err(StoreError::Config)?;
            Box::new(super::metadata::postgres::Postgres::connect(url)?)
        }
    };
    let blobs: Box<dyn Blobs> = match &options.blobs {
        None => Box::new(Folder::open(&options.data_dir)?),
        Some(url) => {
            check_blobs_url(url).map_err(StoreError::Config)?;
            Box::new(super::blobs::object::ObjectBlobs::open(
                url,
                &options.cache_dir(),
                options.cache_bytes,
            )?)
        }
    };
    Ok(Snapshots::new(metadata, blobs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_other_schemes_are_refused_naming_the_accepted_ones() {
        assert!(check_database_url("postgres://u:p@localhost:5432/snapview").is_ok());
        assert!(check_database_url("PostgreSQL://localhost/db").is_ok());
        for bad in ["mysql://u:secret@h/db", "postgres://", "snapview.db", ""] {
            let error = check_database_url(bad).expect_err(bad);
            assert!(error.contains("postgres://"), "{error}");
            assert!(
                !error.contains("secret"),
                "the password is not repeated: {error}"
            );
        }
        assert!(check_blobs_url("s3://bucket").is_ok());
        assert!(check_blobs_url("s3://bucket/some/prefix").is_ok());
        for bad in ["gs://bucket", "s3://", "s3:///prefix", "/var/blobs", ""] {
            let error = check_blobs_url(bad).expect_err(bad);
            assert!(error.contains("s3://BUCKET"), "{error}");
        }
    }

    #[test]
    fn the_default_store_is_sqlite_and_the_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(&StoreOptions::local(&dir.path().join("new"))).expect("open");
        use super::super::Store;
        assert_eq!(store.kinds(), ("sqlite", "folder"));
        assert!(store.readiness().iter().all(|(_, ready)| ready.is_ok()));
        assert!(dir.path().join("new/snapview.db").is_file());
        assert!(dir.path().join("new/blobs").is_dir());
    }
}
