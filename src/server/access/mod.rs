//! Who may change what, and who may look.
//!
//! Four checks run on every request, outermost first:
//!
//! 1. **Host** (DNS rebinding): a server bound to loopback (or given `--allowed-hosts`) answers
//!    only requests whose `Host` names it, so a hostile page whose name was re-pointed at
//!    127.0.0.1 cannot read or change anything through the victim's browser.
//! 2. **Cross-site writes** are always refused: a POST/PUT/PATCH/DELETE whose `Origin` is not
//!    this server's, or whose `Sec-Fetch-Site` is anything but `same-origin` or `none`. Browsers
//!    send these headers on every cross-site write (a `text/plain` form or a `no-cors` multipart
//!    POST included) and scripts cannot forge them; scripts and `curl`, which send neither, pass.
//! 3. **Tokens**, when configured: writes need `Authorization: Bearer WRITE_TOKEN`; with a read
//!    token every page and API read needs a token too, given as a Bearer header or, for the
//!    pages, as the session cookie the login page sets. Static assets stay public: they are the
//!    app's own code.
//! 4. **Actor**: who made the request (a named token, or the user an SSO proxy vouches for) is
//!    put in the request's extensions for the audit log. The proxy's user header is believed
//!    only from `--trusted-proxies` (loopback by default); from any other peer a request that
//!    carries it is refused.
//!
//! A write refused with 401 or 403 is recorded in the audit log too (`refusals.rs`: counted per
//! address and minute, so a flood of them costs a few rows, not one each).
//!
//! Tokens are compared as SHA-256 digests in constant time, so neither the comparison's time
//! nor a token's length leaks. An address that sends wrong tokens faster than
//! `--max-token-failures` a minute gets 429 for any token until it slows down (`failures.rs`).

mod failures;
mod hosts;
mod login;
mod proxies;
mod tokens;

pub use failures::DEFAULT_MAX_TOKEN_FAILURES;
pub use login::{LoginForm, LoginQuery, SESSION_COOKIE, check_randomness, login, login_form};
pub use proxies::{IpBlock, loopback as loopback_proxies, parse_trusted_proxies};
pub use tokens::{AccessConfig, MIN_TOKEN_CHARS, NamedToken};

