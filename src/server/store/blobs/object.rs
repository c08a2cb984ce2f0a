//! Blobs in S3-compatible object storage (`--blobs s3://bucket/prefix`) behind a bounded local
//! cache ([`super::cache`]) that the readers map.
//!
//! Under the prefix: `blobs/<id>.snapshot`, `indexes/<id>.snapidx` and `uploads/<id>.json`,
//! one marker per multipart upload in flight (its object key and multipart id, rewritten every
//! [`MARKER_REFRESH`] while parts go), so that [`Blobs::sweep`] on any replica can abort the
//! upload of a process that died mid-way (a `kill -9`): object storage keeps unfinished parts,
//! and bills them, until they are aborted. An upload that dies between creating its multipart
//! upload and writing its marker (one request) is not seen by the sweep: a bucket lifecycle
//! rule (`AbortIncompleteMultipartUpload`, a day say) is the backstop for that.
//!
//! The endpoint, region and credentials come from the standard AWS variables
//! (`AmazonS3Builder::from_env`: `AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, …). All the
//! work goes through `dyn ObjectStore` and `dyn MultipartStore`, so Google Cloud Storage or
//! Azure Blob Storage is object_store's `gcp`/`azure` feature and one more arm in
//! [`ObjectBlobs::open`] away.
//!
//! Every request is bounded (connect [`CONNECT_TIMEOUT`], a whole request
//! [`REQUEST_TIMEOUT`], [`RETRIES`] retries with short backoff), so an outage fails fast as
//! [`StoreError::Unavailable`] (answered 503) instead of holding requests.

use super::cache::{BLOB_SUFFIX, Cache, Kind};
use super::{BlobEntry, Blobs};
use crate::index::FILE_SUFFIX as INDEX_SUFFIX;
use crate::server::store::runtime::BlockingRuntime;
use crate::server::store::{SnapshotId, StoreError, now_ms};
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3ConfigKey;
use object_store::client::{HttpError, HttpErrorKind};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientConfigKey, MultipartId, ObjectMeta, ObjectStore, ObjectStoreExt,
    RetryConfig,
};
use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

#[cfg(test)]
mod tests;

/// How the backend is named in errors (`… is unavailable: …`).
const WHAT: &str = "object storage";

/// Files up to this size go up in one PUT; larger ones as a multipart upload in parts of this
/// size (S3's smallest part is 5 MiB; 8 MiB keeps a 10 GB file within S3's 10,000 parts…
/// almost: 80 GB is the largest, far above any snapshot).
pub const PART_BYTES: u64 = 8 << 20;
/// Parts uploaded at once: an upload holds at most this many parts in memory
/// (`PARTS_IN_FLIGHT × PART_BYTES` = 32 MiB), never the whole file.
pub const PARTS_IN_FLIGHT: usize = 4;
/// How often an upload in flight rewrites its marker, so the sweep can tell it is alive.
pub const MARKER_REFRESH: Duration = Duration::from_secs(10);
/// Time to open a connection to the object store before giving up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time for one whole request (a part of 8 MiB, a listing page, a ranged GET's headers).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Retries of a failed request (object_store retries connection errors, timeouts and 5xx).
pub const RETRIES: usize = 2;
/// How long [`Blobs::check`] waits for its listing.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// The ages at which [`Blobs::sweep`] treats something as left behind.
#[derive(Debug, Clone, Copy)]
pub struct SweepAges {
    /// A marker not rewritten for this long belongs to a dead uploader (6 missed refreshes).
    pub abandoned_upload: Duration,
    /// A blob without a row is removed only when older than this: another replica may be
    /// between its blob's put and its row's commit.
    pub orphan_blob: Duration,
    /// A file in the cache's `tmp/` not written to for this long has no live writer.
    pub stale_temp: Duration,
}

impl Default for SweepAges {
    fn default() -> Self {
        Self {
            abandoned_upload: Duration::from_secs(60),
            orphan_blob: Duration::from_secs(15 * 60),
            stale_temp: Duration::from_secs(60 * 60),
        }
    }
}

