//! The command line end to end: the real binary on real files.

use crate::common;

use std::process::Command;

fn snapview(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args(args)
        .output()
        .expect("run snapview")
}

fn path(name: &str) -> String {
    common::path_of(name).to_string_lossy().into_owned()
}

#[test]
fn summary_json_has_the_documented_fields_and_oracle_numbers() {
    let output = snapview(&["summary", &path("multi_device"), "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let devices = json["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 2);
    for field in [
        "device",
        "trace_entries",
        "actions",
        "peak_allocated_bytes",
        "peak_event_index",
        "peak_reserved_bytes",
        "allocated_bytes_at_snapshot",
        "reserved_bytes_at_snapshot",
        "oom_events",
    ] {
        assert!(devices[0].get(field).is_some(), "devices[].{field}");
    }
    for field in ["segments", "blocks", "notes"] {
        assert!(json.get(field).is_some(), "{field}");
    }
    // MemoryViz's peaks for this file (oracle/memoryviz_peaks.json).
    assert_eq!(devices[0]["peak_allocated_bytes"], 238108672u64);
    assert_eq!(devices[1]["peak_allocated_bytes"], 154593484u64);
    assert_eq!(devices[1]["trace_entries"], 215);
}

#[test]
fn summary_text_names_the_peak_and_the_oom() {
    let output = snapview(&["summary", &path("oom")]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("peak allocated   2.58 GiB"), "{text}");
    assert!(
        text.contains("OOM              500 MiB requested"),
        "{text}"
    );
    assert!(text.contains("top stacks at the peak"), "{text}");
    // Frames read as on the pages and in diffs (`FrameLabel::short`: basename:line function),
    // innermost first; the path and the full `file:line:name` form stay in the JSON.
    assert!(
        text.contains("activations.py:66 forward ← module.py:1790 _call_impl ← "),
        "{text}"
    );
}

#[test]
fn diff_text_says_which_roles_changed() {
    // Inference with autograd on keeps every activation: the change is activations, not weights.
    let output = snapview(&["diff", &path("infer_nograd"), &path("infer_grad")]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let by_role = text.split("by role:\n").nth(1).expect("a by-role block");
    let first = by_role.lines().next().unwrap_or_default();
    assert!(
        first.trim_start().starts_with("activation") && first.contains("+11.4 GiB"),
        "{text}"
    );
    assert!(
        by_role
            .lines()
            .any(|l| l.trim_start().starts_with("parameter") && l.contains("±0")),
        "{text}"
    );
}

#[test]
fn stats_is_torchs_segsum_byte_for_byte() {
    for name in ["mlp_small", "gpt2_adamw", "expandable"] {
        let output = snapview(&["stats", &path(name)]);
        assert!(output.status.success());
        let expected = common::oracle(&format!("{name}.segsum.txt")).expect("oracle");
        assert_eq!(String::from_utf8_lossy(&output.stdout), expected, "{name}");
    }
}

#[test]
fn export_writes_torchs_folded_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, suffix) in [("segments", "segments"), ("memory", "memory")] {
        let out = dir.path().join(format!("{kind}.folded"));
        let output = snapview(&[
            "export",
            &path("gpt2_adamw"),
            "--kind",
            kind,
            "-o",
            &out.to_string_lossy(),
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut ours: Vec<String> = std::fs::read_to_string(&out)
            .expect("written")
            .lines()
            .map(str::to_owned)
            .collect();
        let mut theirs: Vec<String> = common::oracle(&format!("gpt2_adamw.{suffix}.txt"))
            .expect("oracle")
            .lines()
            .map(str::to_owned)
            .collect();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs, "{kind}");
    }
}

#[test]
fn bad_input_is_one_line_and_exit_status_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truncated = dir.path().join("truncated.pickle");
    let bytes = std::fs::read(common::path_of("mlp_small")).expect("fixture");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let cases: [(&str, String); 3] = [
        ("truncated", truncated.to_string_lossy().into_owned()),
        (
            "missing",
            dir.path()
                .join("nope.pickle")
                .to_string_lossy()
                .into_owned(),
        ),
        (
            "not a snapshot",
            env!("CARGO_MANIFEST_DIR").to_owned() + "/Cargo.toml",
        ),
    ];
    for (what, file) in cases {
        let output = snapview(&["summary", &file]);
        assert_eq!(output.status.code(), Some(2), "{what}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
        assert!(stderr.starts_with("snapview: error: "), "{what}: {stderr}");
    }
    let unknown = snapview(&["frobnicate"]);
    assert_eq!(unknown.status.code(), Some(2));
}

/// Sizes and durations are read by their flag's own parser: a bad value is refused before
/// anything starts, naming the flag and the value, from the command line or the environment.
#[test]
fn bad_sizes_and_durations_are_refused_at_their_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data").to_string_lossy().into_owned();
    let serve = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir", &data])
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run snapview")
    };
    for (args, env, flag, value) in [
        (
            &["--max-upload", "lots"][..],
            &[][..],
            "--max-upload",
            "lots",
        ),
        (
            &["--min-send-rate", "5 parsecs"],
            &[],
            "--min-send-rate",
            "5 parsecs",
        ),
        (&["--header-timeout", "0"], &[], "--header-timeout", "0"),
        (&["--shutdown-grace", "2d"], &[], "--shutdown-grace", "2d"),
        (
            &[],
            &[("SNAPVIEW_BODY_TIMEOUT", "forever")],
            "--body-timeout",
            "forever",
        ),
        (&["--max-uploads", "0"], &[], "--max-uploads", "0"),
    ] {
        let output = serve(args, env);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(flag) && stderr.contains(&format!("'{value}'")),
            "{flag} {value}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("data").exists(),
        "nothing was started, so no data folder was made"
    );
}

