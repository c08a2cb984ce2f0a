//! `snapview open FILE`: the pages for one file, on this machine only, keeping nothing.
//!
//! For teams that may not upload a model's memory to a shared server (memory_viz's "everything
//! stays in your browser"): a server on 127.0.0.1 and a free port, whose data folder is a private
//! temporary folder (mode 0700) removed at exit. The file is read where it is: the copy the
//! import streams while it parses is replaced by a symbolic link to the file as soon as the read
//! is done, so it costs no disk for longer than the first read, and nothing is written anywhere
//! else. Stops on Ctrl-C or SIGTERM like `serve`.

use super::args::default_public_url;
use crate::server::{AppState, ServeConfig};
use std::path::{Path, PathBuf};

/// A private temporary folder, removed (with all it holds) when dropped: on a clean exit, an
/// error, or a panic that unwinds. Only a SIGKILL or a power cut leaves it behind.
struct TempFolder(PathBuf);

impl TempFolder {
    fn create() -> Result<Self, String> {
        let base = std::env::temp_dir();
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = base.join(format!("snapview-open-{}-{stamp}", std::process::id()));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&path).map_err(|e| {
            format!(
                "cannot create a temporary folder in {}: {e}",
                base.display()
            )
        })?;
        Ok(Self(path))
    }
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!(
                "snapview: warning: could not remove {}: {e}",
                self.0.display()
            );
        }
    }
}

/// Checks before anything starts that `file` is a regular file this user can read, so a typo
/// is one clear line, not a server that starts and fails.
fn check_file(file: &Path) -> Result<PathBuf, String> {
    let path = std::fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", file.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a file", file.display()));
    }
    std::fs::File::open(&path).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(path)
}

/// Runs `snapview open`: returns when the server stopped; the temporary folder is gone then.
pub(super) fn open(file: PathBuf, no_browser: bool, max_events: u64) -> Result<(), String> {
    let path = check_file(&file)?;
    // Warnings only: the two lines printed are what a person at the terminal needs.
    super::init_logging("snapview=warn", super::args::LogFormat::Text);
    let folder = TempFolder::create()?;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let served = runtime.block_on(serve_one(&path, &file, &folder.0, no_browser, max_events));
    // As `serve`: what still runs after the grace period gets a moment, not forever. Then the
    // folder goes, after every task that could write into it has stopped.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    drop(folder);
    served
}

async fn serve_one(
    path: &Path,
    shown_as: &Path,
    data_dir: &Path,
    no_browser: bool,
    max_events: u64,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut config = ServeConfig {
        addr,
        data_dir: data_dir.to_owned(),
        // The file is on this machine already: its own size is the only limit that matters.
        max_upload_bytes: u64::MAX,
        // `serve`'s default.
        cache_budget_bytes: 4 << 30,
        public_url: default_public_url(addr),
        // Nothing outlives the process, so nothing waits in a trash.
        trash_days: 0,
        reindex: false,
        // The data folder alone: `open` keeps nothing, and shares nothing.
        database: None,
        blobs: None,
        cache_dir: None,
        cache_size_bytes: crate::server::store::DEFAULT_CACHE_BYTES,
        limits: crate::server::ConnectionLimits::default(),
        // Loopback only, no tokens: the one user of this machine who started it.
        access: crate::server::access::AccessConfig::default(),
        roles: std::sync::Arc::default(),
        // Nothing is imported from elsewhere into a private viewer: no https:// prefix.
        import: Default::default(),
    };
    config.limits.max_events = max_events;
    let state =
        AppState::open(config.clone()).map_err(|e| format!("cannot start the server: {e}"))?;
    let view = crate::server::upload::import_path(&state, path)
        .await
        .map_err(|e| format!("{}: {e}", shown_as.display()))?;
    read_in_place(&state, &view.record.id, path);
    let signals = crate::server::StopSignals::listen()
        .map_err(|e| format!("cannot listen for Ctrl-C and SIGTERM: {e}"))?;
    let url = format!("{}/s/{}", config.public_url, view.record.id.as_str());
    println!("snapview is showing {} at {url}", shown_as.display());
    println!("only this machine can open it; nothing is kept after Ctrl-C");
    if !no_browser {
        open_browser(&url);
    }
    crate::server::serve(state, listener, signals)
        .await
        .map_err(|e| format!("the server failed: {e}"))
}

/// Swaps the stored copy of the file for a symbolic link to it, so the file is read where it
/// is from now on (a reload after the cache let it go, a download); a failure only leaves the
/// copy, in the folder removed at exit.
fn read_in_place(state: &AppState, id: &crate::server::store::SnapshotId, original: &Path) {
    // `open`'s store is a local folder: its blob file is its own.
    let Ok(blob) = state.store.blob_file(id) else {
        return;
    };
    let link = blob.with_extension("link");
    #[cfg(unix)]
    let linked =
        std::os::unix::fs::symlink(original, &link).and_then(|()| std::fs::rename(&link, &blob));
    #[cfg(not(unix))]
    let linked: std::io::Result<()> = Err(std::io::Error::other("links are unix-only here"));
    if let Err(e) = linked {
        let _ = std::fs::remove_file(&link);
        tracing::debug!(error = %e, "kept the temporary copy instead of a link");
    }
}

/// Opens `url` in the user's browser: `$BROWSER` (its first entry), else `open` on macOS and
/// `xdg-open` elsewhere. Not waited for: a browser may stay running after we exit.
fn open_browser(url: &str) {
    let from_env = std::env::var("BROWSER")
        .ok()
        .and_then(|list| list.split(':').next().map(str::to_owned))
        .filter(|b| !b.trim().is_empty());
    let program = from_env.unwrap_or_else(|| {
        if cfg!(target_os = "macos") {
            "open".to_owned()
        } else {
            "xdg-open".to_owned()
        }
    });
    let spawned = std::process::Command::new(&program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        // Reaped on a thread, so it never lingers as a zombie while we serve.
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => println!("could not start a browser ({program}: {e}); open the URL above"),
    }
}
