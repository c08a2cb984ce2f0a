//! Which storage the test servers run on: the folder (SQLite and a blobs folder in the data
//! folder, the default) or, with `SNAPVIEW_TEST_BACKEND=shared`, the shared backend — a fresh
//! PostgreSQL database and a fresh key prefix in the S3 server that `.ci/services up` starts.
//!
//! Every test server goes through here ([`shared_backend_for`], called by `Served` and
//! `config_in`), so a test written against the folder runs unchanged on the shared backend. A
//! test that looks at the stored files asks [`blob_exists`], [`leftovers`] and friends, which
//! know both; one that only makes sense on a folder (a read-only folder, a full disk) calls
//! [`folder_only`], which prints why it checked nothing instead of passing silently.
//!
//! Nothing is mocked: the database is created with `CREATE DATABASE` through the admin URL and
//! the objects are read with `object_store`, over TCP, as the server does. Each test gets its
//! own database and prefix, so tests running at once never see each other's data; both are
//! removed, best effort, once the test's data folder is gone (and all of them by
//! `.ci/services down`).
#![allow(dead_code)]

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as KeyPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// `shared` runs the test servers on PostgreSQL + S3; unset or `folder`, on the data folder.
pub const BACKEND: &str = "SNAPVIEW_TEST_BACKEND";
/// The admin URL of the test PostgreSQL (`postgres://user@host:port/db`): databases are made
/// through it.
pub const DATABASE_URL: &str = "SNAPVIEW_TEST_DATABASE_URL";
/// `s3://bucket/prefix` under which each test gets a prefix of its own.
pub const BLOBS: &str = "SNAPVIEW_TEST_BLOBS";

/// What to do when a variable is missing: a test that needs the services fails, never skips.
const HOW_TO_START: &str =
    "start the test services first: `eval \"$(bash .ci/services up)\"` (.ci/run does this)";

/// Whether [`BACKEND`] asks for the shared backend. Anything but `shared`, `folder` or nothing
/// is a mistake worth stopping for (a typo would otherwise run everything on the folder).
pub fn shared_requested() -> bool {
    match std::env::var(BACKEND).as_deref() {
        Ok("shared") => true,
        Ok("folder" | "") | Err(std::env::VarError::NotPresent) => false,
        Ok(other) => panic!("{BACKEND}={other}: expected `shared` or `folder`"),
        Err(std::env::VarError::NotUnicode(_)) => panic!("{BACKEND} is not UTF-8"),
    }
}

/// The value of a variable the services print, or a panic saying how to get it.
pub fn service_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {HOW_TO_START}"))
}

/// A fresh, empty PostgreSQL database and object-store prefix for one test (or one group of
/// replicas), removed best effort on drop.
pub struct SharedBackend {
    /// `--database` for the servers: the fresh database.
    pub database_url: String,
    /// `--blobs` for the servers: `s3://bucket/<fresh prefix>`.
    pub blobs_url: String,
    /// The S3 endpoint the servers must be given (`AWS_ENDPOINT`).
    pub endpoint: String,
    admin_url: String,
    database: String,
    bucket: String,
    /// The fresh prefix, without slashes at either end.
    prefix: String,
}

/// A name no other test (in this process or another) picks: `t_` and 16 hex digits from the
/// clock, the process and a counter.
fn fresh_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let seed = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9);
    format!("t_{:016x}", super::rng::Rng::new(seed).next())
}

/// `url` with its database name replaced by `database` (a query string is kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, ""), |(b, q)| (b, q));
    let authority_end = base
        .find("://")
        .map(|at| at + 3)
        .unwrap_or_else(|| panic!("not a postgres:// URL: {url}"));
    let host_part = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    if query.is_empty() {
        format!("{host_part}/{database}")
    } else {
        format!("{host_part}/{database}?{query}")
    }
}

