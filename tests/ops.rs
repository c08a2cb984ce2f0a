//! Operations over a real `snapview serve`: `/healthz` is open, `/readyz` says what fails
//! (503 with the reason and `Retry-After`), `/metrics` is Prometheus text counted by route
//! template and opened by the read token or `--metrics-token` (which opens nothing else), and
//! `--log-format json` writes one JSON object per line.

use crate::common;

use common::served::{Served, wait_until};
use std::collections::BTreeMap;
use std::time::Duration;

const READ_TOKEN: &str = "read-0123456789abcdef";
const METRICS_TOKEN: &str = "metrics-0123456789abcdef";

/// `GET path` with an optional Bearer token: the status, the `Retry-After` header and the body.
fn get(served: &Served, path: &str, token: Option<&str>) -> (u16, Option<String>, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let mut request = agent.get(served.url(path));
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response = request.call().expect("an answer");
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    (status, retry_after, body)
}

/// Uploads a fixture with `token` and returns its id.
fn upload(served: &Served, name: &str, token: &str) -> String {
    let bytes = std::fs::read(common::path_of(name)).expect("fixture");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .post(served.url(&format!("/api/snapshots?filename={name}.pickle")))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/octet-stream")
        .send(&bytes[..])
        .expect("an answer");
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    assert_eq!(status, 201, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    view["id"].as_str().expect("id").to_owned()
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn healthz_is_open_and_readyz_says_what_fails() {
    let served = Served::builder().args(["--read-token", READ_TOKEN]).start();
    let (status, _, body) = get(&served, "/healthz", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body), serde_json::json!({"status": "ok"}));
    // Even a wrong token does not stop the liveness probe.
    assert_eq!(
        get(&served, "/healthz", Some("wrong-0123456789abcdef")).0,
        200
    );

    // Readiness follows the read token: 401 (not the login page) without it.
    let (status, _, body) = get(&served, "/readyz", None);
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = get(&served, "/readyz", Some(READ_TOKEN));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&body),
        serde_json::json!({"status": "ready", "checks": {"database": "ok", "blobs": "ok"}})
    );

    // The blobs folder gone: 503, the reason, and when to ask again. (Object storage down is
    // tests/replicas_shared.rs's `object_storage_down_answers_503_and_both_replicas_recover`.)
    if common::backend::folder_only("the blobs folder moved away: object storage has no folder") {
        return;
    }
    let blobs = served.data_dir.join("blobs");
    let away = served.data_dir.join("blobs.away");
    std::fs::rename(&blobs, &away).expect("move the blobs folder away");
    let (status, retry_after, body) = get(&served, "/readyz", Some(READ_TOKEN));
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry_after.as_deref(), Some("5"));
    let answer = json(&body);
    assert_eq!(answer["status"], "not_ready", "{answer}");
    assert_eq!(answer["checks"]["database"], "ok", "{answer}");
    let reason = answer["checks"]["blobs"].as_str().expect("a reason");
    assert!(
        reason.contains("the blobs folder is unavailable: it cannot be read"),
        "{reason}"
    );

    // A file where the folder was: said so.
    std::fs::write(&blobs, b"not a folder").expect("a file in its place");
    let (status, _, body) = get(&served, "/readyz", Some(READ_TOKEN));
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        json(&body)["checks"]["blobs"],
        "the blobs folder is unavailable: it is not a folder"
    );

    // Back in place: ready again, with no restart.
    std::fs::remove_file(&blobs).expect("remove the file");
    std::fs::rename(&away, &blobs).expect("put the blobs folder back");
    assert_eq!(get(&served, "/readyz", Some(READ_TOKEN)).0, 200);
    // The liveness probe never asked the store.
    assert_eq!(get(&served, "/healthz", None).0, 200);
}

/// One sample of the Prometheus text: the metric's name, its labels, its value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text exposition format (what this exporter writes of it: no escaped quotes in
/// label values, no timestamps); panics on a line that does not parse.
fn samples(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line}"));
                let labels = inner
                    .split("\",")
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = pair
                            .split_once("=\"")
                            .unwrap_or_else(|| panic!("a label is not key=\"value\": {line}"));
                        (key.to_owned(), value.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
            None => (series.to_owned(), BTreeMap::new()),
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "not a metric name: {line}"
        );
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    samples
}

