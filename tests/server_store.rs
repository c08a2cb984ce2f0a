//! The store under races and faults, through the real server binary over real TCP: identical
//! uploads at once, uploads racing deletes, lost files, bad rows, a lost index, the trash and
//! its purge, a read-only blobs folder, a full disk, and the audit log of it all.

use crate::common;

use common::backend::{blob_exists, blob_path, folder_only, leftovers};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The shared server starter (killed, as a crash would be, on drop), with this file's calls.
struct Served {
    server: common::served::Served,
    url: String,
}

impl Served {
    fn start(data_dir: &Path, extra: &[&str]) -> Self {
        let server = common::served::Served::builder()
            .data_dir(data_dir)
            .args(extra)
            .env("RUST_LOG", "snapview=info")
            .start();
        let url = server.url("");
        Self { server, url }
    }

    fn log_text(&self) -> String {
        self.server.log_text()
    }

    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> (u16, String) {
        let (status, bytes) = self.call_bytes(method, path, body);
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn call_bytes(&self, method: &str, path: &str, body: Option<&[u8]>) -> (u16, Vec<u8>) {
        let url = format!("{}{path}", self.url);
        let result = match (method, body) {
            ("GET", _) => ureq::get(&url)
                .config()
                .http_status_as_error(false)
                .build()
                .call(),
            ("DELETE", _) => ureq::delete(&url)
                .config()
                .http_status_as_error(false)
                .build()
                .call(),
            ("POST", Some(bytes)) => ureq::post(&url)
                .header("Content-Type", "application/octet-stream")
                .config()
                .http_status_as_error(false)
                .build()
                .send(bytes),
            ("POST", None) => ureq::post(&url)
                .config()
                .http_status_as_error(false)
                .build()
                .send_empty(),
            _ => panic!("no {method} here"),
        };
        let mut response = result.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .expect("body");
        (status, bytes)
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.call("GET", path, None)
    }

    /// `GET /api/snapshots/{id}/raw`: the stored bytes.
    fn raw(&self, id: &str) -> (u16, Vec<u8>) {
        self.call_bytes("GET", &format!("/api/snapshots/{id}/raw"), None)
    }

    fn json(&self, path: &str) -> serde_json::Value {
        let (status, text) = self.get(path);
        assert_eq!(status, 200, "{path}: {text}");
        serde_json::from_str(&text).expect("json")
    }

    /// Uploads `bytes`; returns the status and the answer's JSON.
    fn upload(&self, bytes: &[u8], query: &str) -> (u16, serde_json::Value) {
        let (status, text) = self.call("POST", &format!("/api/snapshots{query}"), Some(bytes));
        let json =
            serde_json::from_str(&text).unwrap_or_else(|_| serde_json::Value::String(text.clone()));
        (status, json)
    }

    fn listed_ids(&self) -> Vec<String> {
        self.json("/api/snapshots")["snapshots"]
            .as_array()
            .expect("snapshots")
            .iter()
            .map(|s| s["id"].as_str().expect("id").to_owned())
            .collect()
    }

    fn audit_actions(&self) -> Vec<String> {
        self.json("/api/audit")["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["action"].as_str().expect("action").to_owned())
            .collect()
    }
}

/// A real snapshot made unique by trailing bytes after the pickle's STOP (which readers ignore,
/// as Python does), so every round of a race gets bytes of its own.
fn unique_snapshot(tag: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(common::path_of("mlp_small")).expect("fixture");
    bytes.extend_from_slice(tag.as_bytes());
    bytes
}

fn data_dir(root: &tempfile::TempDir) -> PathBuf {
    let dir = root.path().join("data");
    std::fs::create_dir_all(&dir).expect("data dir");
    dir
}

#[test]
fn identical_uploads_at_once_all_succeed_with_one_id() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = data_dir(&root);
    // Eight uploads at once from one address: more than --max-uploads-per-client's default.
    let server = Served::start(&dir, &["--max-uploads-per-client", "0"]);
    const ROUNDS: usize = 6;
    const AT_ONCE: usize = 8;
    for round in 0..ROUNDS {
        let bytes = unique_snapshot(&format!("identical-{round:02}"));
        let answers: Vec<(u16, serde_json::Value)> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..AT_ONCE)
                .map(|_| scope.spawn(|| server.upload(&bytes, "?name=same")))
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("thread"))
                .collect()
        });
        let created = answers.iter().filter(|(status, _)| *status == 201).count();
        for (status, json) in &answers {
            assert!(
                *status == 200 || *status == 201,
                "round {round}: {status} {json}"
            );
        }
        assert_eq!(
            created, 1,
            "round {round}: one upload stores, the rest find it"
        );
        let ids: std::collections::BTreeSet<&str> = answers
            .iter()
            .map(|(_, json)| json["id"].as_str().expect("id"))
            .collect();
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
    }
    assert_eq!(server.listed_ids().len(), ROUNDS);
    let uploads = server
        .audit_actions()
        .iter()
        .filter(|a| *a == "upload")
        .count();
    assert_eq!(uploads, ROUNDS, "one audit entry per stored snapshot");
    let left = leftovers(&dir);
    assert!(left.temps.is_empty(), "no temporary file left: {left:?}");
}

