//! The HTTP client side of the CLI: `upload` and `diff --server` talk to a running
//! `snapview serve`.

use super::{Failure, FailureKind};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::path::Path;
use std::time::Duration;

/// What a query value percent-encodes: all but RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a query value.
pub(super) fn query_escape(text: &str) -> String {
    utf8_percent_encode(text, QUERY_VALUE).to_string()
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
    http_agent_config().build().into()
}

fn http_agent_config() -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    use ureq::tls::{RootCerts, TlsConfig};
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
}

/// Why the server at `url` could not be reached, in words a user can act on.
fn unreachable(url: &str, error: ureq::Error) -> Failure {
    let text = error.to_string();
    let server = split_url(url).map_or(url.to_owned(), |(scheme, authority, _)| {
        format!("{scheme}://{authority}")
    });
    let message = if text.contains("certificate") {
        format!(
            "cannot reach the snapview server at {server}: {text} (the server's HTTPS certificate is not one this machine trusts: add its authority to the system's trust store, or use http://)"
        )
    } else {
        format!("cannot reach the snapview server at {server}: {text}")
    };
    Failure::new(FailureKind::Unreachable, message)
}

/// The `Authorization` header value for a token given with --token or SNAPVIEW_TOKEN.
fn bearer(token: Option<&str>) -> Option<String> {
    token
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| format!("Bearer {t}"))
}

pub(super) fn http_get_json(url: &str, token: Option<&str>) -> Result<serde_json::Value, Failure> {
    let mut request = http_agent().get(url);
    if let Some(authorization) = bearer(token) {
        request = request.header("Authorization", authorization);
    }
    let response = request.call().map_err(|e| unreachable(url, e))?;
    json_answer(response, 256 << 20, bearer(token).is_some())
}

/// `upload --roles`: gives the stored snapshot `id` on `server` the rules file `rules`
/// (`PUT /api/snapshots/{id}/rules`); the server checks them, and its refusal is the error.
pub(super) fn put_rules(
    server: &str,
    id: &str,
    rules: Vec<u8>,
    token: Option<&str>,
) -> Result<(), Failure> {
    // The id goes into the path: it must be one (16 hex digits), whatever the server answered.
    if crate::server::store::SnapshotId::parse(id).is_none() {
        return Err(Failure::new(
            FailureKind::Refused,
            format!("the server named the stored snapshot {id:?}, which is not a snapshot id"),
        ));
    }
    let url = format!("{server}/api/snapshots/{id}/rules");
    let mut request = http_agent().put(&url);
    if let Some(authorization) = bearer(token) {
        request = request.header("Authorization", authorization);
    }
    let response = request.send(rules).map_err(|e| unreachable(&url, e))?;
    json_answer(response, 16 << 20, bearer(token).is_some()).map(|_| ())
}

/// A snapshot the server stored: its id and its page's URL.
pub(super) struct Stored {
    pub(super) id: String,
    pub(super) url: String,
}