/// What a multipart upload's marker holds.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Marker {
    key: String,
    multipart_id: String,
    started_ms: i64,
}

/// The object store and where under it this backend keeps its objects; cheap to clone into
/// the async work.
#[derive(Clone)]
struct Remote {
    store: Arc<dyn ObjectStore>,
    multipart: Arc<dyn MultipartStore>,
    /// `s3://bucket`, for the locations in listings and errors.
    root_url: String,
    /// The prefix's path segments (none for a whole bucket).
    prefix: Vec<String>,
    /// Parts uploaded and objects downloaded so far, for tests.
    parts_put: Arc<AtomicU64>,
    downloads: Arc<AtomicU64>,
}

/// Blobs in an object store with a local cache.
pub struct ObjectBlobs {
    remote: Remote,
    cache: Cache,
    runtime: BlockingRuntime,
    ages: SweepAges,
}

impl ObjectBlobs {
    /// Opens `url` (`s3://bucket` or `s3://bucket/prefix`) with a cache of at most
    /// `cache_bytes` in `cache_dir`. Nothing is asked of the store here: [`Blobs::check`] says
    /// whether it answers.
    pub fn open(url: &str, cache_dir: &Path, cache_bytes: u64) -> Result<ObjectBlobs, StoreError> {
        Self::open_at(url, None, cache_dir, cache_bytes)
    }

    /// [`ObjectBlobs::open`], with `endpoint` (when given) in place of `AWS_ENDPOINT`.
    fn open_at(
        url: &str,
        endpoint: Option<&str>,
        cache_dir: &Path,
        cache_bytes: u64,
    ) -> Result<ObjectBlobs, StoreError> {
        let invalid = |why: String| {
            StoreError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, why))
        };
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(invalid(format!(
                "the blob store {url:?} is not an s3://bucket/prefix URL (the only object storage this build speaks)"
            )));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid(format!("the blob store {url:?} names no bucket")));
        }
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: RETRIES,
            retry_timeout: Duration::from_secs(30),
        };
        let mut builder = object_store::aws::AmazonS3Builder::from_env();
        if let Some(endpoint) = endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let s3 = builder
            .with_bucket_name(bucket)
            // Set key by key: `with_client_options` would replace what the environment set
            // (`AWS_ALLOW_HTTP`, say) with the defaults.
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                format!("{}s", CONNECT_TIMEOUT.as_secs()),
            )
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                format!("{}s", REQUEST_TIMEOUT.as_secs()),
            )
            .with_retry(retry)
            .build()
            .map_err(|error| StoreError::Remote {
                what: WHAT,
                reason: format!("cannot be set up for {url}: {error}"),
            })?;
        let s3 = Arc::new(s3);
        let remote = Remote {
            store: s3.clone(),
            multipart: s3,
            root_url: format!("s3://{bucket}"),
            prefix: prefix
                .split('/')
                .filter(|part| !part.is_empty())
                .map(str::to_owned)
                .collect(),
            parts_put: Arc::default(),
            downloads: Arc::default(),
        };
        Ok(ObjectBlobs {
            remote,
            cache: Cache::open(cache_dir, cache_bytes)?,
            runtime: BlockingRuntime::new("snapview-objects", 2)?,
            ages: SweepAges::default(),
        })
    }

    /// The same backend with other sweep ages (tests, and operators who know their replicas).
    pub fn with_sweep_ages(mut self, ages: SweepAges) -> Self {
        self.ages = ages;
        self
    }

    /// Brings `key` into the cache at `dest` once, however many callers ask at the same time;
    /// false when the store has no such object.
    fn fetch_into_cache(
        &self,
        key: ObjectPath,
        dest: &Path,
        id: &SnapshotId,
    ) -> Result<bool, StoreError> {
        let fetched = self.cache.with_file_lock(dest, || {
            // A concurrent caller may have brought it while this one waited for the lock.
            if Cache::touch(dest) {
                return Ok(true);
            }
            let (remote, temp, dest) = (
                self.remote.clone(),
                self.cache.temp_path(id),
                dest.to_path_buf(),
            );
            self.runtime
                .run(async move { remote.download(key, temp, dest).await })
        })?;
        if fetched {
            self.cache.evict(Some(dest));
        }
        Ok(fetched)
    }

    /// Parts uploaded by this backend so far (tests count a large file's parts).
    #[cfg(test)]
    fn parts_put(&self) -> u64 {
        self.remote.parts_put.load(Ordering::Relaxed)
    }

    /// Objects downloaded by this backend so far (tests check concurrent reads fetch once).
    #[cfg(test)]
    fn downloads(&self) -> u64 {
        self.remote.downloads.load(Ordering::Relaxed)
    }
}