#[test]
fn uploads_racing_deletes_never_leave_a_listed_snapshot_unreadable() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = data_dir(&root);
    let server = Served::start(&dir, &[]);
    for round in 0..12 {
        let bytes = unique_snapshot(&format!("race-{round:02}"));
        // Known first, so the deletes have something to hit from the start.
        let (status, first) = server.upload(&bytes, "");
        assert_eq!(status, 201, "{first}");
        let id = first["id"].as_str().expect("id").to_owned();
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    let (status, json) = server.upload(&bytes, "");
                    assert!(status == 200 || status == 201, "{status} {json}");
                });
                scope.spawn(|| {
                    let (status, text) =
                        server.call("DELETE", &format!("/api/snapshots/{id}"), None);
                    assert!(
                        status == 204 || status == 410,
                        "a delete answers 204 or 410 (already in the trash): {status} {text}"
                    );
                });
            }
        });
        // Whatever order they ran in: listed means readable, and readable means the bytes.
        for listed in server.listed_ids() {
            let (status, raw) = server.raw(&listed);
            assert_eq!(status, 200, "round {round}: {listed} listed but unreadable");
            if listed == id {
                assert!(
                    raw == bytes,
                    "round {round}: the stored bytes are the upload's"
                );
            }
        }
        let (status, _) = server.get(&format!("/api/snapshots/{id}"));
        assert!(status == 200 || status == 410, "round {round}: {status}");
        // And uploading again always leaves it live and readable.
        let (status, json) = server.upload(&bytes, "");
        assert!(status == 200 || status == 201, "{json}");
        let (status, text) = server.get(&format!("/api/snapshots/{id}"));
        assert_eq!(status, 200, "round {round}: {text}");
        assert!(text.contains("84153548"), "MemoryViz's peak for mlp_small");
        assert!(blob_exists(&dir, &id));
    }
}