/// Runs a future to its end on a runtime of its own, on a thread of its own: the helpers are
/// called from plain tests and from inside `#[tokio::test]`s alike, where blocking on the
/// test's own runtime would panic.
pub fn block_on<T: Send>(future: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the test's database and object store calls")
                    .block_on(future)
            })
            .join()
            .expect("the database or object store call panicked")
    })
}

/// Every key under `under` in `store` (full keys).
fn list_keys(store: AmazonS3, under: KeyPath) -> Vec<String> {
    use futures_util::TryStreamExt;
    block_on(async move {
        store
            .list(Some(&under))
            .map_ok(|meta| meta.location.to_string())
            .try_collect::<Vec<_>>()
            .await
            .unwrap_or_else(|e| panic!("listing {under}: {e}"))
    })
}

/// A connection to `url`, its driver running on the current runtime.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e} ({HOW_TO_START})"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

impl SharedBackend {
    /// A fresh database and prefix on the services `.ci/services up` started (the variables
    /// it prints); panics, saying to start them, where a variable is missing.
    pub fn fresh() -> Self {
        Self::fresh_on(
            &service_var(DATABASE_URL),
            &service_var(BLOBS),
            &service_var("AWS_ENDPOINT"),
        )
    }

    /// A fresh database through the admin URL `admin_url`, and a fresh prefix under the
    /// `s3://bucket/prefix` `blobs_base` of the S3 server at `endpoint` (the credentials and
    /// region are the environment's `AWS_*`): for tests that run services of their own.
    pub fn fresh_on(admin_url: &str, blobs_base: &str, endpoint: &str) -> Self {
        let name = fresh_name();
        let rest = blobs_base
            .strip_prefix("s3://")
            .unwrap_or_else(|| panic!("{BLOBS}={blobs_base}: expected s3://bucket/prefix"));
        let (bucket, base) = rest.split_once('/').unwrap_or((rest, ""));
        let base = base.trim_matches('/');
        let prefix = if base.is_empty() {
            name.clone()
        } else {
            format!("{base}/{name}")
        };
        let admin = admin_url.to_owned();
        let create = format!("CREATE DATABASE {name}");
        block_on(async move {
            connect(&admin)
                .await
                .batch_execute(&create)
                .await
                .unwrap_or_else(|e| panic!("{create}: {e}"));
        });
        Self {
            database_url: with_database(admin_url, &name),
            blobs_url: format!("s3://{bucket}/{prefix}"),
            endpoint: endpoint.to_owned(),
            admin_url: admin_url.to_owned(),
            database: name,
            bucket: bucket.to_owned(),
            prefix,
        }
    }

    /// The `serve` arguments that put a server on this backend.
    pub fn serve_args(&self) -> [String; 4] {
        [
            "--database".into(),
            self.database_url.clone(),
            "--blobs".into(),
            self.blobs_url.clone(),
        ]
    }

    fn store(&self) -> AmazonS3 {
        self.store_of(&self.bucket)
    }

    /// A client of `bucket` on this backend's S3 server (credentials from `AWS_*`).
    fn store_of(&self, bucket: &str) -> AmazonS3 {
        AmazonS3Builder::from_env()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .build()
            .unwrap_or_else(|e| panic!("an S3 client for {}: {e} ({HOW_TO_START})", self.endpoint))
    }

    fn key(&self, relative: &str) -> KeyPath {
        KeyPath::from(format!("{}/{relative}", self.prefix))
    }

    /// Runs `op` on the S3 client and the full key of `relative` (under the prefix).
    fn on_object<T: Send, F>(&self, relative: &str, op: impl FnOnce(AmazonS3, KeyPath) -> F) -> T
    where
        F: std::future::Future<Output = T> + Send,
    {
        block_on(op(self.store(), self.key(relative)))
    }

