//! `/login?next=…` goes only to a path on this server (issue 18, item 7): over TCP against the
//! real binary, every hostile `next` (characters a browser drops or rewrites, other sites'
//! references in each spelling) answers `Location: /`, from `GET /login` and `POST /login`
//! alike, and never a 500.

use crate::common;

use common::served::Served;
use std::time::Duration;

/// A read token for the server that shows the form (16 characters at least).
const READ_TOKEN: &str = "read-token-0123456789abcdef";

/// `next` values that must not leave the server, as they would arrive decoded from the query.
const HOSTILE: &[&str] = &[
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r/evil.example",
    "/\r\n/evil.example",
    "/\n",
    "\t//evil.example",
    "//evil.example",
    "///evil.example",
    "/\\evil.example",
    "\\/evil.example",
    "\\\\evil.example",
    "/\\/evil.example",
    "https:evil.example",
    "https://evil.example/",
    "http:/evil.example",
    "javascript:alert(1)",
    "/\u{3000}/evil.example",
    "/\u{a0}/evil.example",
    "/\u{2028}/evil.example",
    "/\u{feff}/evil.example",
    "/ /evil.example",
    "/\u{7f}/evil.example",
    "/\u{0}/evil.example",
    "evil.example",
    "",
];

/// `next` values on this server, kept as they are (percent-encoded slashes stay encoded: a
/// browser does not decode them when resolving, so they name a path here).
const LOCAL: &[&str] = &[
    "/",
    "/s/0123456789abcdef?tab=flame&at=10",
    "/compare/0123456789abcdef/fedcba9876543210",
    "/%2F/evil.example",
    "/%2f%2fevil.example",
    "/%5Cevil.example",
    "/%09/evil.example",
];

/// What a query or form value percent-encodes: every byte but RFC 3986's unreserved ones.
const VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes `text` as a query or form value.
fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, VALUE).to_string()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// The status and `Location` of `GET /login?next=…`.
fn get_login(server: &Served, next: &str) -> (u16, Option<String>) {
    let response = agent()
        .get(&server.url(&format!("/login?next={}", encode(next))))
        .call()
        .expect("an answer");
    let location = response
        .headers()
        .get("location")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    (response.status().as_u16(), location)
}

/// The status and `Location` of `POST /login` with the form's `token` and `next`.
fn post_login(server: &Served, token: &str, next: &str) -> (u16, Option<String>) {
    let form = format!("token={}&next={}", encode(token), encode(next));
    let response = agent()
        .post(&server.url("/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(form.as_bytes())
        .expect("an answer");
    let location = response
        .headers()
        .get("location")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    (response.status().as_u16(), location)
}

#[test]
fn login_redirects_only_to_paths_on_this_server() {
    let open = Served::builder().start();
    let guarded = Served::builder()
        .env("SNAPVIEW_READ_TOKEN", READ_TOKEN)
        .start();
    let mut wrong = Vec::new();
    for &next in HOSTILE {
        // Without a read token both answer with the redirect at once; with one, the form
        // (200) and, once the token is right, the redirect.
        let answers = [
            ("GET, no read token", get_login(&open, next)),
            ("POST, no read token", post_login(&open, "", next)),
            ("POST, right token", post_login(&guarded, READ_TOKEN, next)),
        ];
        for (how, answer) in answers {
            if answer != (303, Some("/".to_owned())) {
                wrong.push(format!("{how}: next={next:?} answered {answer:?}"));
            }
        }
        let (status, location) = get_login(&guarded, next);
        if (status, location.as_deref()) != (200, None) {
            wrong.push(format!(
                "GET, read token: next={next:?} answered {status} {location:?}"
            ));
        }
    }
    for &next in LOCAL {
        for (how, answer) in [
            ("GET", get_login(&open, next)),
            ("POST", post_login(&guarded, READ_TOKEN, next)),
        ] {
            if answer != (303, Some(next.to_owned())) {
                wrong.push(format!("{how}: local next={next:?} answered {answer:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