impl Blobs for ObjectBlobs {
    fn temp_dir(&self) -> PathBuf {
        self.cache.tmp_dir()
    }

    fn put(&self, id: &SnapshotId, temp_file: &Path) -> Result<(), StoreError> {
        let remote = self.remote.clone();
        let key = remote.key("blobs", &format!("{id}{BLOB_SUFFIX}"));
        let file = temp_file.to_path_buf();
        self.runtime.run(async move {
            // The same bytes are already there (an id is its content's hash): nothing to send.
            if remote.exists(&key).await? {
                return Ok(());
            }
            remote.upload(key, file).await
        })?;
        // Kept as the cache's copy: the file is on local disk once.
        let cached = self.cache.path(Kind::Blob, id);
        std::fs::rename(temp_file, &cached)?;
        Cache::touch(&cached);
        self.cache.evict(Some(&cached));
        Ok(())
    }

    fn exists(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        let remote = self.remote.clone();
        let key = remote.key("blobs", &format!("{id}{BLOB_SUFFIX}"));
        self.runtime.run(async move { remote.exists(&key).await })
    }

    fn entries(&self) -> Result<Vec<BlobEntry>, StoreError> {
        let remote = self.remote.clone();
        let listed = self
            .runtime
            .run(async move { remote.list("blobs").await })?;
        let mut entries: Vec<BlobEntry> =
            listed.iter().map(|meta| self.remote.entry(meta)).collect();
        entries.sort();
        Ok(entries)
    }

    fn remove(&self, id: &SnapshotId) -> Result<(), StoreError> {
        let remote = self.remote.clone();
        let blob = remote.key("blobs", &format!("{id}{BLOB_SUFFIX}"));
        let index = remote.key("indexes", &format!("{id}{INDEX_SUFFIX}"));
        self.runtime.run(async move {
            remote.delete(&blob).await?;
            remote.delete(&index).await
        })?;
        remove_local(&self.cache.path(Kind::Blob, id))?;
        remove_local(&self.cache.path(Kind::Index, id))
    }