    /// Every key under `folder` (`blobs`, `indexes`, `uploads`, or `""` for all), relative to
    /// this backend's prefix, sorted.
    pub fn keys(&self, folder: &str) -> Vec<String> {
        let under = if folder.is_empty() {
            KeyPath::from(self.prefix.as_str())
        } else {
            self.key(folder)
        };
        let prefix = format!("{}/", self.prefix);
        let mut keys: Vec<String> = list_keys(self.store(), under)
            .into_iter()
            .map(|key| key.strip_prefix(&prefix).unwrap_or(&key).to_owned())
            .collect();
        keys.sort();
        keys
    }

    /// Every key under another `s3://bucket/prefix` of the same S3 server (full keys).
    pub fn keys_at(&self, blobs_url: &str) -> Vec<String> {
        let rest = blobs_url.strip_prefix("s3://").expect("an s3:// URL");
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        list_keys(self.store_of(bucket), KeyPath::from(prefix))
    }

    /// Whether the object `relative` (under the prefix) exists.
    pub fn object_exists(&self, relative: &str) -> bool {
        self.on_object(relative, |store, key| async move {
            match store.head(&key).await {
                Ok(_) => true,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(e) => panic!("HEAD {key}: {e}"),
            }
        })
    }

    /// The object `relative`'s bytes.
    pub fn read_object(&self, relative: &str) -> Vec<u8> {
        self.on_object(relative, |store, key| async move {
            let read = async { store.get(&key).await?.bytes().await };
            read.await
                .unwrap_or_else(|e| panic!("GET {key}: {e}"))
                .to_vec()
        })
    }

    /// Replaces (or makes) the object `relative`.
    pub fn write_object(&self, relative: &str, bytes: &[u8]) {
        let payload = PutPayload::from(bytes.to_vec());
        self.on_object(relative, |store, key| async move {
            if let Err(e) = store.put(&key, payload).await {
                panic!("PUT {key}: {e}");
            }
        });
    }

    /// Removes the object `relative` (nothing when it is not there).
    pub fn remove_object(&self, relative: &str) {
        self.on_object(relative, |store, key| async move {
            match store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => panic!("DELETE {key}: {e}"),
            }
        });
    }

    /// Runs `sql` (statements without parameters) on this backend's database.
    pub fn execute(&self, sql: &str) {
        self.query_texts(sql);
    }

    /// The first column of every row `sql` returns, as text (`NULL` as `None`); `sql` may be
    /// several statements (PostgreSQL's simple query protocol).
    pub fn query_texts(&self, sql: &str) -> Vec<Option<String>> {
        let url = self.database_url.clone();
        let sql = sql.to_owned();
        block_on(async move {
            connect(&url)
                .await
                .simple_query(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .into_iter()
                .filter_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some(row.get(0).map(str::to_owned))
                    }
                    _ => None,
                })
                .collect()
        })
    }

    /// How many rows `table` holds (0 when the table does not exist yet: the servers make the
    /// schema at start).
    pub fn count_rows(&self, table: &str) -> usize {
        let exists = self.query_texts(&format!("SELECT to_regclass('{table}')::text"));
        if exists.first().cloned().flatten().is_none() {
            return 0;
        }
        self.query_texts(&format!("SELECT count(*) FROM {table}"))
            .first()
            .cloned()
            .flatten()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("count of {table}"))
    }
}

impl Drop for SharedBackend {
    /// Best effort: a test that fails still gets here, and a database or object left over is
    /// removed with everything else by `.ci/services down`.
    fn drop(&mut self) {
        let admin = self.admin_url.clone();
        let drop_database = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database);
        let store = self.store();
        let under = KeyPath::from(self.prefix.as_str());
        let cleaned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            block_on(async move {
                use futures_util::TryStreamExt;
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&admin, tokio_postgres::NoTls).await
                {
                    tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    let _ = client.batch_execute(&drop_database).await;
                }
                if let Ok(keys) = store.list(Some(&under)).try_collect::<Vec<_>>().await {
                    for meta in keys {
                        let _ = store.delete(&meta.location).await;
                    }
                }
            });
        }));
        if cleaned.is_err() {
            eprintln!(
                "could not remove the test database {} and prefix {}",
                self.database, self.prefix
            );
        }
    }
}

