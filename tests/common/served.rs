//! A real `snapview serve` process on a free loopback port, for tests over TCP: the one way the
//! integration tests start a server.
//!
//! The server is started with `--addr 127.0.0.1:0` and tells us the port the system gave it on
//! its "serving at" line. Picking a "free" port in the test, closing it and passing it on raced
//! with the other tests running in parallel: two servers got the same port, one failed to bind,
//! and its test talked to the other test's server.
#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What `snapview serve` prints on stdout once it listens; the server's URL follows.
const SERVING_AT: &str = "snapview is serving at ";

/// How long a server may take to say where it serves. Generous: files given on the command
/// line are imported before that line, and the machine may be busy with other tests.
const START_LIMIT: Duration = Duration::from_secs(120);

/// A running `snapview serve` with extra flags on a free loopback port, killed on drop; its
/// log (stderr) goes to a file the test can read.
pub struct Served {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub address: String,
    pub port: u16,
    pub log: PathBuf,
    pub data_dir: PathBuf,
    /// What the server printed on stdout before its "serving at" line: one line per file it
    /// imported at start (its URL and the file).
    pub imported: Vec<String>,
    /// The temporary folder holding the data folder and the log, when the builder made one.
    owned_dir: Option<tempfile::TempDir>,
}

/// How to start a [`Served`]: see [`Served::builder`].
#[derive(Default)]
pub struct ServeOptions {
    data_dir: Option<PathBuf>,
    args: Vec<OsString>,
    /// Variables set (`Some`) or removed (`None`) in the server's environment, in order.
    env: Vec<(OsString, Option<OsString>)>,
    log: Option<PathBuf>,
}

impl ServeOptions {
    /// The data folder; without it the server gets a fresh temporary one, removed on drop.
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_owned());
        self
    }

    /// More arguments after `serve --addr 127.0.0.1:0 --data-dir DIR`.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn arg(self, arg: impl AsRef<OsStr>) -> Self {
        self.args([arg])
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((name.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        for (name, value) in vars {
            self = self.env(name, value);
        }
        self
    }

    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> Self {
        self.env.push((name.as_ref().to_owned(), None));
        self
    }

    /// Where the server's stderr goes; by default a file of its own next to the data folder.
    pub fn log(mut self, path: &Path) -> Self {
        self.log = Some(path.to_owned());
        self
    }

    /// Starts the server and returns once it listens; panics, with its log, if it exits first
    /// or does not say where it serves within [`START_LIMIT`].
    pub fn start(self) -> Served {
        // Each start gets a log of its own, so a restart on the same data folder (or a test
        // that runs two servers) reads only its own server's lines.
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let start = STARTS.fetch_add(1, Ordering::Relaxed);
        let (owned_dir, data_dir) = match self.data_dir {
            Some(dir) => (None, dir),
            None => {
                let owned = tempfile::tempdir().expect("tempdir");
                let data = owned.path().join("data");
                (Some(owned), data)
            }
        };
        let log = self.log.unwrap_or_else(|| {
            let name = data_dir
                .file_name()
                .map_or_else(|| "data".into(), |n| n.to_string_lossy().into_owned());
            data_dir.with_file_name(format!("{name}.serve-{start}.log"))
        });
        // On the shared backend (SNAPVIEW_TEST_BACKEND=shared) the server gets the database
        // and prefix of its data folder, unless the test names a backend itself (the replica
        // tests do).
        let mut args = self.args;
        let names_a_backend = args.iter().any(|a| a == "--database" || a == "--blobs");
        if !names_a_backend && let Some(shared) = super::backend::shared_backend_for(&data_dir) {
            args.extend(shared.serve_args().map(OsString::from));
        }
        let mut command = Command::new(env!("CARGO_BIN_EXE_snapview"));
        command
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(&data_dir)
            .args(&args)
            // The "serving at" line names the public URL: it must be the address bound here.
            .env_remove("SNAPVIEW_PUBLIC_URL")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (name, value) in &self.env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let mut child = command.spawn().expect("start the server");
        // Stdout is read to its end on a thread: the lines until "serving at" come back here,
        // and the rest is drained so a full pipe never blocks the server.
        let stdout = child.stdout.take().expect("stdout");
        let (lines, printed) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines.send(line);
            }
        });
        let log_of = |log: &Path| std::fs::read_to_string(log).unwrap_or_default();
        let deadline = Instant::now() + START_LIMIT;
        let mut imported = Vec::new();
        let url = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match printed.recv_timeout(left) {
                Ok(line) => match line.strip_prefix(SERVING_AT) {
                    Some(url) => break url.to_owned(),
                    None => imported.push(line),
                },
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Stdout closed: the server is exiting; give it a moment to be reaped.
                    let exit_deadline = Instant::now() + Duration::from_secs(5);
                    let status = loop {
                        match child.try_wait() {
                            Ok(Some(status)) => break status.to_string(),
                            _ if Instant::now() > exit_deadline => {
                                break "its stdout closed".to_owned();
                            }
                            _ => std::thread::sleep(Duration::from_millis(20)),
                        }
                    };
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "the server exited before serving ({status}):\n{}",
                        log_of(&log)
                    );
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "the server did not say where it serves within {START_LIMIT:?}:\n{}",
                        log_of(&log)
                    );
                }
            }
        };
        let address = url
            .trim_end_matches('/')
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("not an http URL on the serving line: {url}"))
            .to_owned();
        let port = address
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or_else(|| panic!("no port in the serving line's URL: {url}"));
        Served {
            child,
            address,
            port,
            log,
            data_dir,
            imported,
            owned_dir,
        }
    }
}

