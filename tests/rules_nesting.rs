//! Role rules files nested deep enough to overflow a parser's stack (issue 18, item 1): refused
//! with a message naming the limit, by the real server over TCP (which keeps answering) and by
//! every CLI command that reads `--roles`, which exits with a message instead of a signal.

use crate::common;

use common::served::Served;
use std::process::Command;
use std::time::{Duration, Instant};

/// The nesting limit the README states (`MAX_RULES_NESTING`).
const LIMIT: usize = 32;

/// `x = [[[…]]]`, `depth` deep.
fn nested_toml(depth: usize) -> String {
    format!("x = {}{}", "[".repeat(depth), "]".repeat(depth))
}

/// The same in the JSON form of a rules file, `depth` deep counting its outer `{`.
fn nested_json(depth: usize) -> String {
    let inner = depth - 1;
    format!("{{\"rule\": {}{}}}", "[".repeat(inner), "]".repeat(inner))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// `PUT /api/snapshots/{id}/rules` with `body`: the status and the body, or the transport error
/// (a server that died answers nothing).
fn put_rules(server: &Served, id: &str, body: &str) -> Result<(u16, String), String> {
    let mut response = agent()
        .put(&server.url(&format!("/api/snapshots/{id}/rules")))
        .header("Content-Type", "text/plain")
        .send(body.as_bytes())
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    Ok((status, text))
}

fn error_message(body: &str) -> String {
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("not the JSON error shape: {body}"));
    assert!(json["error"]["code"].is_string(), "{body}");
    json["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message: {body}"))
        .to_owned()
}

#[test]
fn deeply_nested_rules_are_refused_and_the_server_keeps_answering() {
    let mut server = Served::builder().start();
    let id = server.upload_streams();

    // Just under and at the limit: the parser reads it and says what is wrong (`x` is no
    // part of a rules file), nothing about nesting.
    for depth in [LIMIT - 1, LIMIT] {
        for body in [nested_toml(depth), nested_json(depth)] {
            let (status, answer) = put_rules(&server, &id, &body).expect("an answer");
            assert_eq!(status, 400, "depth {depth}: {answer}");
            let message = error_message(&answer);
            assert!(
                !message.contains("nests"),
                "depth {depth}: the parser's message: {message}"
            );
        }
    }

    // Far past it, within the 64 KiB cap (the attack: 16 KB, 8,000 deep): 400 naming the limit.
    for body in [nested_toml(8_000), nested_json(8_000), nested_toml(32_000)] {
        assert!(body.len() <= 64 * 1024);
        let (status, answer) = put_rules(&server, &id, &body)
            .unwrap_or_else(|e| panic!("no answer ({e}); log:\n{}", server.log_text()));
        assert_eq!(status, 400, "{answer}");
        let message = error_message(&answer);
        assert!(
            message.contains("nests brackets deeper than 32"),
            "{message}"
        );
    }

    // Many at once for 30 s (the floor for an attack), while a fresh client keeps
    // asking for the list.
    let deadline = Instant::now() + Duration::from_secs(30);
    let attackers: Vec<_> = (0..4)
        .map(|_| {
            let (url, body) = (
                server.url(&format!("/api/snapshots/{id}/rules")),
                nested_toml(8_000),
            );
            std::thread::spawn(move || {
                let mut sent = 0;
                while Instant::now() < deadline && sent < 3_000 {
                    let _ = agent()
                        .put(&url)
                        .header("Content-Type", "text/plain")
                        .send(body.as_bytes());
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    let (mut probes, mut answered) = (0, 0);
    while Instant::now() < deadline && probes < 750 {
        probes += 1;
        if agent()
            .get(&server.url("/api/snapshots"))
            .call()
            .is_ok_and(|r| r.status() == 200)
        {
            answered += 1;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    let sent: usize = attackers
        .into_iter()
        .map(|t| t.join().expect("attacker"))
        .sum();
    assert!(
        answered * 10 >= probes * 8,
        "{answered} of {probes} probes answered during {sent} deep PUTs; log:\n{}",
        server.log_text()
    );
    assert!(
        matches!(server.child.try_wait(), Ok(None)),
        "the server died; log:\n{}",
        server.log_text()
    );
    // Nothing was stored: the snapshot has no rules of its own.
    let (status, rules) = server.call("GET", &format!("/api/snapshots/{id}/rules"), None);
    assert_eq!((status, rules.as_str()), (200, ""));
}

#[test]
fn cli_commands_refuse_a_64_kib_nested_rules_file_without_aborting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("deep.toml");
    // 64 KiB exactly: within the size cap, so only the nesting bound refuses it.
    let depth = (64 * 1024 - 4) / 2;
    let text = nested_toml(depth);
    assert_eq!(text.len(), 64 * 1024);
    std::fs::write(&rules, &text).expect("rules");
    let snapshot = common::path_of("streams");
    let snapshot = snapshot.to_str().expect("path");
    let rules = rules.to_str().expect("path");
    for args in [
        vec!["summary", snapshot, "--roles", rules],
        vec!["live", snapshot, "--roles", rules],
        vec!["export", snapshot, "--kind", "roles", "--roles", rules],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args(&args)
            .output()
            .expect("run snapview");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.code().is_some_and(|code| code != 0),
            "{args:?}: exit {:?} (a signal when None): {stderr}",
            output.status
        );
        assert!(
            stderr.contains("nests brackets deeper than 32") && stderr.contains("deep.toml"),
            "{args:?}: {stderr}"
        );
    }
    // And the server refuses to start with it, saying why, instead of aborting.
    let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--roles",
            rules,
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .output()
        .expect("run snapview serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.code().is_some_and(|code| code != 0),
        "serve: exit {:?}: {stderr}",
        output.status
    );
    assert!(stderr.contains("nests brackets deeper than 32"), "{stderr}");
}