use super::error::{ApiError, ErrorBody, ErrorDetail};
use super::refusals::RefusedWrites;
use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use cookie::Cookie;
use failures::FailedChecks;
use hosts::host_name;
use login::{session_key, session_mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokens::sha256;

/// Who made a request: the name of the token it carried (from `--tokens-file`), else the user
/// the trusted proxy header names (`--user-header`), else nobody known. Every request has one
/// in its extensions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actor(pub Option<String>);

/// What the router's access layers check, built once per router from the configuration.
#[derive(Clone)]
pub struct Access {
    write: Vec<(Option<String>, [u8; 32])>,
    read: Option<[u8; 32]>,
    /// `--metrics-token`: opens `/metrics` and `/readyz`, nothing else.
    metrics: Option<[u8; 32]>,
    /// The cookie values the login page hands out: one per token that may read.
    sessions: Vec<[u8; 32]>,
    user_header: Option<HeaderName>,
    /// The peers `user_header` is believed from.
    trusted_proxies: Vec<IpBlock>,
    /// `None`: any Host is accepted.
    hosts: Option<Vec<String>>,
    /// `scheme://host[:port]` of the public URL, lowercased: the origin pages are served from.
    own_origin: String,
    secure_cookie: bool,
    /// Where refused writes are counted for the audit log; `None`: not recorded.
    refusals: Option<Arc<RefusedWrites>>,
    /// Wrong tokens per client (`--max-token-failures`); `None`: not limited.
    failures: Option<Arc<FailedChecks>>,
}

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Grant {
    Nothing,
    Read,
    Write,
}

impl Access {
    pub fn new(config: &super::ServeConfig) -> Self {
        let access = &config.access;
        let write: Vec<(Option<String>, [u8; 32])> = access
            .write_tokens
            .iter()
            .map(|t| (t.name.clone(), sha256(t.token.as_bytes())))
            .collect();
        let read = access
            .read_token
            .as_ref()
            .map(|t| sha256(t.token.as_bytes()));
        let sessions = match session_key() {
            Some(key) => write
                .iter()
                .map(|(_, digest)| digest)
                .chain(read.as_ref())
                .filter_map(|digest| session_mac(key, digest))
                .collect(),
            None => Vec::new(),
        };
        let public_host = config
            .public_url
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
            .and_then(host_name);
        let hosts = if config.addr.ip().is_loopback() || !access.allowed_hosts.is_empty() {
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
                .into_iter()
                .map(str::to_owned)
                .chain(public_host)
                .chain(access.allowed_hosts.iter().cloned())
                .collect();
            hosts.sort();
            hosts.dedup();
            Some(hosts)
        } else {
            None
        };
        let own_origin = match config.public_url.split_once("://") {
            Some((scheme, rest)) => format!(
                "{scheme}://{}",
                rest.split('/').next().unwrap_or(rest).trim_end_matches('.')
            )
            .to_ascii_lowercase(),
            None => config.public_url.to_ascii_lowercase(),
        };
        Self {
            write,
            read,
            metrics: access
                .metrics_token
                .as_ref()
                .map(|t| sha256(t.token.as_bytes())),
            sessions,
            user_header: access.user_header.clone(),
            trusted_proxies: if access.trusted_proxies.is_empty() {
                proxies::loopback()
            } else {
                access.trusted_proxies.clone()
            },
            hosts,
            secure_cookie: config.public_url.starts_with("https://"),
            own_origin,
            refusals: None,
            failures: FailedChecks::per_minute(access.max_token_failures).map(Arc::new),
        }
    }

    /// The same checks, with refused writes counted in `refusals` for the audit log.
    pub fn recording_refusals(mut self, refusals: Arc<RefusedWrites>) -> Self {
        self.refusals = Some(refusals);
        self
    }

    /// Refuses a request that carries the user header from a peer that is not a trusted proxy
    /// (or from no known peer: a request that did not come over a socket).
    fn user_header_is_trusted(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<(), String> {
        let Some(name) = &self.user_header else {
            return Ok(());
        };
        if !headers.contains_key(name) {
            return Ok(());
        }
        match peer {
            Some(peer)
                if self
                    .trusted_proxies
                    .iter()
                    .any(|block| block.contains(peer)) =>
            {
                Ok(())
            }
            _ => Err(format!(
                "the {name} header is accepted only from the trusted proxies (--trusted-proxies), and this request came from {}: send it through the proxy",
                peer.map_or_else(|| "an unknown address".to_owned(), |peer| peer.to_string())
            )),
        }
    }

    fn reads_need_token(&self) -> bool {
        self.read.is_some()
    }

    fn writes_need_token(&self) -> bool {
        !self.write.is_empty() || self.read.is_some()
    }

    /// The grant a request carries, from its Bearer header or its session cookie, and the
    /// name of its token. A Bearer header that matches nothing is an error, not "no token".
    fn grant_of(&self, headers: &HeaderMap) -> Result<(Grant, Option<String>), ApiError> {
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let value = value.to_str().unwrap_or("");
            let token = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .map(str::trim)
                .ok_or_else(|| {
                    ApiError::Unauthorized("the Authorization header must be `Bearer TOKEN`".into())
                })?;
            let (grant, name) = self.grant_of_token(token);
            if grant == Grant::Nothing {
                return Err(ApiError::Unauthorized(
                    "the token is not valid on this server".into(),
                ));
            }
            return Ok((grant, name));
        }
        // The cookie stands for the read token (SameSite=Strict and the Origin check keep other
        // sites from riding on it); like that token it may also write when no write token is set.
        let session_grant = if self.write.is_empty() {
            Grant::Write
        } else {
            Grant::Read
        };
        let cookie_grant = cookie_value(headers, SESSION_COOKIE)
            .filter(|value| self.session_is_valid(value))
            .map_or(Grant::Nothing, |_| session_grant);
        Ok((cookie_grant, None))
    }

    fn actor(&self, headers: &HeaderMap, token_name: Option<String>) -> Actor {
        if token_name.is_some() {
            return Actor(token_name);
        }
        let user = self
            .user_header
            .as_ref()
            .and_then(|name| headers.get(name))
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|user| !user.is_empty())
            // A name, not a payload: bounded before it reaches the log.
            .map(|user| user.chars().take(200).collect());
        Actor(user)
    }
}