/// `serve --addr 127.0.0.1:0` takes a free port and its "serving at" line names the port it
/// got, which answers.
#[test]
fn serve_on_port_0_prints_the_port_it_bound() {
    let server = common::served::Served::start(
        &tempfile::tempdir().expect("tempdir").path().join("data"),
        &[],
    );
    assert_ne!(server.port, 0);
    assert_eq!(server.address, format!("127.0.0.1:{}", server.port));
    let (status, _) = http_get(&server.url("/api/snapshots"));
    assert_eq!(status, 200);
}

/// A failure's kind is its exit status, so a script (and the Python package) need not read the
/// message: 2 refused (as bad input is), 3 the server cannot be reached, 4 it has no such
/// snapshot.
#[test]
fn failures_talking_to_a_server_have_their_own_exit_status() {
    let token = "cli-test-write-token-0123456789abcdef";
    let dir = tempfile::tempdir().expect("tempdir");
    let server = common::served::Served::start(&dir.path().join("data"), &["--write-token", token]);
    let base = server.url("");
    let nobody = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", listener.local_addr().expect("addr"))
    };
    let small = path("mlp_small");
    let unreachable = snapview(&["upload", "--server", &nobody, &small]);
    assert_eq!(unreachable.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&unreachable.stderr)
            .contains(&format!("cannot reach the snapview server at {nobody}")),
        "{}",
        String::from_utf8_lossy(&unreachable.stderr)
    );
    let refused = snapview(&["upload", "--server", &base, &small]);
    assert_eq!(refused.status.code(), Some(2));
    let missing = snapview(&[
        "diff",
        "--server",
        &base,
        "0123456789abcdef",
        "fedcba9876543210",
    ]);
    assert_eq!(missing.status.code(), Some(4));
    for output in [unreachable, refused, missing] {
        assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1);
    }
}

/// `upload --roles` gives the stored snapshot its own rules; rules the server refuses fail the
/// command (status 2) with the server's reason, and a missing rules file stores nothing.
#[test]
fn upload_with_roles_sends_the_rules_after_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = common::served::Served::start(&dir.path().join("data"), &[]);
    let base = server.url("");
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "[[rule]]\nframe = \".\"\nrole = \"everything\"\n").expect("rules");
    let rules = rules.to_string_lossy().into_owned();
    let small = path("mlp_small");
    let missing = snapview(&[
        "upload",
        "--server",
        &base,
        "--roles",
        "/nonexistent.toml",
        &small,
    ]);
    assert_eq!(missing.status.code(), Some(2));
    let (_, listed) = http_get(&server.url("/api/snapshots"));
    assert!(listed.contains("\"snapshots\":[]"), "{listed}");

    let output = snapview(&["upload", "--server", &base, "--roles", &rules, &small]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let url = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let id = url.rsplit('/').next().expect("id").to_owned();
    let (status, stored) = http_get(&server.url(&format!("/api/snapshots/{id}/rules")));
    assert_eq!(
        (status, stored.contains("everything")),
        (200, true),
        "{stored}"
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[rule]]\nframe = \"(unclosed\"\nrole = \"x\"\n").expect("rules");
    let refused = snapview(&[
        "upload",
        "--server",
        &base,
        "--roles",
        &bad.to_string_lossy(),
        &small,
    ]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("rule 1") && stderr.contains("was stored"),
        "{stderr}"
    );
    let (_, kept) = http_get(&server.url(&format!("/api/snapshots/{id}/rules")));
    assert!(kept.contains("everything"), "{kept}");
}