impl Served {
    /// A server on `data_dir` with `flags` after the usual ones.
    pub fn start(data_dir: &Path, flags: &[&str]) -> Self {
        Self::builder().data_dir(data_dir).args(flags).start()
    }

    /// Options for a server: data folder, arguments, environment, log.
    pub fn builder() -> ServeOptions {
        ServeOptions::default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// One request with ureq (a 20 s limit): the status and the body.
    pub fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> (u16, String) {
        let (status, _, text) = self.call_with_headers(method, path, body);
        (status, text)
    }

    pub fn call_with_headers(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> (u16, ureq::http::HeaderMap, String) {
        self.request(method, path, body, Duration::from_secs(20))
            .unwrap_or_else(|error| panic!("{method} {path}: no answer: {error}"))
    }

    /// One request with a limit of `limit` (for answers that may take long: a first view
    /// fetched from object storage, a request during an outage): the status and the body, or
    /// status 0 and the transport error's words.
    pub fn call_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        limit: Duration,
    ) -> (u16, String) {
        match self.request(method, path, body, limit) {
            Ok((status, _, text)) => (status, text),
            Err(error) => (0, error),
        }
    }

    /// One request: status, headers and body (up to 1 GiB), or the transport error.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        limit: Duration,
    ) -> Result<(u16, ureq::http::HeaderMap, String), String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(limit))
            .build()
            .into();
        let url = self.url(path);
        let body = body.unwrap_or_default();
        let mut response = match method {
            "GET" => agent.get(&url).call(),
            "POST" => agent
                .post(&url)
                .header("Content-Type", "application/octet-stream")
                .send(body),
            "PATCH" => agent
                .patch(&url)
                .header("Content-Type", "application/json")
                .send(body),
            "PUT" => agent
                .put(&url)
                .header("Content-Type", "text/plain")
                .send(body),
            "DELETE" => agent.delete(&url).call(),
            other => panic!("no {other} here"),
        }
        .map_err(|error| error.to_string())?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .unwrap_or_default();
        Ok((status, headers, text))
    }

    pub fn stored(&self) -> Vec<serde_json::Value> {
        let (status, list) = self.call("GET", "/api/snapshots", None);
        assert_eq!(status, 200, "{list}");
        let list: serde_json::Value = serde_json::from_str(&list).expect("json");
        list["snapshots"].as_array().expect("array").clone()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server's peak resident memory so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .expect("VmHWM")
            * 1024
    }

    /// Uploads the fixture `streams.pickle` and returns its snapshot id (201, or 200 when
    /// stored already).
    pub fn upload_streams(&self) -> String {
        let bytes = std::fs::read(super::path_of("streams")).expect("fixture");
        let (status, body) = self.call(
            "POST",
            "/api/snapshots?filename=streams.pickle",
            Some(&bytes),
        );
        assert!(status == 201 || status == 200, "{status}: {body}");
        let view: serde_json::Value = serde_json::from_str(&body).expect("json");
        view["id"].as_str().expect("id").to_owned()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under the data folder's blobs and tmp folders: the folder backend's alone (use
/// `backend::leftovers`, which knows both backends; this panics on the shared one rather than
/// find nothing and let a test pass having checked nothing).
pub fn blobs_and_temps(data_dir: &Path) -> Vec<PathBuf> {
    assert!(
        !super::backend::shared_requested(),
        "blobs_and_temps looks at the data folder only: use common::backend::leftovers, which \
         also lists the objects of the shared backend"
    );
    ["blobs", "tmp"]
        .iter()
        .flat_map(|folder| files_under(&data_dir.join(folder)))
        .collect()
}

/// Every file under `dir`, at any depth (none when it does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                stack.push(entry.path());
            } else {
                found.push(entry.path());
            }
        }
    }
    found
}

pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
