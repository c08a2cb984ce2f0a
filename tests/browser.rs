//! The pages in a real browser: starts `snapview serve` on a free port with an empty data folder
//! and runs `tests/browser/server_pages.mjs` (the pages) or `tests/browser/views.mjs` (the
//! snapshot page's interactive views), `compare.mjs` (compare and group pages), `oom.mjs` (the
//! OOM explainer) or `cold.mjs` (the page of a snapshot being parsed) against it, with playwright-core driving Debian's chromium.
//! Screenshots land in `target/screenshots/`. The performance measurement on the 3.2M-event trace
//! is `tests/browser/perf_huge.mjs`, run by hand (see its header).
//!
//! Needs `/usr/bin/chromium` (`apt-get install chromium`), `node` and `node_modules/playwright-core`
//! (`npm ci`). When they are missing each test prints "skipping browser tests: ..." and passes, so
//! `cargo test` stays quick on a machine without a browser; with `SNAPVIEW_REQUIRE_BROWSER=1`
//! (set by `.ci/run`) a missing browser fails the test instead, so CI never skips them silently.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Debian's chromium, unless `CHROMIUM_PATH` names another (the scripts read the same variable).
fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM_PATH")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}
/// Set (to anything but "0") where a missing browser must fail the tests rather than skip them.
const REQUIRE_BROWSER: &str = "SNAPVIEW_REQUIRE_BROWSER";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A child process killed when dropped, so a failing assertion never leaves a process behind.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Collects everything a child writes to `stream` (read on a thread, so a full pipe never blocks it).
fn collect(stream: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stream) = stream {
            let mut bytes = Vec::new();
            let _ = stream.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

fn requirements() -> Result<(), String> {
    let mut missing = Vec::new();
    let chromium = chromium();
    if !chromium.exists() {
        missing.push(format!(
            "{} is missing: install Debian's chromium with `sudo apt-get install chromium`",
            chromium.display()
        ));
    }
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(node, Ok(status) if status.success()) {
        missing.push(
            "node is missing: install Node.js 18 or newer (`sudo apt-get install nodejs npm`)"
                .into(),
        );
    }
    if !root()
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        missing.push(format!(
            "node_modules/playwright-core is missing: run `npm ci` in {} (it downloads no browser)",
            root().display()
        ));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("\n"))
    }
}

#[test]
fn pages_work_in_a_real_browser() {
    run_script("tests/browser/server_pages.mjs", Duration::from_secs(90));
}

/// The snapshot page's interactive views (timeline, flame graph, segments, events):
/// `tests/browser/views.mjs` on its own server and data folder.
#[test]
fn views_work_in_a_real_browser() {
    run_script("tests/browser/views.mjs", Duration::from_secs(150));
}

/// The timeline down to every allocation (issue 20): the byte zoom, detail, the grey column's
/// list, every allocation of gpt2_adamw reached, the whole trace's shape, the labels and ticks;
/// the 287 MB trace too when it is in `SNAPVIEW_LARGE_DIR`: `tests/browser/timeline_zoom.mjs`.
#[test]
fn the_timeline_reaches_every_allocation_in_a_real_browser() {
    run_script("tests/browser/timeline_zoom.mjs", Duration::from_secs(420));
}

/// Roles in the views (issue 11): the timeline coloured by role, its legend and role strip, the
/// flame graph rooted by role: `tests/browser/roles.mjs`.
#[test]
fn roles_show_in_the_views_in_a_real_browser() {
    run_script("tests/browser/roles.mjs", Duration::from_secs(120));
}

/// The allocator's blocks: the segment map's history, zoom and pending frees, and the cached
/// segment timeline: `tests/browser/segments.mjs`.
#[test]
fn segment_views_work_in_a_real_browser() {
    run_script("tests/browser/segments.mjs", Duration::from_secs(180));
}

/// The segments tab on the 287 MB trace: its answers come fast, and stepping, hovering and
/// zooming leave no main-thread task over 100 ms: `tests/browser/segments_huge.mjs`, with no
/// other browser test beside it (see [`QUIET`]).
#[test]
fn the_segment_views_stay_responsive_on_the_huge_trace_in_a_real_browser() {
    let Some(huge) = common::large_file("gpt2_huge_trace") else {
        eprintln!("skipping: gpt2_huge_trace.pickle is not in SNAPVIEW_LARGE_DIR");
        return;
    };
    if !browser_ready() {
        return;
    }
    let _alone = QUIET.write().unwrap_or_else(PoisonError::into_inner);
    let huge = huge.to_string_lossy();
    run_node(
        "tests/browser/segments_huge.mjs",
        Duration::from_secs(240),
        &[],
        &[("SNAPVIEW_HUGE", &huge)],
    );
}

