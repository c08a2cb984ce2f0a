//! The login page (`GET`/`POST /login`) and the session cookie it sets: an HMAC of the read
//! token under a key drawn at each start, so the cookie never reveals the token and dies with
//! a restart.

use super::super::AppState;
use super::super::error::ApiError;
use super::super::pages::{Assets, render};
use super::tokens::{same_digest, sha256};
use super::{Access, Grant, WrongToken};
use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use cookie::{Cookie, SameSite};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::sync::OnceLock;

/// The session cookie the login page sets.
pub const SESSION_COOKIE: &str = "snapview_session";

/// How long a browser keeps the session cookie (a restart ends it sooner).
const SESSION_DAYS: i64 = 30;

/// The HMAC key that turns a token into its session cookie: random at each start, so a cookie
/// is worthless after a restart and never reveals the token.
pub(super) fn session_key() -> Option<&'static [u8; 32]> {
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

/// The session cookie's MAC of a token's digest: HMAC-SHA256 (RFC 2104) under the start's key.
/// `None` only if the MAC refused the key, which HMAC never does (any length is a valid key).
pub(super) fn session_mac(key: &[u8; 32], digest: &[u8; 32]) -> Option<[u8; 32]> {
    let mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    Some(mac.chain_update(digest).finalize().into_bytes().into())
}

impl Access {
    /// Whether a session cookie value is one the login page handed out since this start.
    pub(super) fn session_is_valid(&self, value: &str) -> bool {
        let mut decoded = [0u8; 32];
        if hex::decode_to_slice(value, &mut decoded).is_err() {
            return false;
        }
        self.sessions.iter().fold(false, |found, session| {
            same_digest(&decoded, session) | found
        })
    }

    /// The cookie value for a token that may read.
    pub(super) fn session_for(&self, token: &str) -> Option<String> {
        let key = session_key()?;
        session_mac(key, &sha256(token.as_bytes())).map(hex::encode)
    }
}

/// Where to go after logging in: a path on this server, else `/`.
///
/// Browsers resolve `Location` against this page's URL after the WHATWG URL rules, which drop
/// tabs and line breaks anywhere and read `\` as `/`: `/<TAB>/evil.example` becomes
/// `//evil.example`, another site. So `next` must be plain printable ASCII (no control
/// character, no whitespace, nothing a browser rewrites) starting with exactly one `/`, with no
/// `\` at all, and read as a URI it must have neither scheme nor authority: resolved against
/// the public URL, it then keeps that URL's scheme, host and port. Anything else (a URL, a
/// `//host` reference, non-ASCII text a browser would percent-encode its own way) goes to `/`;
/// what passes is a valid header value, so the redirect is never a 500.
fn safe_next(next: Option<&str>) -> String {
    next.filter(|next| is_local_path(next))
        .unwrap_or("/")
        .to_owned()
}

fn is_local_path(next: &str) -> bool {
    let bytes = next.as_bytes();
    bytes.first() == Some(&b'/')
        && !matches!(bytes.get(1), Some(b'/' | b'\\'))
        && bytes.iter().all(|&b| b.is_ascii_graphic() && b != b'\\')
        && next
            .parse::<axum::http::Uri>()
            .is_ok_and(|uri| uri.scheme().is_none() && uri.authority().is_none())
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

pub(super) fn login_page(next: String, error: String, status: StatusCode) -> Response {
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
        let mut response = login_page(
            next,
            "That token is not valid on this server.".into(),
            StatusCode::UNAUTHORIZED,
        );
        // Counted by the access layer, which keeps the count (`failures.rs`).
        response.extensions_mut().insert(WrongToken);
        return response;
    }
    let Some(session) = access.session_for(form.token.trim()) else {
        return ApiError::internal("making a session key", "no randomness").into_response();
    };
    // HttpOnly: scripts (an injected one included) cannot read it; SameSite=Strict: no other
    // site's page can make the browser send it.
    let cookie = Cookie::build((SESSION_COOKIE, session))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/")
        .max_age(cookie::time::Duration::days(SESSION_DAYS))
        .secure(access.secure_cookie)
        .build();
    let mut response = Redirect::to(&next).into_response();
    match HeaderValue::from_str(&cookie.to_string()) {
        Ok(value) => {
            response.headers_mut().insert(header::SET_COOKIE, value);
            response
        }
        Err(e) => ApiError::internal("setting the session cookie", e).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::AccessConfig;
    use super::super::tokens::NamedToken;
    use super::*;
    #[test]
    fn the_cookie_mac_is_hmac_sha256_in_lowercase_hex_as_before() {
        // RFC 4231 test case 2's key and message, each zero-padded to the 32 bytes ours always
        // have; the expected text is HMAC-SHA256 by another implementation (Python's `hmac`),
        // as the hand-written one of earlier versions computed it (it passed RFC 4231 case 2).
        // So the cookie's format (lowercase hex of HMAC-SHA256 of the token's SHA-256) is
        // unchanged by the move to the `hmac` crate (README, Security).
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mut digest = [0u8; 32];
        digest[..28].copy_from_slice(b"what do ya want for nothing?");
        assert_eq!(
            session_mac(&key, &digest).map(hex::encode).as_deref(),
            Some("733e03185f9a9dcc4df0c2beeeacb82f0db51073b56011b0654070290b5f8d43")
        );
    }

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(safe_next(Some("/s/0123?tab=flame")), "/s/0123?tab=flame");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
        for hostile in [
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\n/evil.example",
            "/\\/evil.example",
            "\\/evil.example",
            "https:evil.example",
            "/\u{3000}/evil.example",
            "/\u{a0}/evil.example",
            "/ /evil.example",
            "/\u{7f}",
            "",
        ] {
            assert_eq!(safe_next(Some(hostile)), "/", "{hostile:?}");
        }
        assert_eq!(safe_next(Some("/%2F/evil.example")), "/%2F/evil.example");
        assert_eq!(safe_next(Some("/compare/a/b?x=1#y")), "/compare/a/b?x=1#y");
    }

    #[test]
    fn session_cookies_round_trip_and_differ_from_tokens() {
        let config = crate::server::ServeConfig {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: std::path::PathBuf::new(),
            max_upload_bytes: 0,
            cache_budget_bytes: 0,
            public_url: "http://localhost:1".into(),
            trash_days: 7,
            reindex: false,
            database: None,
            blobs: None,
            cache_dir: None,
            cache_size_bytes: 0,
            limits: Default::default(),
            roles: Default::default(),
            import: Default::default(),
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