    fn local(&self, id: &SnapshotId) -> Result<PathBuf, StoreError> {
        let cached = self.cache.path(Kind::Blob, id);
        if Cache::touch(&cached) {
            metrics::counter!("snapview_cache_hits_total", "kind" => "blobs").increment(1);
            return Ok(cached);
        }
        metrics::counter!("snapview_cache_misses_total", "kind" => "blobs").increment(1);
        let key = self.remote.key("blobs", &format!("{id}{BLOB_SUFFIX}"));
        let location = self.remote.location(&key);
        if self.fetch_into_cache(key, &cached, id)? {
            Ok(cached)
        } else {
            Err(StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("snapshot {id}'s file is not in object storage ({location})"),
            )))
        }
    }

    fn index_path(&self, id: &SnapshotId) -> PathBuf {
        self.cache.path(Kind::Index, id)
    }

    fn fetch_index(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        let local = self.cache.path(Kind::Index, id);
        if Cache::touch(&local) {
            return Ok(true);
        }
        let key = self.remote.key("indexes", &format!("{id}{INDEX_SUFFIX}"));
        self.fetch_into_cache(key, &local, id)
    }

    fn publish_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        let remote = self.remote.clone();
        let key = remote.key("indexes", &format!("{id}{INDEX_SUFFIX}"));
        let local = self.cache.path(Kind::Index, id);
        let file = local.clone();
        // Always sent, never skipped when present: a rewritten index replaces a corrupt one.
        self.runtime
            .run(async move { remote.upload(key, file).await })?;
        self.cache.evict(Some(&local));
        Ok(())
    }

    fn remove_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        let remote = self.remote.clone();
        let key = remote.key("indexes", &format!("{id}{INDEX_SUFFIX}"));
        self.runtime.run(async move { remote.delete(&key).await })?;
        remove_local(&self.cache.path(Kind::Index, id))
    }

    fn sweep(&self, orphan: &dyn Fn(&BlobEntry) -> bool) -> Result<(usize, usize), StoreError> {
        let remote = self.remote.clone();
        let ages = self.ages;
        let mut leftovers = self
            .runtime
            .run(async move { remote.sweep_uploads(ages.abandoned_upload).await })?;

        // Indexes listed before blobs: an index is published after its blob is stored, so a
        // blob put between the two listings has no index in the first one.
        let remote = self.remote.clone();
        let (indexes, blobs) = self.runtime.run(async move {
            let indexes = remote.list("indexes").await?;
            let blobs = remote.list("blobs").await?;
            Ok::<_, StoreError>((indexes, blobs))
        })?;
        let stored: HashSet<String> = blobs
            .iter()
            .filter_map(|meta| id_of(meta, BLOB_SUFFIX))
            .collect();
        let stale_indexes: Vec<ObjectPath> = indexes
            .into_iter()
            .filter(|meta| id_of(meta, INDEX_SUFFIX).is_some_and(|id| !stored.contains(&id)))
            .map(|meta| meta.location)
            .collect();
        leftovers += stale_indexes.len();

        let now = now_ms();
        let old_enough = i64::try_from(ages.orphan_blob.as_millis()).unwrap_or(i64::MAX);
        let orphans: Vec<ObjectPath> = blobs
            .iter()
            .filter(|meta| now.saturating_sub(meta.last_modified.timestamp_millis()) >= old_enough)
            .filter(|meta| orphan(&self.remote.entry(meta)))
            .map(|meta| meta.location.clone())
            .collect();
        let orphans_removed = orphans.len();

        let remote = self.remote.clone();
        let (stale_indexes, orphans) = self.runtime.run(async move {
            for key in &stale_indexes {
                tracing::info!(%key, "sweep: removing a stored index whose blob is gone");
                remote.delete(key).await?;
            }
            for key in &orphans {
                tracing::info!(%key, "sweep: removing a blob that no row points at, and its index");
                remote.delete(key).await?;
                if let Some(id) = key.filename().and_then(|n| n.strip_suffix(BLOB_SUFFIX)) {
                    remote
                        .delete(&remote.key("indexes", &format!("{id}{INDEX_SUFFIX}")))
                        .await?;
                }
            }
            Ok::<_, StoreError>((stale_indexes, orphans))
        })?;
        // Their cached copies go too, so this replica does not serve what is gone.
        let id_in = |key: &ObjectPath, suffix: &str| {
            key.filename()
                .and_then(|name| name.strip_suffix(suffix))
                .and_then(SnapshotId::parse)
        };
        for id in orphans.iter().filter_map(|key| id_in(key, BLOB_SUFFIX)) {
            remove_local(&self.cache.path(Kind::Blob, &id))?;
            remove_local(&self.cache.path(Kind::Index, &id))?;
        }
        for id in stale_indexes
            .iter()
            .filter_map(|key| id_in(key, INDEX_SUFFIX))
        {
            remove_local(&self.cache.path(Kind::Index, &id))?;
        }
        leftovers += self.cache.clear_tmp(ages.stale_temp);
        // (The orphans' cached copies went above.)
        leftovers += self.cache.drop_unstored(&|id| stored.contains(id));
        Ok((orphans_removed, leftovers))
    }

    fn check(&self) -> Result<(), StoreError> {
        let remote = self.remote.clone();
        self.runtime.run(async move {
            let prefix = remote.prefix_path();
            let listing = remote.store.list_with_delimiter(prefix.as_ref());
            match tokio::time::timeout(CHECK_TIMEOUT, listing).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(error)) => Err(classify("check", error)),
                Err(_) => {
                    count_error("check");
                    Err(StoreError::Unavailable {
                        what: WHAT,
                        reason: format!(
                            "{} did not answer a listing within {} s",
                            remote.root_url,
                            CHECK_TIMEOUT.as_secs()
                        ),
                    })
                }
            }
        })
    }

    fn kind(&self) -> &'static str {
        "s3"
    }
}