/// The value of one cookie in the request's `Cookie` headers.
fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|cookie| cookie.name() == name)
        .map(|cookie| cookie.value().to_owned())
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The paths `--metrics-token` opens (with `GET`); each follows `--read-token` otherwise.
const METRICS_TOKEN_PATHS: [&str; 2] = ["/metrics", "/readyz"];

/// `/healthz`, the liveness probe: open to anyone, whatever the tokens and the Host (it says
/// only that the process answers), so a load balancer's probe needs no secret.
fn is_liveness(method: &Method, path: &str) -> bool {
    path == "/healthz" && matches!(*method, Method::GET | Method::HEAD)
}

/// Public whatever the tokens: the app's own code and images, and the login page itself.
fn is_public(method: &Method, path: &str) -> bool {
    path == "/login"
        || (path.starts_with("/static/") && matches!(*method, Method::GET | Method::HEAD))
}

/// 401 with the header that tells HTTP clients a Bearer token is wanted.
fn unauthorized(message: String) -> Response {
    let mut response = ApiError::Unauthorized(message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"snapview\""),
    );
    response
}

/// Why a request is not let through.
enum Refusal {
    /// 401 (with `WWW-Authenticate`), 403 or 421.
    Error(ApiError),
    /// An answer made already: a page read without the read token goes to the login form; a
    /// client out of tries gets 429.
    Answer(Box<Response>),
}

/// What the login handler puts in its answer to a wrong token, for the access layer (which
/// holds the count of failures) to count.
#[derive(Debug, Clone, Copy)]
struct WrongToken;