#[test]
fn every_command_has_help() {
    for command in [
        &["--help"][..],
        &["summary", "--help"],
        &["stats", "--help"],
        &["export", "--help"],
    ] {
        let output = snapview(command);
        assert!(output.status.success(), "{command:?}");
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("Usage"),
            "{command:?}"
        );
    }
}

/// `upload` and `diff --server` speak HTTPS and check the server's certificate: a server whose
/// certificate no trusted authority signed is refused, and the message names the certificate.
/// Other URL schemes are refused before anything is sent.
#[test]
fn https_servers_are_spoken_to_and_untrusted_certificates_refused() {
    use std::sync::Arc;
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("server config");
    // A TLS stand-in, not `snapview serve`: it keeps its listener, so no other test can take
    // the port between the bind and the commands below.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let config = Arc::new(config);
        // One connection per command below; each ends in the handshake.
        for _ in 0..2 {
            let Ok((mut socket, _)) = listener.accept() else {
                return;
            };
            let mut tls = rustls::ServerConnection::new(config.clone()).expect("connection");
            while tls.complete_io(&mut socket).is_ok() && tls.is_handshaking() {}
        }
    });
    let server_url = format!("https://localhost:{port}");
    let upload = snapview(&["upload", "--server", &server_url, &path("mlp_small")]);
    let diff = snapview(&[
        "diff",
        "--server",
        &server_url,
        "0123456789abcdef",
        "fedcba9876543210",
    ]);
    for (what, output) in [("upload", upload), ("diff", diff)] {
        assert!(
            !output.status.success(),
            "{what} succeeded against an untrusted server"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("certificate"), "{what}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
    }
    server.join().expect("server thread");

    let ftp = snapview(&["upload", "--server", "ftp://localhost", &path("mlp_small")]);
    assert_eq!(ftp.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&ftp.stderr).contains("http:// or https://"));
}

/// `snapview open` run with its own temporary folder, HOME and XDG folders (each empty), so the
/// test can see everything it writes; stdout is read line by line.
struct Opened {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    tmp: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Opened {
    fn start(file: &str, extra: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> Self {
        let tmp = tempfile::tempdir().expect("tmp");
        let home = tempfile::tempdir().expect("home");
        let mut child = Command::new(env!("CARGO_BIN_EXE_snapview"))
            .arg("open")
            .arg(file)
            .args(extra)
            .env("TMPDIR", tmp.path())
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env("XDG_CACHE_HOME", home.path().join("cache"))
            .envs(envs.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start snapview open");
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            tmp,
            home,
        }
    }

    /// The page URL it printed.
    fn url(&self) -> String {
        let line = self
            .lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a line on stdout");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"));
        assert!(url.contains("/s/"), "{url}");
        url.to_owned()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the exit (at most 15 s) and returns its status.
    fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "snapview open did not exit"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Every entry (files and folders, empty ones too) under the temporary folder and HOME, to
    /// show that nothing is left.
    fn left_behind(&self) -> Vec<std::path::PathBuf> {
        [self.tmp.path(), self.home.path()]
            .iter()
            .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
            .map(|entry| entry.path())
            .collect()
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_get(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    use std::io::{Read, Write};
    write!(
        stream,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, answer)
}

#[test]
fn open_serves_the_file_keeps_nothing_and_stops_on_sigint() {
    let file = path("mlp_small");
    let before = std::fs::read(&file).expect("fixture");
    let mut opened = Opened::start(&file, &["--no-browser"], &[]);
    let url = opened.url();
    let (status, page) = http_get(&url);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("mlp_small"), "the page names the file");
    let id = url.rsplit('/').next().expect("id");
    let api = url.replace(&format!("/s/{id}"), &format!("/api/snapshots/{id}"));
    let (status, detail) = http_get(&api);
    assert_eq!(status, 200, "{detail}");
    // While it runs: one private folder in TMPDIR, and the file itself is read through a link.
    let folders: Vec<_> = std::fs::read_dir(opened.tmp.path())
        .expect("tmp")
        .map_while(Result::ok)
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = folders[0].metadata().expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "the folder is private");
    }
    let links: Vec<_> = common::served::files_under(&folders[0].path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect();
    assert_eq!(links.len(), 1, "{links:?}");
    assert!(
        std::fs::symlink_metadata(&links[0])
            .expect("blob")
            .file_type()
            .is_symlink(),
        "the file is copied, not read in place"
    );
    assert!(
        common::served::files_under(opened.home.path()).is_empty(),
        "written under HOME"
    );
    opened.signal("INT");
    let status = opened.wait();
    assert!(status.success(), "exit after SIGINT: {status}");
    assert!(
        opened.left_behind().is_empty(),
        "{:?}",
        opened.left_behind()
    );
    assert_eq!(
        std::fs::read(&file).expect("fixture"),
        before,
        "the file changed"
    );
}

#[test]
fn open_stops_on_sigterm_and_starts_the_browser_with_the_url() {
    let dir = tempfile::tempdir().expect("dir");
    let seen = dir.path().join("browser-was-given");
    let browser = dir.path().join("browser.sh");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\necho \"$1\" > '{}'\n", seen.display()),
    )
    .expect("script");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut opened = Opened::start(&path("oom"), &[], &[("BROWSER", browser.as_os_str())]);
    let url = opened.url();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let given = std::fs::read_to_string(&seen).expect("the browser was started");
    assert_eq!(given.trim(), url);
    opened.signal("TERM");
    assert!(opened.wait().success());
    assert!(opened.left_behind().is_empty());
}

