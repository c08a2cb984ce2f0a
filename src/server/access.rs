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
//!    put in the request's extensions for the audit log.
//!
//! Tokens are compared as SHA-256 digests in constant time, so neither the comparison's time
//! nor a token's length leaks.

use super::AppState;
use super::error::ApiError;
use super::pages::{Assets, render};
use askama::Template;
use axum::Form;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::OnceLock;

/// Who made a request: the name of the token it carried (from `--tokens-file`), else the user
/// the trusted proxy header names (`--user-header`), else nobody known. Every request has one
/// in its extensions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actor(pub Option<String>);

/// The session cookie the login page sets.
pub const SESSION_COOKIE: &str = "snapview_session";

/// Tokens shorter than this could be guessed by trying: there is no rate limit on tries.
pub const MIN_TOKEN_CHARS: usize = 16;

/// A secret that grants access, with the name the audit log records for it.
#[derive(Clone)]
pub struct NamedToken {
    /// From the tokens file; `None` for `--write-token`.
    pub name: Option<String>,
    pub token: String,
}

impl std::fmt::Debug for NamedToken {
    // Configurations are logged and printed in errors; the secret must never be.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedToken")
            .field("name", &self.name)
            .field("token", &"<hidden>")
            .finish()
    }
}

/// The access settings of `snapview serve` (all off by default: the server is open to whoever
/// can reach its port, except for cross-site writes and, on loopback, foreign Host names).
#[derive(Debug, Clone, Default)]
pub struct AccessConfig {
    /// Tokens that may write (and read). Empty: writes need no token.
    pub write_tokens: Vec<NamedToken>,
    /// The token that may read; `None`: reads are open.
    pub read_token: Option<NamedToken>,
    /// A header a trusted proxy sets to the signed-in user, e.g. `x-forwarded-user`.
    pub user_header: Option<HeaderName>,
    /// Host names (without port) accepted besides localhost, 127.0.0.1, [::1] and the public
    /// URL's host. Given, the Host check applies whatever the binding.
    pub allowed_hosts: Vec<String>,
}

impl AccessConfig {
    /// Checks a token given on the command line or in the environment.
    pub fn check_token(flag: &str, token: &str) -> Result<(), String> {
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "{flag}: a token needs at least {MIN_TOKEN_CHARS} characters (nothing limits how many a client may try); `openssl rand -hex 32` makes a good one"
            ));
        }
        // It travels in an HTTP header, which carries visible ASCII only.
        if !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err(format!(
                "{flag}: a token may hold only visible ASCII characters (no spaces, no accents)"
            ));
        }
        Ok(())
    }

    /// Reads `--tokens-file`: one `name:token` per line; blank lines and lines starting with
    /// `#` are skipped.
    pub fn read_tokens_file(path: &Path) -> Result<Vec<NamedToken>, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--tokens-file: cannot read {}: {e}", path.display()))?;
        Self::parse_tokens(&text).map_err(|e| format!("--tokens-file {}: {e}", path.display()))
    }

    /// The tokens file's text as named tokens; names and tokens must be unique.
    pub fn parse_tokens(text: &str) -> Result<Vec<NamedToken>, String> {
        let mut tokens: Vec<NamedToken> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, token)) = line.split_once(':') else {
                return Err(format!(
                    "line {number} is not `name:token` (the name says who, in the audit log)"
                ));
            };
            let (name, token) = (name.trim(), token.trim());
            if name.is_empty() || name.chars().any(char::is_control) {
                return Err(format!("line {number} has no name before the `:`"));
            }
            Self::check_token(&format!("line {number} ({name})"), token)?;
            if tokens.iter().any(|t| t.name.as_deref() == Some(name)) {
                return Err(format!("line {number}: the name {name:?} is used twice"));
            }
            if tokens.iter().any(|t| t.token == token) {
                return Err(format!(
                    "line {number}: {name:?} has the same token as an earlier line"
                ));
            }
            tokens.push(NamedToken {
                name: Some(name.to_owned()),
                token: token.to_owned(),
            });
        }
        if tokens.is_empty() {
            return Err("no tokens in it (one `name:token` per line)".into());
        }
        Ok(tokens)
    }

    /// `a,b:8080, C` as host names without ports, lowercased.
    pub fn parse_hosts(list: &str) -> Result<Vec<String>, String> {
        let mut hosts = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match host_name(entry) {
                Some(host) if !host.is_empty() => hosts.push(host),
                _ => return Err(format!("--allowed-hosts: {entry:?} is not a host name")),
            }
        }
        Ok(hosts)
    }
}