#[test]
fn a_lost_file_is_unlisted_answers_410_and_a_reupload_repairs_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = data_dir(&root);
    let server = Served::start(&dir, &[]);
    let bytes = unique_snapshot("lost");
    let (status, json) = server.upload(&bytes, "?name=precious");
    assert_eq!(status, 201);
    let id = json["id"].as_str().expect("id").to_owned();
    common::backend::remove_blob(&dir, &id);

    let list = server.json("/api/snapshots");
    assert_eq!(
        list["snapshots"],
        serde_json::json!([]),
        "not listed: {list}"
    );
    assert_eq!(list["unlisted"][0]["id"], id.as_str());
    let (status, page) = server.get("/");
    assert_eq!(status, 200);
    assert!(!page.contains(&id));
    for path in [
        format!("/api/snapshots/{id}"),
        format!("/api/snapshots/{id}/raw"),
    ] {
        let (status, text) = server.get(&path);
        assert_eq!(status, 410, "{path}: {text}");
        assert!(text.contains("upload the same file again"), "{text}");
    }

    let (status, json) = server.upload(&bytes, "?name=whatever");
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["name"], "precious", "the repair keeps the record");
    let (status, raw) = server.raw(&id);
    assert_eq!(status, 200);
    assert!(raw == bytes, "the repaired file is the upload's bytes");
    assert_eq!(server.listed_ids(), [id]);
    assert_eq!(server.audit_actions(), ["repair", "upload"]);
}

#[test]
fn a_bad_summary_row_is_skipped_and_rebuilt_at_start() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = data_dir(&root);
    let (good, bad) = {
        let server = Served::start(&dir, &[]);
        let (_, good) = server.upload(&unique_snapshot("good"), "?name=good");
        let (_, bad) = server.upload(&unique_snapshot("bad"), "?name=bad");
        let (good, bad) = (
            good["id"].as_str().expect("id").to_owned(),
            bad["id"].as_str().expect("id").to_owned(),
        );
        common::backend::set_summary(&dir, &bad, "{\"devices\": [");
        let (status, page) = server.get("/");
        assert_eq!(status, 200, "the list page survives a bad row: {page}");
        assert!(page.contains(&good) && !page.contains(&format!("/s/{bad}")));
        let list = server.json("/api/snapshots");
        assert_eq!(list["snapshots"].as_array().expect("list").len(), 1);
        assert_eq!(list["unlisted"][0]["id"], bad.as_str(), "reported: {list}");
        let (status, _) = server.get(&format!("/api/snapshots/{bad}"));
        assert_eq!(status, 200, "the snapshot itself still opens");
        (good, bad)
    };
    let server = Served::start(&dir, &[]);
    let mut listed = server.listed_ids();
    listed.sort();
    let mut both = vec![good, bad.clone()];
    both.sort();
    assert_eq!(listed, both, "{}", server.log_text());
    let list = server.json("/api/snapshots");
    let row = list["snapshots"]
        .as_array()
        .expect("list")
        .iter()
        .find(|s| s["id"] == bad.as_str())
        .expect("bad row back");
    assert_eq!(row["summary"]["peak_allocated_bytes"], 84153548u64);
    assert_eq!(row["name"], "bad");
}

#[test]
fn a_lost_index_is_rebuilt_from_the_blobs_and_reindex_refreshes_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = data_dir(&root);
    let id = {
        let server = Served::start(&dir, &[]);
        let (status, json) = server.upload(&unique_snapshot("index"), "?name=indexed&group=g1");
        assert_eq!(status, 201);
        json["id"].as_str().expect("id").to_owned()
    };
    // A summary that parses but is wrong: only --reindex looks at the blob again.
    common::backend::set_summary(&dir, &id, "{}");
    {
        let server = Served::start(&dir, &["--reindex"]);
        let list = server.json("/api/snapshots");
        assert_eq!(list["snapshots"][0]["name"], "indexed", "names are kept");
        assert_eq!(list["snapshots"][0]["group"], "g1");
        assert_eq!(
            list["snapshots"][0]["summary"]["peak_allocated_bytes"],
            84153548u64
        );
        assert!(
            server.log_text().contains("reindexed 1/1"),
            "{}",
            server.log_text()
        );
    }
    if folder_only(
        "a lost SQLite file is rebuilt from the blobs folder at start; a PostgreSQL database \
         is its operator's to back up, and nothing rebuilds it from the bucket",
    ) {
        return;
    }
    for file in ["snapview.db", "snapview.db-wal", "snapview.db-shm"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let server = Served::start(&dir, &[]);
    let list = server.json("/api/snapshots");
    assert_eq!(
        list["snapshots"][0]["id"],
        id.as_str(),
        "{}",
        server.log_text()
    );
    assert_eq!(list["snapshots"][0]["name"], id.as_str(), "named by its id");
    assert_eq!(
        list["snapshots"][0]["summary"]["peak_allocated_bytes"],
        84153548u64
    );
    let (status, _) = server.get(&format!("/s/{id}"));
    assert_eq!(status, 200);
}