/// The shared backends handed out by data folder: a server restarted on the same folder (or
/// two servers given the same one) finds the same database and prefix, as a restarted
/// deployment would.
fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<SharedBackend>>> {
    static REGISTRY: std::sync::OnceLock<Mutex<HashMap<PathBuf, Arc<SharedBackend>>>> =
        std::sync::OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// A fresh shared backend when [`BACKEND`] asks for it, `None` on the folder backend.
pub fn shared_backend() -> Option<SharedBackend> {
    shared_requested().then(SharedBackend::fresh)
}

/// The shared backend of the server on `data_dir` when [`BACKEND`] asks for it: the same one
/// for every server on that folder. The folder is made here, so that "its folder is gone"
/// means its test is over: then its database and prefix are removed (when the next one is
/// handed out: test binaries have no hook at exit).
pub fn shared_backend_for(data_dir: &Path) -> Option<Arc<SharedBackend>> {
    if !shared_requested() {
        return None;
    }
    let key = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_owned());
    let finished: Vec<Arc<SharedBackend>>;
    let backend = {
        let mut registry = registry()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = registry.get(&key) {
            return Some(found.clone());
        }
        let gone: Vec<PathBuf> = registry.keys().filter(|d| !d.exists()).cloned().collect();
        finished = gone.iter().filter_map(|d| registry.remove(d)).collect();
        let _ = std::fs::create_dir_all(&key);
        let backend = Arc::new(SharedBackend::fresh());
        registry.insert(key, backend.clone());
        backend
    };
    drop(finished);
    Some(backend)
}

/// Whether this run is on the shared backend; when it is, prints that the calling test checks
/// nothing there and why. Use as `if folder_only("…") { return; }` in a test about the folder
/// itself (its permissions, its disk); the output names every test left out.
#[track_caller]
pub fn folder_only(reason: &str) -> bool {
    let shared = shared_requested();
    if shared {
        use std::io::Write;
        let at = std::panic::Location::caller();
        // Straight to stderr: the test harness keeps `eprintln!` of a passing test to itself,
        // and this line must show in the run's output.
        let _ = writeln!(
            std::io::stderr(),
            "FOLDER-ONLY, not run on the shared backend ({}:{}): {reason}",
            at.file(),
            at.line()
        );
    }
    shared
}

/// The folder backend's path of the blob `id` in `data_dir`.
pub fn blob_path(data_dir: &Path, id: &str) -> PathBuf {
    data_dir
        .join("blobs")
        .join(&id[..2])
        .join(format!("{id}.snapshot"))
}

/// The object key (under the prefix) of the blob `id` on the shared backend.
pub fn blob_key(id: &str) -> String {
    format!("blobs/{id}.snapshot")
}

/// Whether the blob `id` of the server on `data_dir` is stored, on either backend.
pub fn blob_exists(data_dir: &Path, id: &str) -> bool {
    match shared_backend_for(data_dir) {
        Some(shared) => shared.object_exists(&blob_key(id)),
        None => blob_path(data_dir, id).is_file(),
    }
}

