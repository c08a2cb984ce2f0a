//! Role rules on the server (`serve --roles FILE`, env `SNAPVIEW_ROLES`): used for every snapshot
//! the server loads, over TCP against a real `snapview serve`; an invalid file stops the server
//! at start with the parser's message.

mod common;

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