#[test]
fn the_trash_restores_reuploads_and_empties_by_age_with_an_audit_log() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = data_dir(&root);
    let bytes = unique_snapshot("trash");
    let other = unique_snapshot("kept");
    let id = {
        let server = Served::start(&dir, &[]);
        let (_, json) = server.upload(&bytes, "?name=oops");
        let id = json["id"].as_str().expect("id").to_owned();
        server.upload(&other, "?name=kept");
        let (status, _) = server.call("DELETE", &format!("/api/snapshots/{id}"), None);
        assert_eq!(status, 204);
        assert!(!server.listed_ids().contains(&id));
        assert!(blob_exists(&dir, &id), "kept in the trash");
        for path in [
            format!("/api/snapshots/{id}"),
            format!("/api/snapshots/{id}/raw"),
            format!("/api/snapshots/{id}/timeline"),
            format!("/s/{id}"),
        ] {
            let (status, text) = server.get(&path);
            assert_eq!(status, 410, "{path}: {text}");
            assert!(text.contains("deleted"), "{path}: {text}");
        }
        let (status, _) = server.call("DELETE", &format!("/api/snapshots/{id}"), None);
        assert_eq!(status, 410, "deleting twice says it is in the trash");

        let (status, text) = server.call("POST", &format!("/api/snapshots/{id}/restore"), None);
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("\"name\":\"oops\""), "{text}");
        let (status, _) = server.call("POST", &format!("/api/snapshots/{id}/restore"), None);
        assert_eq!(status, 200, "a second undo is harmless");
        assert!(server.listed_ids().contains(&id));
        let (status, _) = server.get(&format!("/s/{id}"));
        assert_eq!(status, 200);

        // Uploading the same bytes while they are in the trash makes them live again.
        server.call("DELETE", &format!("/api/snapshots/{id}"), None);
        let (status, json) = server.upload(&bytes, "?name=again");
        assert_eq!(status, 201, "{json}");
        assert_eq!(json["name"], "again");
        assert!(server.listed_ids().contains(&id));

        server.call("DELETE", &format!("/api/snapshots/{id}"), None);
        let (status, text) = server.call("POST", "/api/snapshots/0123456789abcdef/restore", None);
        assert_eq!(status, 404, "{text}");
        id
    };
    // A week's trash keeps it over a restart; no trash days empties it at start.
    {
        let server = Served::start(&dir, &[]);
        assert!(blob_exists(&dir, &id));
        let (status, _) = server.get(&format!("/api/snapshots/{id}"));
        assert_eq!(status, 410);
    }
    let server = Served::start(&dir, &["--trash-days", "0"]);
    assert!(!blob_exists(&dir, &id), "purged: {}", server.log_text());
    let (status, _) = server.get(&format!("/api/snapshots/{id}"));
    assert_eq!(status, 404);
    let (status, _) = server.call("POST", &format!("/api/snapshots/{id}/restore"), None);
    assert_eq!(status, 404);
    assert_eq!(
        server.listed_ids().len(),
        1,
        "the other snapshot is untouched"
    );

    assert_eq!(
        server.audit_actions(),
        [
            "purge", "delete", "upload", "delete", "restore", "delete", "upload", "upload"
        ]
    );
    let entries = server.json("/api/audit?limit=2")["entries"].clone();
    assert_eq!(entries.as_array().expect("entries").len(), 2);
    assert_eq!(entries[0]["snapshot_id"], id.as_str());
    assert!(entries[0]["at_ms"].as_i64().expect("when") > 0);
    assert_eq!(entries[1]["detail"]["name"], "again");
    for bad in ["0", "abc", "99999999"] {
        let (status, text) = server.get(&format!("/api/audit?limit={bad}"));
        assert_eq!(status, 400, "{bad}: {text}");
        assert!(text.contains("limit"), "{text}");
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Whether the tests that need root and `mount` must run rather than skip: under CI (`CI=true`),
/// or with `SNAPVIEW_REQUIRE_ROOT` set, as `.ci/run` does.
fn root_required() -> bool {
    common::required("SNAPVIEW_REQUIRE_ROOT") || std::env::var("CI").is_ok_and(|v| v == "true")
}

/// What `setup` made, or `None` to skip a test that cannot run here, and a panic with the reason
/// instead where the test is required ([`root_required`]).
fn or_skip<T>(setup: Result<T, String>) -> Option<T> {
    match setup {
        Ok(made) => Some(made),
        Err(why) if root_required() => {
            panic!("{why}: this test cannot run, and CI=true or SNAPVIEW_REQUIRE_ROOT says it must")
        }
        Err(why) => {
            eprintln!("skipped: {why} (set SNAPVIEW_REQUIRE_ROOT=1 to make this an error)");
            None
        }
    }
}

/// Runs `command`, describing why it failed if it did.
fn run(command: &mut Command) -> Result<(), String> {
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("{command:?} failed ({status})")),
        Err(error) => Err(format!("{command:?} cannot run: {error}")),
    }
}