/// `snapview upload`: streams the file to the server and returns the new snapshot, once the
/// answer says one was stored.
///
/// Redirects are followed only when they keep the method and the body (307, 308), at most
/// `max_redirects` of them, sending the file again from its start each time; a 301, 302 or
/// 303 would turn the upload into a GET that stores nothing (what an http -> https redirect
/// or a proxy answers), so it is an error naming the status and where it points. The token
/// goes only to the host it was given for (any port, never from https down to http).
pub(super) fn upload(
    file: &Path,
    url: &str,
    token: Option<&str>,
    max_redirects: usize,
) -> Result<Stored, Failure> {
    post_for_snapshot(
        url,
        token,
        max_redirects,
        "application/octet-stream",
        |request| {
            // Opened for each request: a redirect sends the whole file again.
            let reader = std::fs::File::open(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            // A file body is sent with its Content-Length, so a server refuses one over its limit
            // (413) before the body, instead of cutting the upload off mid-stream.
            Ok(request.send(&reader))
        },
    )
}

/// `snapview upload s3://…` (or `https://…`): asks the server to fetch the snapshot itself
/// (`POST /api/snapshots/import`, `request` its JSON body), as `upload` sends a file: the same
/// redirects, waits for a busy server and answer.
pub(super) fn import(
    url: &str,
    request: &str,
    token: Option<&str>,
    max_redirects: usize,
) -> Result<Stored, Failure> {
    post_for_snapshot(url, token, max_redirects, "application/json", |post| {
        Ok(post.send(request.as_bytes()))
    })
}

/// POSTs to `url` with the body `send` sends (again after each redirect) until the server
/// answers with a stored snapshot or refuses (see [`upload`] for the redirects followed).
fn post_for_snapshot(
    url: &str,
    token: Option<&str>,
    max_redirects: usize,
    content_type: &str,
    send: impl Fn(
        ureq::RequestBuilder<ureq::typestate::WithBody>,
    ) -> Result<Result<ureq::http::Response<ureq::Body>, ureq::Error>, Failure>,
) -> Result<Stored, Failure> {
    // Every redirect comes back here, to be followed only when it keeps the body.
    let agent: ureq::Agent = http_agent_config().max_redirects(0).build().into();
    let mut target = url.to_owned();
    let mut redirects = 0;
    let mut waited_busy = Duration::ZERO;
    loop {
        let mut request = agent
            .post(&target)
            .header("Content-Type", content_type)
            // The server answers a refusal (no token, say) before reading the body: without
            // this, the refusal is lost in a broken pipe while the file is still being sent.
            .header("Expect", "100-continue");
        let authorization = bearer(token).filter(|_| token_may_go(url, &target));
        let sent_token = authorization.is_some();
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let response = send(request)?.map_err(|e| unreachable(&target, e))?;
        let status = response.status();
        if let Some(wait) = busy_retry(&response, waited_busy) {
            // Every slot is taken (`--max-uploads`, `--max-uploads-per-client`: the ranks of
            // one node uploading at once) or other parses hold the server's memory: the
            // server said when to come back, so come back rather than fail the job's upload.
            eprintln!(
                "snapview: the server at {target} is busy ({status}); sending again in {} s",
                wait.as_secs()
            );
            std::thread::sleep(wait);
            waited_busy += wait;
            continue;
        }
        if !status.is_redirection() {
            let json = json_answer(response, 16 << 20, sent_token)?;
            return stored_snapshot(&json, status)
                .map_err(|message| Failure::new(FailureKind::Refused, message));
        }
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let refused = |message: String| Failure::new(FailureKind::Refused, message);
        let Some(location) = location else {
            return Err(refused(format!(
                "the server at {target} answered {status} without a Location: nothing was stored"
            )));
        };
        match status.as_u16() {
            307 | 308 => {}
            301..=303 => {
                return Err(refused(format!(
                    "the server at {target} answered {status} with Location: {location}; nothing was stored (a {} would resend the upload as a GET). Upload to the address it names instead (--server, SNAPVIEW_SERVER)",
                    status.as_u16()
                )));
            }
            _ => {
                return Err(refused(format!(
                    "the server at {target} answered {status} with Location: {location}, which an upload cannot follow; nothing was stored"
                )));
            }
        }
        if redirects == max_redirects {
            return Err(refused(format!(
                "the server redirected the upload more than {max_redirects} times (--max-redirects), last to {location}; nothing was stored"
            )));
        }
        redirects += 1;
        target = resolve_location(&target, &location).ok_or_else(|| {
            refused(format!("the server at {target} answered {status} with a Location that is not an http:// or https:// address: {location:?}; nothing was stored"))
        })?;
    }
}

/// How long `upload` waits in all for a busy server (503 with `Retry-After`) before it gives
/// up with the server's message: long enough for the uploads ahead of it to finish, short
/// enough that a job is not held up for long by a server that stays full.
pub(super) const BUSY_WAIT_LIMIT: Duration = Duration::from_secs(120);

/// The wait before sending again when `response` is a 503 whose `Retry-After` (in seconds, the
/// form snapview sends) still fits within [`BUSY_WAIT_LIMIT`] after `waited` so far; `None`
/// for any other answer, which is then reported as it is.
fn busy_retry(response: &ureq::http::Response<ureq::Body>, waited: Duration) -> Option<Duration> {
    if response.status() != ureq::http::StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let seconds: u64 = response
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let wait = Duration::from_secs(seconds.clamp(1, 30));
    (waited + wait <= BUSY_WAIT_LIMIT).then_some(wait)
}

/// The stored snapshot the server's answer names: its `id` and `url`, else the server (or
/// whatever answered in its place) did not store it.
fn stored_snapshot(
    json: &serde_json::Value,
    status: ureq::http::StatusCode,
) -> Result<Stored, String> {
    let id = json["id"].as_str().filter(|id| !id.is_empty());
    let url = json["url"]
        .as_str()
        .filter(|url| url.starts_with("http://") || url.starts_with("https://"));
    match (id, url) {
        (Some(id), Some(url)) => Ok(Stored {
            id: id.to_owned(),
            url: url.to_owned(),
        }),
        _ => Err(format!(
            "the server answered {status} but named no stored snapshot (no id and url in its answer: {}); is --server a snapview server?",
            json.to_string().chars().take(200).collect::<String>()
        )),
    }
}

/// `scheme://authority` and the rest of an http(s) URL.
fn split_url(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some((scheme, &rest[..end], &rest[end..]))
}

/// Where a `Location` sends a request made to `base`: absolute http(s) URLs as they are,
/// `//host/…`, `/path` and relative paths resolved against `base`; `None` for anything else
/// (another scheme).
fn resolve_location(base: &str, location: &str) -> Option<String> {
    let (scheme, authority, path) = split_url(base)?;
    if location.contains("://") {
        return split_url(location).map(|_| location.to_owned());
    }
    if let Some(rest) = location.strip_prefix("//") {
        return Some(format!("{scheme}://{rest}"));
    }
    if location.starts_with('/') {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    if location
        .split('/')
        .next()
        .is_some_and(|first| first.contains(':'))
    {
        // `mailto:…`, `https:host` (no slashes): a scheme of its own.
        return None;
    }
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let folder = path.rfind('/').map_or("/", |end| &path[..=end]);
    Some(format!("{scheme}://{authority}{folder}{location}"))
}

/// The host of an authority, without user info or port, lowercased.
fn host_of(authority: &str) -> String {
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.split(':').next().unwrap_or(host),
    };
    host.to_ascii_lowercase()
}

/// Whether the token given for `first` may go with a request to `target`: the same host, and
/// not from https down to plain http.
fn token_may_go(first: &str, target: &str) -> bool {
    match (split_url(first), split_url(target)) {
        (Some((first_scheme, first_authority, _)), Some((scheme, authority, _))) => {
            let downgrade =
                first_scheme.eq_ignore_ascii_case("https") && scheme.eq_ignore_ascii_case("http");
            !downgrade && host_of(first_authority) == host_of(authority)
        }
        _ => false,
    }
}

/// The JSON body of a server's answer (at most `limit` bytes), or the error it reports;
/// `sent_token` says whether the request carried one, to tell the user what to do on a 401.
fn json_answer(
    mut response: ureq::http::Response<ureq::Body>,
    limit: u64,
    sent_token: bool,
) -> Result<serde_json::Value, Failure> {
    let status = response.status();
    let refused = |message: String| {
        let kind = if status == ureq::http::StatusCode::NOT_FOUND {
            FailureKind::NotFound
        } else {
            FailureKind::Refused
        };
        Failure::new(kind, message)
    };
    let body = response
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_string()
        .map_err(|e| refused(format!("unreadable answer from the server: {e}")))?;
    let json: serde_json::Value = match serde_json::from_str(&body) {
        Ok(json) => json,
        // A proxy in front may answer 401 with its own page; the hint still applies.
        Err(_) if status == ureq::http::StatusCode::UNAUTHORIZED => serde_json::Value::Null,
        Err(_) => {
            return Err(refused(format!(
                "the server answered {status} without JSON: {}",
                body.chars().take(200).collect::<String>()
            )));
        }
    };
    let message = json["error"]["message"]
        .as_str()
        .map_or_else(|| format!("the server answered {status}"), str::to_owned);
    if status.is_success() {
        Ok(json)
    } else if status == ureq::http::StatusCode::UNAUTHORIZED && !sent_token {
        Err(refused(format!(
            "the server needs a token: set SNAPVIEW_TOKEN (or pass --token) ({message})"
        )))
    } else if status == ureq::http::StatusCode::UNAUTHORIZED {
        Err(refused(format!(
            "the server refused the token from SNAPVIEW_TOKEN / --token: {message}"
        )))
    } else {
        Err(refused(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_request_and_only_to_http() {
        let base = "http://box:7878/api/snapshots?filename=a.pickle";
        let cases = [
            (
                "https://box/api/snapshots?x",
                Some("https://box/api/snapshots?x"),
            ),
            ("//other:1/up", Some("http://other:1/up")),
            (
                "/api/v2/snapshots?y",
                Some("http://box:7878/api/v2/snapshots?y"),
            ),
            ("upload?z", Some("http://box:7878/api/upload?z")),
            ("ftp://box/x", None),
            ("https:box/x", None),
            ("mailto:a@b", None),
        ];
        for (location, resolved) in cases {
            assert_eq!(
                resolve_location(base, location).as_deref(),
                resolved,
                "{location}"
            );
        }
    }

    #[test]
    fn the_token_goes_only_to_its_own_host_and_never_down_to_http() {
        let first = "http://Box:7878/api/snapshots";
        assert!(token_may_go(first, "https://box/api/snapshots"));
        assert!(token_may_go(first, "http://box:9999/x"));
        assert!(token_may_go(first, "http://user@box:1/x"));
        assert!(!token_may_go(first, "http://box.evil.example/x"));
        assert!(!token_may_go(first, "http://evil.example/?box"));
        assert!(!token_may_go("https://box/x", "http://box/x"));
        assert!(token_may_go("http://[::1]:1/x", "https://[::1]:2/x"));
        assert!(!token_may_go("http://[::1]:1/x", "https://[::2]:1/x"));
    }
}
