//! Role rules on the server (`serve --roles FILE`, env `SNAPVIEW_ROLES`): used for every snapshot
//! the server loads, over TCP against a real `snapview serve`; an invalid file stops the server
//! at start with the parser's message.

use crate::common;

use common::served::Served;
use std::process::Command;

/// A rule naming every block made under GPT-2's model code with a role of its own.
const RULES: &str = r#"
[[rule]]
frame = "modeling_gpt2\\.py"
role = "gpt2_model"
"#;

fn upload(server: &Served, name: &str) -> String {
    let bytes = std::fs::read(common::path_of(name)).expect("fixture");
    let (status, body) = server.call(
        "POST",
        &format!("/api/snapshots?filename={name}.pickle"),
        Some(&bytes),
    );
    assert!(status == 201 || status == 200, "{status}: {body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    view["id"].as_str().expect("id").to_owned()
}

fn peak_roles(server: &Served, id: &str) -> serde_json::Value {
    let (status, body) = server.call("GET", &format!("/api/snapshots/{id}"), None);
    assert_eq!(status, 200, "{body}");
    let detail: serde_json::Value = serde_json::from_str(&body).expect("json");
    detail["analysis"]["devices"][0]["roles_at_peak"].clone()
}

#[test]
fn the_servers_rules_decide_roles_of_every_snapshot_it_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).expect("write rules");

    let data_dir = dir.path().join("data");
    let server = Served::builder()
        .data_dir(&data_dir)
        .log(&dir.path().join("log-with-rules"))
        .arg("--roles")
        .arg(&rules)
        .start();
    let id = upload(&server, "infer_grad");
    let roles = peak_roles(&server, &id);
    let custom = roles["gpt2_model"].as_u64().unwrap_or(0);
    // Most of infer_grad's kept activations are made in modeling_gpt2.py's forward.
    assert!(
        custom > 1 << 30,
        "the user's role holds the model's blocks: {roles}"
    );
    let (status, page) = server.call("GET", &format!("/s/{id}"), None);
    assert_eq!(status, 200);
    assert!(
        page.contains(r#"data-role="gpt2_model""#),
        "the overview's role bar shows the user's role"
    );
    drop(server);

    // The same stored snapshot, loaded again by a server without rules: the built-in roles.
    let plain = Served::builder()
        .data_dir(&data_dir)
        .log(&dir.path().join("log-plain"))
        .start();
    let roles = peak_roles(&plain, &id);
    assert!(roles.get("gpt2_model").is_none(), "{roles}");
    assert!(
        roles["activation"].as_u64().unwrap_or(0) > 1 << 30,
        "{roles}"
    );
}

#[test]
fn an_invalid_rules_file_stops_the_server_with_the_parsers_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nframe = \"(unclosed\"\nrole = \"kv_cache\"\n",
    )
    .expect("write rules");
    let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("SNAPVIEW_ROLES", &rules)
        .output()
        .expect("run snapview serve");
    assert!(!output.status.success(), "the server must not start");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--roles") && stderr.contains("rule 1"),
        "says which option and which rule: {stderr}"
    );
    assert!(stderr.lines().count() <= 3, "short: {stderr}");
}

/// `method` with `body` and, when given, the write token; ureq directly, as the helper's
/// `call` knows no PUT and sends no token.
fn send(
    server: &Served,
    method: &str,
    path: &str,
    body: &[u8],
    token: Option<&str>,
) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = server.url(path);
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut response = match method {
        "PUT" => {
            let mut request = agent.put(&url).header("Content-Type", "text/plain");
            if let Some(bearer) = &bearer {
                request = request.header("Authorization", bearer);
            }
            request.send(body)
        }
        "DELETE" => {
            let mut request = agent.delete(&url);
            if let Some(bearer) = &bearer {
                request = request.header("Authorization", bearer);
            }
            request.call()
        }
        other => panic!("no {other} here"),
    }
    .expect("answer");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, text)
}