/// `Host`-header text without its port, lowercased, without a trailing dot: `[::1]:80` ->
/// `[::1]`, `Example.COM.:7878` -> `example.com`.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim();
    let name = if host.starts_with('[') {
        let end = host.find(']')?;
        &host[..=end]
    } else {
        host.split(':').next()?
    };
    Some(name.trim_end_matches('.').to_ascii_lowercase())
}

/// What the router's access layers check, built once per router from the configuration.
#[derive(Clone)]
pub struct Access {
    write: Vec<(Option<String>, [u8; 32])>,
    read: Option<[u8; 32]>,
    /// The cookie values the login page hands out: one per token that may read.
    sessions: Vec<[u8; 32]>,
    user_header: Option<HeaderName>,
    /// `None`: any Host is accepted.
    hosts: Option<Vec<String>>,
    /// `scheme://host[:port]` of the public URL, lowercased: the origin pages are served from.
    own_origin: String,
    secure_cookie: bool,
}

/// The HMAC key that turns a token into its session cookie: random at each start, so a cookie
/// is worthless after a restart and never reveals the token.
fn session_key() -> Option<&'static [u8; 32]> {
    static KEY: OnceLock<Option<[u8; 32]>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        match getrandom::fill(&mut key) {
            Ok(()) => Some(key),
            Err(error) => {
                tracing::error!(%error, "no randomness for the session key: logins are refused");
                None
            }
        }
    })
    .as_ref()
}

