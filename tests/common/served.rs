//! A real `snapview serve` process on a free loopback port, for tests over TCP.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `snapview serve` with extra flags on a free loopback port, killed on drop; its
/// log goes to a file the test can read.
pub struct Served {
    pub child: Child,
    pub address: String,
    pub log: PathBuf,
}

impl Served {
    pub fn start(data_dir: &Path, flags: &[&str]) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = data_dir.with_extension("log");
        let child = Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data_dir)
            .args(flags)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start the server");
        let address = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&address).is_err() {
            assert!(Instant::now() < deadline, "the server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            address,
            log,
        }
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
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
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
            other => panic!("no {other} here"),
        }
        .expect("answer");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, headers, text)
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
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under the data folder's blobs and tmp folders.
pub fn blobs_and_temps(data_dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for folder in ["blobs", "tmp"] {
        let mut stack = vec![data_dir.join(folder)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.path().is_dir() {
                    stack.push(entry.path());
                } else {
                    found.push(entry.path());
                }
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