/// 429 for a client out of tries, with when to try again.
fn too_many_failures(wait: Duration, login_page: bool) -> Response {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let message = format!(
        "too many wrong tokens from this address: wait {seconds} s before sending a token again (--max-token-failures)"
    );
    let mut response = if login_page {
        login::login_page("/".into(), message, StatusCode::TOO_MANY_REQUESTS)
    } else {
        let body = ErrorBody {
            error: ErrorDetail {
                code: "too_many_failures".into(),
                message,
            },
        };
        (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
    };
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The access layer: Host, the proxy's user header, cross-site writes, tokens, then the Actor
/// for the handlers. A write refused with 401 or 403 is counted for the audit log.
pub async fn check(State(access): State<Access>, mut request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip());
    match access.decide(&request, peer) {
        Ok(actor) => {
            request.extensions_mut().insert(actor);
            let response = next.run(request).await;
            if response.extensions().get::<WrongToken>().is_some()
                && let Some(failures) = &access.failures
            {
                failures.failed(peer);
            }
            response
        }
        Err(Refusal::Answer(response)) => *response,
        Err(Refusal::Error(error)) => {
            if is_write(request.method())
                && matches!(
                    error,
                    ApiError::Unauthorized(_)
                        | ApiError::Forbidden(_)
                        | ApiError::UntrustedHeader(_)
                )
                && let Some(refusals) = &access.refusals
            {
                let token_name = access
                    .grant_of(request.headers())
                    .ok()
                    .and_then(|(_, name)| name);
                refusals.count(
                    peer,
                    request.method(),
                    request.uri().path(),
                    error.status(),
                    &error.to_string(),
                    token_name,
                );
            }
            match error {
                ApiError::Unauthorized(message) => unauthorized(message),
                other => other.into_response(),
            }
        }
    }
}

impl Access {
    /// The Actor of a request let through, or why it is refused.
    fn decide(&self, request: &Request, peer: Option<IpAddr>) -> Result<Actor, Refusal> {
        if is_liveness(request.method(), request.uri().path()) {
            return Ok(Actor::default());
        }
        if let Err(message) = self.host_is_allowed(request.headers(), request.uri()) {
            return Err(Refusal::Error(ApiError::WrongHost(message)));
        }
        if let Err(message) = self.user_header_is_trusted(request.headers(), peer) {
            return Err(Refusal::Error(ApiError::UntrustedHeader(message)));
        }
        let method = request.method().clone();
        let write = is_write(&method);
        if write && let Err(message) = self.cross_site_write(request.headers()) {
            return Err(Refusal::Error(ApiError::Forbidden(message)));
        }
        let path = request.uri().path().to_owned();
        // A token is compared only while its client has tries left: the login form's, or a
        // Bearer header where it counts (public paths ignore a wrong one).
        let tries_token = if is_public(&method, &path) {
            path == "/login" && method == Method::POST && self.reads_need_token()
        } else {
            request.headers().contains_key(header::AUTHORIZATION)
        };
        if tries_token
            && let Some(failures) = &self.failures
            && let Err(wait) = failures.may_try(peer)
        {
            return Err(Refusal::Answer(Box::new(too_many_failures(
                wait,
                path == "/login",
            ))));
        }
        if self.carries_metrics_token(request.headers()) {
            // Never counted as a wrong token: it is a right one, sent to the wrong place.
            return if matches!(method, Method::GET | Method::HEAD)
                && METRICS_TOKEN_PATHS.contains(&path.as_str())
            {
                Ok(Actor::default())
            } else {
                Err(Refusal::Error(ApiError::Unauthorized(format!(
                    "the metrics token opens only {} (--metrics-token): send the read or a write token for anything else",
                    METRICS_TOKEN_PATHS.join(" and ")
                ))))
            };
        }
        let (grant, token_name) = match self.grant_of(request.headers()) {
            Ok(found) => found,
            // A wrong token is refused even where none is needed: a script with a stale token
            // should hear so, not succeed by luck on an open server.
            Err(error) if !is_public(&method, &path) => {
                if let Some(failures) = &self.failures {
                    failures.failed(peer);
                }
                return Err(Refusal::Error(error));
            }
            Err(_) => (Grant::Nothing, None),
        };
        if !is_public(&method, &path) {
            if write && self.writes_need_token() && grant < Grant::Write {
                let bearer = request.headers().contains_key(header::AUTHORIZATION);
                let message = if bearer && grant == Grant::Read {
                    "this token may read but not change snapshots: send a write token as `Authorization: Bearer TOKEN`"
                } else {
                    "this server needs a token to change snapshots: send `Authorization: Bearer TOKEN` (snapview upload and diff read it from SNAPVIEW_TOKEN or --token)"
                };
                return Err(Refusal::Error(ApiError::Unauthorized(message.into())));
            }
            if !write && self.reads_need_token() && grant < Grant::Read {
                // A scraper or a probe cannot follow a login form: 401 as for the API.
                if path.starts_with("/api/") || METRICS_TOKEN_PATHS.contains(&path.as_str()) {
                    return Err(Refusal::Error(ApiError::Unauthorized(
                        "this server needs a token to read: send `Authorization: Bearer TOKEN` (snapview diff reads it from SNAPVIEW_TOKEN or --token)".into(),
                    )));
                }
                let wanted = request
                    .uri()
                    .path_and_query()
                    .map_or("/".to_owned(), |p| p.as_str().to_owned());
                let next = utf8_percent_encode(&wanted, NEXT_PATH);
                return Err(Refusal::Answer(Box::new(
                    Redirect::to(&format!("/login?next={next}")).into_response(),
                )));
            }
        }
        Ok(self.actor(request.headers(), token_name))
    }
}

/// What `/login?next=` percent-encodes of the path asked for: all but RFC 3986's unreserved
/// characters and `/`, which stays readable.
const NEXT_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');
