//! The HTTP client side of the CLI: `upload` and `diff --server` talk to a running
//! `snapview serve`.

use std::path::Path;

/// Percent-encodes a query value.
pub(super) fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `--server` must name an http:// or https:// server.
pub(super) fn check_server_url(server: &str) -> Result<(), String> {
    if server.starts_with("http://") || server.starts_with("https://") {
        Ok(())
    } else {
        Err(format!(
            "--server {server:?} must be an http:// or https:// URL, such as http://127.0.0.1:7878"
        ))
    }
}

/// The HTTP client of `upload` and `diff --server`. HTTPS certificates are checked against
/// the system's trust store, so a team's own certificate authority is trusted as the
/// browser trusts it.
fn http_agent() -> ureq::Agent {
    use ureq::tls::{RootCerts, TlsConfig};
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}

/// Why the server could not be reached, in words a user can act on.
fn unreachable(error: ureq::Error) -> String {
    let text = error.to_string();
    if text.contains("certificate") {
        format!(
            "cannot reach the server: {text} (the server's HTTPS certificate is not one this machine trusts: add its authority to the system's trust store, or use http://)"
        )
    } else {
        format!("cannot reach the server: {text}")
    }
}

/// The `Authorization` header value for a token given with --token or SNAPVIEW_TOKEN.
fn bearer(token: Option<&str>) -> Option<String> {
    token
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| format!("Bearer {t}"))
}

pub(super) fn http_get_json(url: &str, token: Option<&str>) -> Result<serde_json::Value, String> {
    let mut request = http_agent().get(url);
    if let Some(authorization) = bearer(token) {
        request = request.header("Authorization", authorization);
    }
    let response = request.call().map_err(unreachable)?;
    json_answer(response, 256 << 20, bearer(token).is_some())
}

/// `snapview upload`: streams the file to the server and returns the line to print.
pub(super) fn upload(file: &Path, url: &str, token: Option<&str>) -> Result<String, String> {
    let reader =
        std::fs::File::open(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut request = http_agent()
        .post(url)
        .header("Content-Type", "application/octet-stream")
        // The server answers a refusal (no token, say) before reading the body: without this,
        // the refusal is lost in a broken pipe while the file is still being sent.
        .header("Expect", "100-continue");
    if let Some(authorization) = bearer(token) {
        request = request.header("Authorization", authorization);
    }
    let response = request
        // A file body is sent with its Content-Length, so a server refuses one over its limit
        // (413) before the body, instead of cutting the upload off mid-stream.
        .send(&reader)
        .map_err(unreachable)?;
    let json = json_answer(response, 16 << 20, bearer(token).is_some())?;
    Ok(format!("{}\n", json["url"].as_str().unwrap_or_default()))
}

/// The JSON body of a server's answer (at most `limit` bytes), or the error it reports;
/// `sent_token` says whether the request carried one, to tell the user what to do on a 401.
fn json_answer(
    mut response: ureq::http::Response<ureq::Body>,
    limit: u64,
    sent_token: bool,
) -> Result<serde_json::Value, String> {
    let status = response.status();
    let body = response
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_string()
        .map_err(|e| format!("unreadable answer from the server: {e}"))?;
    let json: serde_json::Value = match serde_json::from_str(&body) {
        Ok(json) => json,
        // A proxy in front may answer 401 with its own page; the hint still applies.
        Err(_) if status == ureq::http::StatusCode::UNAUTHORIZED => serde_json::Value::Null,
        Err(_) => {
            return Err(format!(
                "the server answered {status} without JSON: {}",
                body.chars().take(200).collect::<String>()
            ));
        }
    };
    let message = json["error"]["message"]
        .as_str()
        .map_or_else(|| format!("the server answered {status}"), str::to_owned);
    if status.is_success() {
        Ok(json)
    } else if status == ureq::http::StatusCode::UNAUTHORIZED && !sent_token {
        Err(format!(
            "the server needs a token: set SNAPVIEW_TOKEN (or pass --token) ({message})"
        ))
    } else if status == ureq::http::StatusCode::UNAUTHORIZED {
        Err(format!(
            "the server refused the token from SNAPVIEW_TOKEN / --token: {message}"
        ))
    } else {
        Err(message)
    }
}