/// Fails when the system cannot give the session key its randomness (checked at start, so a
/// read token never silently locks everyone out).
pub fn check_randomness() -> Result<(), String> {
    session_key()
        .map(|_| ())
        .ok_or_else(|| "the system gives no randomness for the login cookie's key".into())
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// HMAC-SHA256 (RFC 2104), written out: the sha2 crate is already here and this is all of it.
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut inner_pad = [0x36u8; BLOCK];
    let mut outer_pad = [0x5cu8; BLOCK];
    for (i, byte) in key.iter().enumerate() {
        inner_pad[i] ^= byte;
        outer_pad[i] ^= byte;
    }
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Equal in a time that depends on neither where the first difference is nor the contents.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
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
                .map(|digest| hmac_sha256(key, digest))
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
            sessions,
            user_header: access.user_header.clone(),
            hosts,
            secure_cookie: config.public_url.starts_with("https://"),
            own_origin,
        }
    }

    fn reads_need_token(&self) -> bool {
        self.read.is_some()
    }

    fn writes_need_token(&self) -> bool {
        !self.write.is_empty() || self.read.is_some()
    }

    /// The grant of a raw token, and the name of the write token that matched.
    fn grant_of_token(&self, token: &str) -> (Grant, Option<String>) {
        let digest = sha256(token.as_bytes());
        // Every candidate is compared (no early exit), so the time says nothing about which.
        let mut grant = Grant::Nothing;
        let mut name = None;
        for (token_name, candidate) in &self.write {
            if same_digest(&digest, candidate) {
                grant = Grant::Write;
                name.clone_from(token_name);
            }
        }
        if let Some(read) = &self.read
            && same_digest(&digest, read)
            && grant < Grant::Read
        {
            // With no write tokens, whoever may read may also write (as without any token).
            grant = if self.write.is_empty() {
                Grant::Write
            } else {
                Grant::Read
            };
        }
        (grant, name)
    }

    /// Whether a session cookie value is one the login page handed out since this start.
    fn session_is_valid(&self, value: &str) -> bool {
        let Some(value) = unhex(value) else {
            return false;
        };
        self.sessions
            .iter()
            .fold(false, |found, session| same_digest(&value, session) | found)
    }

    /// The cookie value for a token that may read.
    fn session_for(&self, token: &str) -> Option<String> {
        let key = session_key()?;
        Some(hex(&hmac_sha256(key, &sha256(token.as_bytes()))))
    }

    fn host_is_allowed(&self, headers: &HeaderMap, uri: &axum::http::Uri) -> Result<(), String> {
        let Some(hosts) = &self.hosts else {
            return Ok(());
        };
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| uri.authority().map(std::string::ToString::to_string));
        // No Host at all is not a browser (browsers always send it), so not a rebinding attack.
        let Some(host) = host else {
            return Ok(());
        };
        match host_name(&host) {
            Some(name) if hosts.contains(&name) => Ok(()),
            _ => Err(format!(
                "this server does not answer to the host name {host:?}; it answers to {} (--allowed-hosts adds names)",
                hosts.join(", ")
            )),
        }
    }

    /// Refuses a write a browser sent on behalf of another site.
    fn cross_site_write(&self, headers: &HeaderMap) -> Result<(), String> {
        if let Some(site) = headers.get("sec-fetch-site") {
            let site = site.to_str().unwrap_or("");
            // `same-site` is refused too: a sibling subdomain may be anyone's.
            if site != "same-origin" && site != "none" {
                return Err(format!(
                    "writes from other sites are refused (Sec-Fetch-Site: {site}); use this server's own pages, or a script (snapview upload, curl)"
                ));
            }
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase);
        // Behind a proxy the Origin is the public URL's; direct, it names the Host we answer.
        let origin_authority = origin.split_once("://").map(|(_, authority)| authority);
        let same = origin == self.own_origin
            || (host.is_some()
                && origin_authority.is_some()
                && origin_authority == host.as_deref());
        if same {
            Ok(())
        } else {
            Err(format!(
                "writes from other sites are refused (Origin: {origin}); use this server's own pages, or a script (snapview upload, curl)"
            ))
        }
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
fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
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

/// The access layer: Host, cross-site writes, tokens, then the Actor for the handlers.
pub async fn check(State(access): State<Access>, mut request: Request, next: Next) -> Response {
    if let Err(message) = access.host_is_allowed(request.headers(), request.uri()) {
        return ApiError::WrongHost(message).into_response();
    }
    let method = request.method().clone();
    let write = is_write(&method);
    if write && let Err(message) = access.cross_site_write(request.headers()) {
        return ApiError::Forbidden(message).into_response();
    }
    let path = request.uri().path().to_owned();
    let (grant, token_name) = match access.grant_of(request.headers()) {
        Ok(found) => found,
        // A wrong token is refused even where none is needed: a script with a stale token
        // should hear so, not succeed by luck on an open server.
        Err(error) if !is_public(&method, &path) => {
            return unauthorized(error.to_string());
        }
        Err(_) => (Grant::Nothing, None),
    };
    if !is_public(&method, &path) {
        if write && access.writes_need_token() && grant < Grant::Write {
            let bearer = request.headers().contains_key(header::AUTHORIZATION);
            let message = if bearer && grant == Grant::Read {
                "this token may read but not change snapshots: send a write token as `Authorization: Bearer TOKEN`"
            } else {
                "this server needs a token to change snapshots: send `Authorization: Bearer TOKEN` (snapview upload and diff read it from SNAPVIEW_TOKEN or --token)"
            };
            return unauthorized(message.into());
        }
        if !write && access.reads_need_token() && grant < Grant::Read {
            if path.starts_with("/api/") {
                return unauthorized(
                    "this server needs a token to read: send `Authorization: Bearer TOKEN` (snapview diff reads it from SNAPVIEW_TOKEN or --token)".into(),
                );
            }
            let wanted = request
                .uri()
                .path_and_query()
                .map_or("/".to_owned(), |p| p.as_str().to_owned());
            return Redirect::to(&format!("/login?next={}", query_escape(&wanted))).into_response();
        }
    }
    let actor = access.actor(request.headers(), token_name);
    request.extensions_mut().insert(actor);
    next.run(request).await
}

fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Where to go after logging in: a path on this server only, never `//other.site` or a URL.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(next) if next.starts_with('/') && !next.starts_with("//") && !next.contains('\\') => {
            next.to_owned()
        }
        _ => "/".to_owned(),
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    assets: Assets,
    next: String,
    error: String,
}

#[derive(serde::Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

fn login_page(next: String, error: String, status: StatusCode) -> Response {
    let mut response = render(LoginPage {
        assets: Assets::new(),
        next,
        error,
    });
    *response.status_mut() = status;
    response
}