fn window_roles(server: &Served, id: &str) -> serde_json::Value {
    let (status, body) = server.call(
        "GET",
        &format!("/api/snapshots/{id}/roles?device=0&width=50"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let window: serde_json::Value = serde_json::from_str(&body).expect("json");
    window["roles"].clone()
}

/// The snapshot's stored summary row and analysis (not its URL: the port changes on restart).
fn stored_summary(server: &Served, id: &str) -> (serde_json::Value, serde_json::Value) {
    let (status, body) = server.call("GET", &format!("/api/snapshots/{id}"), None);
    assert_eq!(status, 200, "{body}");
    let detail: serde_json::Value = serde_json::from_str(&body).expect("json");
    (detail["summary"].clone(), detail["analysis"].clone())
}

fn stored_rules(server: &Served, id: &str) -> String {
    let (status, body) = server.call("GET", &format!("/api/snapshots/{id}/rules"), None);
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn a_snapshots_own_rules_replace_the_servers_until_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Served::builder()
        .data_dir(&dir.path().join("data"))
        .log(&dir.path().join("log"))
        .start();
    let id = upload(&server, "infer_grad");
    let other = upload(&server, "gpt2_adamw");
    assert_eq!(stored_rules(&server, &id), "", "none until set");
    let summary_before = stored_summary(&server, &id);
    // Warm the cache with the built-in roles, so the PUT must drop that analysis.
    assert!(peak_roles(&server, &id).get("gpt2_model").is_none());

    let path = format!("/api/snapshots/{id}/rules");
    let (status, body) = send(&server, "PUT", &path, RULES.as_bytes(), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(stored_rules(&server, &id), RULES);
    let roles = peak_roles(&server, &id);
    assert!(
        roles["gpt2_model"].as_u64().unwrap_or(0) > 1 << 30,
        "the overview's roles follow the snapshot's rules: {roles}"
    );
    let names = window_roles(&server, &id);
    assert!(
        names
            .as_array()
            .is_some_and(|names| names.iter().any(|name| name == "gpt2_model")),
        "the /roles window shows the custom role: {names}"
    );
    // Another snapshot keeps the server's rules.
    assert!(peak_roles(&server, &other).get("gpt2_model").is_none());

    // An invalid rules file: 400 with the parser's message, and the stored rules are kept.
    let bad = "[[rule]]\nframe = \"(unclosed\"\nrole = \"kv_cache\"\n";
    let (status, body) = send(&server, "PUT", &path, bad.as_bytes(), None);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("rule 1"), "names the bad rule: {body}");
    assert_eq!(stored_rules(&server, &id), RULES, "unchanged");
    assert!(peak_roles(&server, &id)["gpt2_model"].as_u64().is_some());

    // Past the 64 KiB cap: 413, and nothing changes.
    let huge = format!("# {}\n{RULES}", "x".repeat(70 * 1024));
    let (status, body) = send(&server, "PUT", &path, huge.as_bytes(), None);
    assert_eq!(status, 413, "{body}");
    assert_eq!(stored_rules(&server, &id), RULES, "unchanged");

    // The rules are kept across a restart (they are in the index).
    let data_dir = dir.path().join("data");
    drop(server);
    let server = Served::builder()
        .data_dir(&data_dir)
        .log(&dir.path().join("log-again"))
        .start();
    assert_eq!(stored_rules(&server, &id), RULES);
    assert!(peak_roles(&server, &id)["gpt2_model"].as_u64().is_some());

    // DELETE: back to the built-in roles, in the overview and the stored summary row alike.
    let (status, body) = send(&server, "DELETE", &path, b"", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(stored_rules(&server, &id), "");
    let roles = peak_roles(&server, &id);
    assert!(roles.get("gpt2_model").is_none(), "{roles}");
    assert!(
        roles["activation"].as_u64().unwrap_or(0) > 1 << 30,
        "{roles}"
    );
    assert_eq!(
        stored_summary(&server, &id),
        summary_before,
        "the same summary and analysis as before any rules"
    );

    // Writes are audited like PATCH.
    let (_, audit) = server.call("GET", "/api/audit", None);
    assert!(
        audit.contains("set_roles") && audit.contains("remove_roles"),
        "{audit}"
    );

    // An unknown snapshot: 404, for every method.
    let missing = "/api/snapshots/0123456789abcdef/rules";
    assert_eq!(server.call("GET", missing, None).0, 404);
    assert_eq!(send(&server, "PUT", missing, RULES.as_bytes(), None).0, 404);
    assert_eq!(send(&server, "DELETE", missing, b"", None).0, 404);
}

#[test]
fn setting_a_snapshots_rules_needs_the_write_token() {
    const TOKEN: &str = "write-token-0123456789abcdef";
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Served::builder()
        .data_dir(&dir.path().join("data"))
        .log(&dir.path().join("log"))
        .env("SNAPVIEW_WRITE_TOKEN", TOKEN)
        .start();
    let path = "/api/snapshots/0123456789abcdef/rules";
    let (status, body) = send(&server, "PUT", path, RULES.as_bytes(), None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(send(&server, "DELETE", path, b"", None).0, 401);
    // With the token it reaches the handler (no such snapshot).
    let (status, body) = send(&server, "PUT", path, RULES.as_bytes(), Some(TOKEN));
    assert_eq!(status, 404, "{body}");
}