/// The value of the one sample `name` with these labels (among others), if any.
fn value_of(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

#[test]
fn metrics_count_requests_by_route_template_behind_the_read_or_metrics_token() {
    let served = Served::builder()
        .args(["--read-token", READ_TOKEN, "--metrics-token", METRICS_TOKEN])
        .start();
    let size = std::fs::metadata(common::path_of("streams"))
        .expect("fixture")
        .len();
    let id = upload(&served, "streams", READ_TOKEN);
    for _ in 0..3 {
        let (status, _, body) = get(&served, &format!("/api/snapshots/{id}"), Some(READ_TOKEN));
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(get(&served, "/api/no-such-route", Some(READ_TOKEN)).0, 404);

    // Who may read them: the read token, the metrics token; nobody else.
    let (status, _, body) = get(&served, "/metrics", None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        get(&served, "/metrics", Some("wrong-0123456789abcdef")).0,
        401
    );
    assert_eq!(get(&served, "/metrics", Some(READ_TOKEN)).0, 200);
    assert_eq!(get(&served, "/readyz", Some(METRICS_TOKEN)).0, 200);
    // The metrics token reads no snapshot, and the answer says what it is for.
    for path in ["/api/snapshots", &format!("/api/snapshots/{id}"), "/"] {
        let (status, _, body) = get(&served, path, Some(METRICS_TOKEN));
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("--metrics-token"), "{path}: {body}");
    }

    // The index is written after the upload's answer: wait for its timing.
    let mut text = String::new();
    wait_until(
        "the stored index is written",
        Duration::from_secs(60),
        || {
            let (status, _, body) = get(&served, "/metrics", Some(METRICS_TOKEN));
            assert_eq!(status, 200, "{body}");
            text = body;
            value_of(&samples(&text), "snapview_index_write_seconds_count", &[])
                .is_some_and(|n| n >= 1.0)
        },
    );
    let samples = samples(&text);
    let requests = |route: &str, status: &str| {
        value_of(
            &samples,
            "snapview_http_requests_total",
            &[("route", route), ("status", status)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(requests("/api/snapshots/{id}", "200"), 3.0, "{text}");
    assert_eq!(requests("/api/snapshots", "201"), 1.0, "{text}");
    assert!(requests("unmatched", "404") >= 1.0, "{text}");
    assert!(requests("/metrics", "401") >= 2.0, "{text}");
    // Templates only: no id in any label.
    for sample in &samples {
        for value in sample.labels.values() {
            assert!(!value.contains(&id), "an id in a label: {sample:?}");
        }
    }
    // Timed by route whatever the status: the three views and the metrics token's 401.
    assert_eq!(requests("/api/snapshots/{id}", "401"), 1.0, "{text}");
    assert_eq!(
        value_of(
            &samples,
            "snapview_http_request_duration_seconds_count",
            &[("route", "/api/snapshots/{id}")]
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        value_of(
            &samples,
            "snapview_http_request_duration_seconds_bucket",
            &[("route", "/api/snapshots/{id}"), ("le", "+Inf")]
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        value_of(&samples, "snapview_uploads_in_flight", &[]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        value_of(&samples, "snapview_stored_bytes", &[]),
        Some(size as f64),
        "{text}"
    );
    assert_eq!(
        value_of(
            &samples,
            "snapview_parse_seconds_count",
            &[("source", "upload")]
        ),
        Some(1.0),
        "{text}"
    );
    // The upload put its parse in the cache: every view was a hit.
    assert_eq!(
        value_of(
            &samples,
            "snapview_cache_hits_total",
            &[("kind", "analysis")]
        ),
        Some(3.0),
        "{text}"
    );
    assert!(
        value_of(&samples, "snapview_cache_bytes", &[("kind", "analysis")])
            .is_some_and(|bytes| bytes > 0.0),
        "{text}"
    );
}

#[test]
fn the_log_is_one_json_object_per_line_with_log_format_json() {
    let served = Served::builder().args(["--log-format", "json"]).start();
    served.upload_streams();
    assert_eq!(served.call("GET", "/healthz", None).0, 200);
    let mut log = String::new();
    wait_until("the upload is logged", Duration::from_secs(20), || {
        log = served.log_text();
        log.contains("snapshot uploaded")
    });
    let mut lines = 0;
    for line in log.lines().filter(|line| !line.trim().is_empty()) {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line}"));
        for key in ["timestamp", "level", "target"] {
            assert!(event[key].is_string(), "no {key}: {line}");
        }
        assert!(event["fields"]["message"].is_string(), "no message: {line}");
        lines += 1;
    }
    assert!(lines >= 2, "{log}");
    assert!(
        log.lines().any(|line| {
            let event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            event["fields"]["message"] == "snapshot uploaded" && event["fields"]["id"].is_string()
        }),
        "the upload's fields are fields: {log}"
    );
}

#[test]
fn the_metrics_token_is_checked_at_start() {
    let run = |args: &[&str]| {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args(args)
            .env_remove("SNAPVIEW_METRICS_TOKEN")
            .output()
            .expect("snapview runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let short = run(&["--metrics-token", "short"]);
    assert!(
        short.contains("--metrics-token") && short.contains("at least 16"),
        "{short}"
    );
    let shared = run(&["--read-token", READ_TOKEN, "--metrics-token", READ_TOKEN]);
    assert!(
        shared.contains("--metrics-token is also a read or write token"),
        "{shared}"
    );
    let bad_format = run(&["--log-format", "xml"]);
    assert!(bad_format.contains("--log-format"), "{bad_format}");
}