impl Remote {
    /// `<prefix>/<folder>/<name>`.
    fn key(&self, folder: &str, name: &str) -> ObjectPath {
        self.prefix
            .iter()
            .map(String::as_str)
            .chain([folder, name])
            .collect()
    }

    /// `<prefix>/<folder>`, what a listing of that folder asks for.
    fn folder(&self, folder: &str) -> ObjectPath {
        self.prefix
            .iter()
            .map(String::as_str)
            .chain([folder])
            .collect()
    }

    /// The prefix itself; `None` for a whole bucket.
    fn prefix_path(&self) -> Option<ObjectPath> {
        (!self.prefix.is_empty()).then(|| self.prefix.iter().map(String::as_str).collect())
    }

    fn location(&self, key: &ObjectPath) -> String {
        format!("{}/{key}", self.root_url)
    }

    fn entry(&self, meta: &ObjectMeta) -> BlobEntry {
        BlobEntry {
            id: id_of(meta, BLOB_SUFFIX).and_then(|id| SnapshotId::parse(&id)),
            location: self.location(&meta.location),
            bytes: meta.size,
            modified_ms: meta.last_modified.timestamp_millis(),
        }
    }

    async fn exists(&self, key: &ObjectPath) -> Result<bool, StoreError> {
        match self.store.head(key).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(classify("head", error)),
        }
    }

    /// Deletes `key`; fine when it is not there.
    async fn delete(&self, key: &ObjectPath) -> Result<(), StoreError> {
        match self.store.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(classify("delete", error)),
        }
    }

    /// Every object under `<prefix>/<folder>/` (object_store follows the listing's pages).
    async fn list(&self, folder: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store
            .list(Some(&self.folder(folder)))
            .try_collect()
            .await
            .map_err(|error| classify("list", error))
    }

    /// Sends the file at `path` to `key`: one PUT when small, else a multipart upload with a
    /// marker, aborted on any error so nothing is left behind.
    async fn upload(&self, key: ObjectPath, path: PathBuf) -> Result<(), StoreError> {
        let file = Arc::new(std::fs::File::open(&path)?);
        let size = file.metadata()?.len();
        if size <= PART_BYTES {
            let bytes = tokio::fs::read(&path).await?;
            self.store
                .put(&key, bytes.into())
                .await
                .map_err(|error| classify("put", error))?;
            count_transferred("up", size);
            return Ok(());
        }
        let multipart_id = self
            .multipart
            .create_multipart(&key)
            .await
            .map_err(|error| classify("put", error))?;
        let marker = self.key("uploads", &format!("{multipart_id}.json"));
        let body = serde_json::to_string(&Marker {
            key: key.to_string(),
            multipart_id: multipart_id.clone(),
            started_ms: now_ms(),
        })?;
        let sent = self
            .upload_marked(&key, &multipart_id, &marker, body, file, size)
            .await;
        if sent.is_err()
            && let Err(error) = self.multipart.abort_multipart(&key, &multipart_id).await
        {
            tracing::warn!(%key, %error, "aborting a failed multipart upload failed; the next sweep aborts it");
        }
        // Gone once completed or aborted; a marker left by a failed delete names an upload
        // that is finished, and the sweep's abort of it is harmless.
        if let Err(error) = self.delete(&marker).await {
            tracing::warn!(%marker, %error, "removing an upload's marker failed; the next sweep does");
        }
        sent
    }

    /// The marker written and kept fresh while the parts go, then the upload completed.
    async fn upload_marked(
        &self,
        key: &ObjectPath,
        multipart_id: &MultipartId,
        marker: &ObjectPath,
        body: String,
        file: Arc<std::fs::File>,
        size: u64,
    ) -> Result<(), StoreError> {
        self.store
            .put(marker, body.clone().into())
            .await
            .map_err(|error| classify("put", error))?;
        let heartbeat = {
            let (store, marker) = (self.store.clone(), marker.clone());
            AbortOnDrop(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(MARKER_REFRESH).await;
                    if let Err(error) = store.put(&marker, body.clone().into()).await {
                        tracing::warn!(%marker, %error, "refreshing an upload's marker failed");
                    }
                }
            }))
        };
        let parts = self.upload_parts(key, multipart_id, file, size).await?;
        drop(heartbeat);
        self.multipart
            .complete_multipart(key, multipart_id, parts)
            .await
            .map_err(|error| classify("put", error))?;
        Ok(())
    }

    /// The file's parts, [`PARTS_IN_FLIGHT`] at a time, each read from disk when its turn
    /// comes (so memory holds at most that many parts).
    async fn upload_parts(
        &self,
        key: &ObjectPath,
        multipart_id: &MultipartId,
        file: Arc<std::fs::File>,
        size: u64,
    ) -> Result<Vec<PartId>, StoreError> {
        let count = size.div_ceil(PART_BYTES);
        futures_util::stream::iter(0..count)
            .map(|index| {
                let (file, key, multipart_id) = (file.clone(), key.clone(), multipart_id.clone());
                async move {
                    let offset = index * PART_BYTES;
                    let len = PART_BYTES.min(size - offset);
                    let data = tokio::task::spawn_blocking(move || {
                        let mut part = vec![0; usize::try_from(len).unwrap_or(usize::MAX)];
                        file.read_exact_at(&mut part, offset).map(|()| part)
                    })
                    .await
                    .map_err(std::io::Error::other)??;
                    let part_index = usize::try_from(index).unwrap_or(usize::MAX);
                    let part = self
                        .multipart
                        .put_part(&key, &multipart_id, part_index, data.into())
                        .await
                        .map_err(|error| classify("put", error))?;
                    self.parts_put.fetch_add(1, Ordering::Relaxed);
                    count_transferred("up", len);
                    Ok::<_, StoreError>(part)
                }
            })
            .buffered(PARTS_IN_FLIGHT)
            .try_collect()
            .await
    }

    /// Streams `key` into `temp` (never whole in memory), then renames it to `dest`; false
    /// when there is no such object. A failed download leaves no temporary file.
    async fn download(
        &self,
        key: ObjectPath,
        temp: PathBuf,
        dest: PathBuf,
    ) -> Result<bool, StoreError> {
        let got = match self.store.get(&key).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(error) => return Err(classify("get", error)),
        };
        let expected = got.meta.size;
        let written = async {
            let mut out = tokio::fs::File::create(&temp).await?;
            let mut stream = got.into_stream();
            let mut written: u64 = 0;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|error| classify("get", error))?;
                out.write_all(&chunk).await?;
                written += chunk.len() as u64;
            }
            if written != expected {
                count_error("get");
                return Err(StoreError::Remote {
                    what: WHAT,
                    reason: format!(
                        "{} ended after {written} of its {expected} bytes",
                        self.location(&key)
                    ),
                });
            }
            // Whole on disk before its name says it is there.
            out.sync_all().await?;
            tokio::fs::rename(&temp, &dest).await?;
            Ok(written)
        }
        .await;
        match written {
            Ok(bytes) => {
                self.downloads.fetch_add(1, Ordering::Relaxed);
                count_transferred("down", bytes);
                Ok(true)
            }
            Err(error) => {
                let _ = tokio::fs::remove_file(&temp).await;
                Err(error)
            }
        }
    }

    /// Aborts the multipart uploads whose marker is older than `abandoned` (their uploader
    /// died) and removes those markers; returns how many.
    async fn sweep_uploads(&self, abandoned: Duration) -> Result<usize, StoreError> {
        let now = now_ms();
        let abandoned = i64::try_from(abandoned.as_millis()).unwrap_or(i64::MAX);
        let mut swept = 0;
        for meta in self.list("uploads").await? {
            if now.saturating_sub(meta.last_modified.timestamp_millis()) < abandoned {
                continue;
            }
            let body = match self.store.get(&meta.location).await {
                Ok(got) => got.bytes().await.map_err(|error| classify("get", error))?,
                // Removed by its uploader, finished since the listing.
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(error) => return Err(classify("get", error)),
            };
            match serde_json::from_slice::<Marker>(&body) {
                Ok(marker) => {
                    let key = ObjectPath::from(marker.key.as_str());
                    match self
                        .multipart
                        .abort_multipart(&key, &marker.multipart_id)
                        .await
                    {
                        // Not found: it completed, or was aborted, before its marker went.
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                            tracing::info!(%key, started_ms = marker.started_ms, "sweep: aborted the multipart upload of a dead uploader");
                        }
                        Err(error) => {
                            let error = classify("abort", error);
                            if matches!(error, StoreError::Unavailable { .. }) {
                                return Err(error);
                            }
                            // Kept, to try again at the next sweep; the others go on. (Some
                            // servers answer 403 for an upload id they no longer know.)
                            tracing::warn!(%key, %error, "sweep: aborting a dead uploader's multipart upload failed; its marker is kept");
                            continue;
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(marker = %meta.location, %error, "sweep: an unreadable upload marker, removed");
                }
            }
            self.delete(&meta.location).await?;
            swept += 1;
        }
        Ok(swept)
    }
}