/// Removes the local cache's copies of the snapshot `id` (its blob and index), so the next
/// read goes to the object store.
fn forget_cached(data_dir: &Path, id: &str) {
    for file in super::served::files_under(&data_dir.join("cache")) {
        if file
            .file_name()
            .is_some_and(|name| name.to_string_lossy().contains(id))
        {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// The stored bytes of the blob `id`, on either backend.
pub fn read_blob(data_dir: &Path, id: &str) -> Vec<u8> {
    match shared_backend_for(data_dir) {
        Some(shared) => shared.read_object(&blob_key(id)),
        None => std::fs::read(blob_path(data_dir, id)).expect("read the blob"),
    }
}

/// Whether the stored index of the snapshot `id` has been published: the folder's
/// `indexes/<id>.snapidx`, or that object beside the blobs.
pub fn index_exists(data_dir: &Path, id: &str) -> bool {
    match shared_backend_for(data_dir) {
        Some(shared) => shared.object_exists(&format!("indexes/{id}.snapidx")),
        None => data_dir
            .join("indexes")
            .join(format!("{id}.snapidx"))
            .is_file(),
    }
}

/// Loses the stored index of `id` behind the server's back, so its next load reads the blob.
pub fn remove_index(data_dir: &Path, id: &str) {
    match shared_backend_for(data_dir) {
        Some(shared) => {
            shared.remove_object(&format!("indexes/{id}.snapidx"));
            forget_cached(data_dir, id);
        }
        None => std::fs::remove_file(data_dir.join("indexes").join(format!("{id}.snapidx")))
            .expect("lose the index"),
    }
}

/// Loses the stored blob `id` behind the server's back (an operator's slip, a lost disk or
/// bucket object), with the server's local copies on the shared backend.
pub fn remove_blob(data_dir: &Path, id: &str) {
    match shared_backend_for(data_dir) {
        Some(shared) => {
            shared.remove_object(&blob_key(id));
            forget_cached(data_dir, id);
        }
        None => std::fs::remove_file(blob_path(data_dir, id)).expect("lose the blob"),
    }
}

/// Replaces the stored blob `id` behind the server's back (a damaged disk or bucket). On the
/// shared backend the server's local copies (its cache) go too, so the next read fetches the
/// damaged object.
pub fn overwrite_blob(data_dir: &Path, id: &str, bytes: &[u8]) {
    match shared_backend_for(data_dir) {
        Some(shared) => {
            shared.write_object(&blob_key(id), bytes);
            forget_cached(data_dir, id);
        }
        None => std::fs::write(blob_path(data_dir, id), bytes).expect("overwrite the blob"),
    }
}

/// What a server on `data_dir` has stored and left in flight, on either backend: blobs, and
/// temporary things (the folder's `tmp/`, the cache's `tmp/`, and on object storage the
/// markers of multipart uploads in flight, `uploads/`).
#[derive(Debug, Default)]
pub struct Leftovers {
    pub blobs: Vec<String>,
    pub temps: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty() && self.temps.is_empty()
    }
}

/// See [`Leftovers`].
pub fn leftovers(data_dir: &Path) -> Leftovers {
    let shown = |paths: Vec<PathBuf>| -> Vec<String> {
        paths.iter().map(|p| p.display().to_string()).collect()
    };
    let local_temps = shown(
        [data_dir.join("tmp"), data_dir.join("cache").join("tmp")]
            .iter()
            .flat_map(|dir| super::served::files_under(dir))
            .collect(),
    );
    match shared_backend_for(data_dir) {
        Some(shared) => {
            let mut temps = local_temps;
            temps.extend(shared.keys("uploads"));
            Leftovers {
                blobs: shared.keys("blobs"),
                temps,
            }
        }
        None => Leftovers {
            blobs: shown(super::served::files_under(&data_dir.join("blobs"))),
            temps: local_temps,
        },
    }
}

/// Changes the stored summary of the snapshot `id` to `summary` (text, possibly not JSON)
/// behind the server's back: in SQLite's file or in PostgreSQL.
pub fn set_summary(data_dir: &Path, id: &str, summary: &str) {
    match shared_backend_for(data_dir) {
        Some(shared) => {
            let quoted = summary.replace('\'', "''");
            shared.execute(&format!(
                "UPDATE snapshots SET summary = '{quoted}' WHERE id = '{id}'"
            ));
        }
        None => {
            let db = rusqlite::Connection::open(data_dir.join("snapview.db")).expect("db");
            db.execute(
                "UPDATE snapshots SET summary = ?1 WHERE id = ?2",
                [summary, id],
            )
            .expect("change the summary");
        }
    }
}