/// Makes a folder read-only for this process: a read-only bind mount when running as root
/// (root ignores permissions), else its permission bits.
struct ReadOnly {
    path: PathBuf,
    mounted: bool,
}

impl ReadOnly {
    /// The folder made read-only, or why that does not work here.
    fn new(path: &Path) -> Result<Self, String> {
        let probe = path.join(".probe");
        let mounted = is_root();
        if mounted {
            run(Command::new("mount").arg("--bind").arg(path).arg(path))?;
            if let Err(why) = run(Command::new("mount")
                .args(["-o", "remount,bind,ro"])
                .arg(path))
            {
                let _ = Command::new("umount").arg(path).status();
                return Err(why);
            }
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555))
                .map_err(|error| format!("cannot make {} read-only: {error}", path.display()))?;
        }
        let guard = Self {
            path: path.to_owned(),
            mounted,
        };
        // Only a folder that really refuses writes makes the test mean something.
        if std::fs::write(&probe, b"x").is_ok() {
            return Err(format!(
                "{} still takes writes (neither root with mount, nor a user whom permissions stop)",
                path.display()
            ));
        }
        Ok(guard)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.path).status();
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755));
        }
    }
}

#[test]
fn a_read_only_blobs_folder_loses_nothing() {
    if folder_only("a blobs folder made read-only: object storage has no folder to make so") {
        return;
    }
    let root = tempfile::tempdir().expect("tempdir");
    let dir = data_dir(&root);
    let bytes = unique_snapshot("read-only");
    let id = {
        let server = Served::start(&dir, &[]);
        let (_, json) = server.upload(&bytes, "?name=fragile");
        json["id"].as_str().expect("id").to_owned()
    };
    let folder = blob_path(&dir, &id).parent().expect("folder").to_owned();
    let Some(read_only) = or_skip(ReadOnly::new(&folder)) else {
        return;
    };
    {
        // Delete and restore touch only the index: they work, and the file stays.
        let server = Served::start(&dir, &["--trash-days", "0"]);
        let (status, _) = server.call("DELETE", &format!("/api/snapshots/{id}"), None);
        assert_eq!(status, 204);
        let (status, text) = server.call("POST", &format!("/api/snapshots/{id}/restore"), None);
        assert_eq!(status, 200, "{text}");
        let (status, _) = server.get(&format!("/api/snapshots/{id}/raw"));
        assert_eq!(status, 200);
        server.call("DELETE", &format!("/api/snapshots/{id}"), None);
    }
    {
        // The purge at start cannot remove the file: the snapshot stays in the trash, whole.
        let server = Served::start(&dir, &["--trash-days", "0"]);
        assert!(blob_path(&dir, &id).is_file());
        assert!(
            server.log_text().contains("kept in the trash"),
            "{}",
            server.log_text()
        );
        let (status, text) = server.call("POST", &format!("/api/snapshots/{id}/restore"), None);
        assert_eq!(status, 200, "still restorable: {text}");
        let (status, raw) = server.raw(&id);
        assert_eq!(status, 200);
        assert!(raw == bytes, "the file is whole");
        server.call("DELETE", &format!("/api/snapshots/{id}"), None);
    }
    drop(read_only);
    let server = Served::start(&dir, &["--trash-days", "0"]);
    assert!(!blob_path(&dir, &id).exists(), "purged once writable");
    let (status, _) = server.get(&format!("/api/snapshots/{id}"));
    assert_eq!(status, 404);
}