/// Stops the marker's refreshes when the upload ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The id in a listed object's name, when it ends with `suffix`.
fn id_of(meta: &ObjectMeta, suffix: &str) -> Option<String> {
    let id = meta.location.filename()?.strip_suffix(suffix)?;
    SnapshotId::parse(id).map(|id| id.as_str().to_owned())
}

/// Removes a cached file; fine when it is not there.
fn remove_local(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error.into()),
        _ => Ok(()),
    }
}

fn count_error(op: &'static str) {
    metrics::counter!("snapview_store_errors_total", "backend" => "s3", "op" => op).increment(1);
}

fn count_transferred(direction: &'static str, bytes: u64) {
    metrics::counter!("snapview_object_bytes_transferred_total", "direction" => direction)
        .increment(bytes);
}

/// An object_store error as the store's: no answer (refused, timed out, cut) or a 5xx/429 is
/// [`StoreError::Unavailable`] (answered 503, worth retrying later); anything else (403, a
/// bad request…) is [`StoreError::Remote`] in the store's own words.
fn classify(op: &'static str, error: object_store::Error) -> StoreError {
    count_error(op);
    let reason = error.to_string();
    if is_unavailable(&error) {
        StoreError::Unavailable { what: WHAT, reason }
    } else {
        StoreError::Remote { what: WHAT, reason }
    }
}

fn is_unavailable(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(http) = error.downcast_ref::<HttpError>() {
            return matches!(
                http.kind(),
                HttpErrorKind::Connect
                    | HttpErrorKind::Request
                    | HttpErrorKind::Timeout
                    | HttpErrorKind::Interrupted
            );
        }
        // object_store's status errors are not public types; their text is stable:
        // "Server returned non-2xx status code: 503 Service Unavailable: …".
        let text = error.to_string();
        if let Some(status) = text.strip_prefix("Server returned non-2xx status code: ")
            && (status.starts_with('5') || status.starts_with("429"))
        {
            return true;
        }
        next = error.source();
    }
    false
}
