//! The command line end to end: the real binary on real files.

mod common;

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