/// Several files dropped at once, ranks offered as a group, Esc cancelling a chosen upload,
/// inline rename from the list, and the unknown page: `tests/browser/uploads.mjs`.
#[test]
fn uploads_and_list_rename_work_in_a_real_browser() {
    run_script("tests/browser/uploads.mjs", Duration::from_secs(130));
}

/// The Events tab's stacks, filter marks, times and block ids, and pinned host memory as a
/// device in the pages: `tests/browser/events_host.mjs`.
#[test]
fn events_and_host_memory_work_in_a_real_browser() {
    run_script("tests/browser/events_host.mjs", Duration::from_secs(140));
}

/// The compare page, its picker, the group page and the list's selection:
/// `tests/browser/compare.mjs`.
#[test]
fn compare_and_group_pages_work_in_a_real_browser() {
    // The script gives up by itself after 100 s.
    run_script("tests/browser/compare.mjs", Duration::from_secs(140));
}

/// Findings and memory by role on the overview, the change by role on the compare page:
/// `tests/browser/findings.mjs`.
#[test]
fn findings_and_roles_show_in_a_real_browser() {
    run_script("tests/browser/findings.mjs", Duration::from_secs(120));
}

/// A snapshot not in memory (dropped by a one-byte cache, as after a restart): its page
/// answers at once, follows the parse, and becomes the full page: `tests/browser/cold.mjs`.
#[test]
fn a_cold_snapshot_shows_its_load_then_its_page_in_a_real_browser() {
    run_script_with(
        "tests/browser/cold.mjs",
        Duration::from_secs(100),
        &[("SNAPVIEW_CACHE", "1")],
        &[],
    );
}

#[test]
fn the_oom_explainer_works_in_a_real_browser() {
    run_script("tests/browser/oom.mjs", Duration::from_secs(60));
}

/// A server with a write token and a read token: the login form, the drop zone's token field,
/// and a cross-site upload refused, in `tests/browser/access.mjs`.
#[test]
fn tokens_and_cross_site_writes_work_in_a_real_browser() {
    let (write, read) = (
        "browser-write-token-0123456789",
        "browser-read-token-0123456789",
    );
    run_script_with(
        "tests/browser/access.mjs",
        Duration::from_secs(80),
        &[
            ("SNAPVIEW_WRITE_TOKEN", write),
            ("SNAPVIEW_READ_TOKEN", read),
        ],
        &[
            ("SNAPVIEW_TEST_WRITE_TOKEN", write),
            ("SNAPVIEW_TEST_READ_TOKEN", read),
        ],
    );
}

/// A page of another origin frames a snapshot page: drawn from a server with
/// `--frame-ancestors`, empty from one with the default (`tests/browser/frame.mjs`).
#[test]
fn a_notebook_frames_only_a_server_that_allows_it_in_a_real_browser() {
    let unframeable = common::served::Served::builder()
        .env("RUST_LOG", "snapview=warn")
        .env_remove("SNAPVIEW_FRAME_ANCESTORS")
        .start();
    let unframeable_url = unframeable.url("");
    run_script_with(
        "tests/browser/frame.mjs",
        Duration::from_secs(100),
        &[("SNAPVIEW_FRAME_ANCESTORS", "http://127.0.0.1:*")],
        &[("SNAPVIEW_TEST_UNFRAMEABLE_URL", &unframeable_url)],
    );
}

/// The browser tests run side by side (two at once on two cores), each holding this shared;
/// a test that measures the page's main-thread time holds it alone, so that what it measures is
/// the page and not a second Chromium and server on the same cores. On the CI machine, stepping
/// the huge trace beside another test gave tasks of 112-114 ms; alone, on a 2-core
/// VM, none over 50 ms.
static QUIET: RwLock<()> = RwLock::new(());

/// Whether the browser tests can run here; when they cannot, says why and returns false (or
/// panics where [`REQUIRE_BROWSER`] is set).
fn browser_ready() -> bool {
    let Err(missing) = requirements() else {
        return true;
    };
    if std::env::var_os(REQUIRE_BROWSER).is_some_and(|value| value != "0") {
        panic!("the browser test cannot run ({REQUIRE_BROWSER} is set):\n{missing}");
    }
    eprintln!("skipping browser tests: {missing}\n(set {REQUIRE_BROWSER}=1 to make this an error)");
    false
}