/// A tmpfs of `size` at `path`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// The tmpfs mounted, or why that does not work here.
    fn mount(path: &Path, size: &str) -> Result<Self, String> {
        if !is_root() {
            return Err("mounting a small tmpfs needs root".to_owned());
        }
        std::fs::create_dir_all(path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path))?;
        Ok(Self(path.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_refuses_an_upload_cleanly_and_blocks_nothing_after() {
    if folder_only("a full disk under the data folder: object storage does not fill up so") {
        return;
    }
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("data");
    let Some(_disk) = or_skip(Tmpfs::mount(&dir, "512k")) else {
        return;
    };
    let server = Served::start(&dir, &[]);
    let big = std::fs::read(common::path_of("compile")).expect("fixture");
    let (status, json) = server.upload(&big, "?name=big");
    assert_eq!(status, 507, "{json}");
    assert_eq!(
        json["error"]["code"], "disk_full",
        "the error says why: {json}"
    );
    let left = leftovers(&dir);
    assert!(left.is_empty(), "nothing left behind: {left:?}");
    assert!(server.listed_ids().is_empty());
    let (status, json) = server.upload(&unique_snapshot("small"), "?name=small");
    assert_eq!(status, 201, "{json}");
    let id = json["id"].as_str().expect("id");
    let (status, _) = server.get(&format!("/api/snapshots/{id}"));
    assert_eq!(status, 200);

    // Now a disk with room for the upload's file but not for the index's write that follows
    // its rename into place: the blob must not stay behind eating the space (an orphan that
    // would block every later upload).
    let bytes = unique_snapshot("full");
    let pages = bytes.len().div_ceil(4096) as u64;
    let available = || -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&dir)
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .expect("df's number")
    };
    let filler = root.path().join("data").join("filler");
    std::fs::write(&filler, vec![0u8; (available() - pages * 4096) as usize]).expect("filler");
    assert_eq!(available(), pages * 4096, "room for the upload alone");
    let (status, json) = server.upload(&bytes, "?name=full");
    // The index's write fails after the blob's rename ("database or disk is full").
    assert_eq!(status, 507, "{json}");
    assert_eq!(json["error"]["code"], "disk_full", "{json}");
    let left = leftovers(&dir);
    let kept = blob_path(&dir, id).display().to_string();
    let blobs: Vec<&String> = left
        .blobs
        .iter()
        .chain(&left.temps)
        .filter(|p| **p != kept)
        .collect();
    assert!(blobs.is_empty(), "an orphan left behind: {blobs:?}");
    assert_eq!(server.listed_ids(), [id], "the store is as it was");
    std::fs::remove_file(&filler).expect("free the disk");
    let (status, json) = server.upload(&bytes, "?name=full");
    assert_eq!(status, 201, "{json}");
}