/// `GET /login`: the form that asks for the read token (when one is needed).
pub async fn login_form(
    State(state): State<AppState>,
    Query(query): Query<LoginQuery>,
) -> Response {
    let next = safe_next(query.next.as_deref());
    if state.config.access.read_token.is_none() {
        return Redirect::to(&next).into_response();
    }
    login_page(next, String::new(), StatusCode::OK)
}

/// `POST /login`: a valid token sets the session cookie and goes on to the page asked for.
pub async fn login(State(state): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let access = Access::new(&state.config);
    let next = safe_next(form.next.as_deref());
    if !access.reads_need_token() {
        return Redirect::to(&next).into_response();
    }
    let (grant, _) = access.grant_of_token(form.token.trim());
    if grant == Grant::Nothing {
        return login_page(
            next,
            "That token is not valid on this server.".into(),
            StatusCode::UNAUTHORIZED,
        );
    }
    let Some(session) = access.session_for(form.token.trim()) else {
        return ApiError::Internal("no randomness for the session key".into()).into_response();
    };
    // HttpOnly: scripts (an injected one included) cannot read it; SameSite=Strict: no other
    // site's page can make the browser send it.
    let cookie = format!(
        "{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age=2592000{}",
        if access.secure_cookie { "; Secure" } else { "" }
    );
    let mut response = Redirect::to(&next).into_response();
    match HeaderValue::from_str(&cookie) {
        Ok(value) => {
            response.headers_mut().insert(header::SET_COOKIE, value);
            response
        }
        Err(e) => ApiError::Internal(e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2_shape() {
        // RFC 4231 test case 2 uses a 4-byte key; ours are always 32 bytes, so check against
        // the definition with the key zero-padded, which is what HMAC does to short keys.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        assert_eq!(
            hex(&hmac_sha256(&key, b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn host_names_lose_ports_case_and_trailing_dots() {
        assert_eq!(host_name("LocalHost:7878").as_deref(), Some("localhost"));
        assert_eq!(host_name("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(host_name("example.com.").as_deref(), Some("example.com"));
        assert_eq!(host_name("[::1"), None);
    }

    #[test]
    fn tokens_file_is_checked_line_by_line() {
        let tokens = AccessConfig::parse_tokens(
            "# team\nalice: 0123456789abcdef0123\n\nbob:fedcba9876543210fedc\n",
        )
        .expect("valid");
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].name.as_deref(), Some("alice"));
        assert_eq!(tokens[1].token, "fedcba9876543210fedc");
        let error = |text: &str| AccessConfig::parse_tokens(text).expect_err(text);
        assert!(error("alice 0123456789abcdef0123").contains("line 1"));
        assert!(error("alice:short").contains("at least 16"));
        assert!(error("alice:0123456789abcdef 0123").contains("visible ASCII"));
        assert!(error("alice:0123456789abcdéf0123").contains("visible ASCII"));
        assert!(error("a:0123456789abcdef0123\na:1123456789abcdef0123").contains("twice"));
        assert!(error("a:0123456789abcdef0123\nb:0123456789abcdef0123").contains("same token"));
        assert!(error("# nothing\n").contains("no tokens"));
        assert!(
            !format!("{tokens:?}").contains("0123456789"),
            "Debug hides tokens"
        );
    }

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(safe_next(Some("/s/0123?tab=flame")), "/s/0123?tab=flame");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn session_cookies_round_trip_and_differ_from_tokens() {
        let config = super::super::ServeConfig {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: std::path::PathBuf::new(),
            max_upload_bytes: 0,
            cache_budget_bytes: 0,
            public_url: "http://localhost:1".into(),
            trash_days: 7,
            reindex: false,
            limits: Default::default(),
            roles: Default::default(),
            access: AccessConfig {
                read_token: Some(NamedToken {
                    name: None,
                    token: "read-token-0123456789".into(),
                }),
                ..AccessConfig::default()
            },
        };
        let access = Access::new(&config);
        let session = access.session_for("read-token-0123456789").expect("key");
        assert!(!session.contains("read-token"));
        assert!(access.session_is_valid(&session));
        let mut forged = session.clone().into_bytes();
        forged[0] = if forged[0] == b'0' { b'1' } else { b'0' };
        assert!(!access.session_is_valid(&String::from_utf8(forged).expect("ascii")));
        assert!(!access.session_is_valid("read-token-0123456789"));
    }
}