#[test]
fn open_refuses_a_bad_file_with_a_clear_message_and_leaves_nothing() {
    let text = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(text.path(), "hello, not a snapshot\n").expect("write");
    let dir = tempfile::tempdir().expect("dir");
    for (file, says) in [
        (
            text.path().to_string_lossy().into_owned(),
            "not a memory snapshot",
        ),
        ("/no/such/file.pickle".to_owned(), "No such file"),
        (dir.path().to_string_lossy().into_owned(), "not a file"),
    ] {
        let mut opened = Opened::start(&file, &["--no-browser"], &[]);
        let status = opened.wait();
        assert_eq!(status.code(), Some(2), "{file}");
        let mut stderr = String::new();
        use std::io::Read;
        opened
            .child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("read");
        assert!(
            stderr.contains("snapview: error:") && stderr.contains(says),
            "{file}: {stderr}"
        );
        assert!(
            opened.left_behind().is_empty(),
            "{:?}",
            opened.left_behind()
        );
    }
}

/// `tests/fixtures/synthetic/host_pinned.pickle` is synthetic (torch 2.11 cannot record pinned host
/// memory; see tests/fixtures/README.md): one CUDA device and the host's two pinned segments.
#[test]
fn host_pinned_memory_is_a_device_in_summary_and_export() {
    let file = path("synthetic/host_pinned");
    let output = snapview(&["summary", &file]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("\nhost (pinned) (device 1)\n"), "{text}");
    assert!(text.contains("peak allocated   80.0 MiB"), "{text}");

    let output = snapview(&["summary", &file, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(json["source"]["host_device"], 1);
    let host = &json["devices"][1];
    assert_eq!(host["trace_entries"], 10);
    assert_eq!(host["peak_allocated_bytes"], 80u64 << 20);
    assert_eq!(host["reserved_bytes_at_snapshot"], 128u64 << 20);
    // A file without host memory says nothing of it.
    let output = snapview(&["summary", &path("mlp_small"), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert!(
        json["source"].get("host_device").is_none(),
        "{}",
        json["source"]
    );

    // export: the GPUs by default (as torch's _memory_viz), the host when asked.
    let lines = |args: &[&str]| {
        let output = snapview(args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let gpus = lines(&["export", &file, "--kind", "segments"]);
    assert!(!gpus.contains("pin_memory"), "{gpus}");
    assert!(gpus.contains("model.py:31:forward"), "{gpus}");
    let host = lines(&["export", &file, "--kind", "segments", "--device", "host"]);
    assert!(!host.contains("model.py"), "{host}");
    assert_eq!(
        host.lines()
            .filter(|l| l.contains(";active_allocated;"))
            .map(|l| l
                .rsplit(' ')
                .next()
                .unwrap_or("0")
                .parse::<u64>()
                .unwrap_or(0))
            .sum::<u64>(),
        64 << 20,
        "{host}"
    );
    let by_number = lines(&["export", &file, "--kind", "segments", "--device", "1"]);
    assert_eq!(by_number, host);

    // Refused with a message: no host in the file, or a device that is neither.
    let output = snapview(&["export", &path("mlp_small"), "--device", "host"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("recorded no pinned host memory"));
    let output = snapview(&["live", &file, "--device", "gpu"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("neither a device number nor `host`"));
    let live = lines(&["live", &file, "--device", "host", "--json"]);
    assert!(live.contains("\"device\": 1"), "{live}");
}