/// Starts `snapview serve` on a free port with an empty data folder and runs the node `script`
/// against it, failing with everything both printed when the script fails.
fn run_script(script: &str, limit: Duration) {
    run_script_with(script, limit, &[], &[]);
}

/// `run_script` with more environment for the server and for the script.
fn run_script_with(
    script: &str,
    limit: Duration,
    server_env: &[(&str, &str)],
    script_env: &[(&str, &str)],
) {
    if !browser_ready() {
        return;
    }
    // A test that failed while holding the lock poisons it; the others still run.
    let _beside_others = QUIET.read().unwrap_or_else(PoisonError::into_inner);
    run_node(script, limit, server_env, script_env);
}

/// The script against a fresh server (see [`run_script`]), whatever else runs beside it.
fn run_node(
    script: &str,
    limit: Duration,
    server_env: &[(&str, &str)],
    script_env: &[(&str, &str)],
) {
    let mut server = common::served::Served::builder()
        .env("RUST_LOG", "snapview=warn")
        // The developer's own settings must not change what the pages show.
        .env_remove("SNAPVIEW_PUBLIC_URL")
        .env_remove("SNAPVIEW_MAX_UPLOAD")
        .env_remove("SNAPVIEW_CACHE")
        .env_remove("SNAPVIEW_WRITE_TOKEN")
        .env_remove("SNAPVIEW_READ_TOKEN")
        .env_remove("SNAPVIEW_TOKENS_FILE")
        .env_remove("SNAPVIEW_ALLOWED_HOSTS")
        .envs(server_env.iter().copied())
        .start();
    let base = server.url("");

    let script = root().join(script);
    let node = Command::new("node")
        .arg(&script)
        .current_dir(root())
        .envs(script_env.iter().copied())
        .env("SNAPVIEW_URL", &base)
        .env("CHROMIUM_PATH", chromium())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node");
    let mut node = Killed(node);
    let out = collect(node.0.stdout.take());
    let err = collect(node.0.stderr.take());
    // The script gives up by itself before `limit`; this is the backstop.
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = node.0.try_wait().expect("wait for node") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the browser test {} did not finish within {limit:?}",
            script.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let server_died = server.child.try_wait().ok().flatten();
    let server_log = server.log_text();
    drop(server);
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    // Shown with --nocapture, and always when the test fails.
    println!("{out}");
    assert!(
        status.success(),
        "the browser test failed ({status}):\n{out}\n{err}\nserver log:\n{server_log}"
    );
    assert!(
        server_died.is_none(),
        "snapview serve died during the browser test ({server_died:?}):\n{server_log}"
    );
}

/// `snapview open FILE --no-browser` in a real browser: the URL it prints opens the file's page
/// with its views drawn (`tests/browser/open.mjs`), and it exits cleanly on SIGINT.
#[test]
fn snapview_open_serves_its_file_in_a_real_browser() {
    if !browser_ready() {
        return;
    }
    let _beside_others = QUIET.read().unwrap_or_else(PoisonError::into_inner);
    let tmp = tempfile::tempdir().expect("tmp");
    let mut opened = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args(["open", "--no-browser"])
        .arg(common::path_of("multi_device"))
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("snapview open");
    let mut stdout = std::io::BufReader::new(opened.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("the URL line");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    let opened = Killed(opened);
    let base = url.split("/s/").next().expect("base").to_owned();
    let node = Command::new("node")
        .arg(root().join("tests/browser/open.mjs"))
        .current_dir(root())
        .env("SNAPVIEW_URL", &base)
        .env("SNAPVIEW_OPEN_URL", &url)
        .env("CHROMIUM_PATH", chromium())
        .output()
        .expect("run node");
    let out = String::from_utf8_lossy(&node.stdout);
    println!("{out}");
    assert!(
        node.status.success(),
        "the browser test failed:\n{out}\n{}",
        String::from_utf8_lossy(&node.stderr)
    );
    let pid = opened.0.id().to_string();
    let mut opened = opened;
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = opened.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "snapview open did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert_eq!(
        std::fs::read_dir(tmp.path()).expect("tmp").count(),
        0,
        "its temporary folder is left"
    );
}
