//! Who may show the pages inside a frame (`serve --frame-ancestors`): the Content-Security-Policy
//! every answer carries, and `X-Frame-Options` for browsers that know only that header.
//!
//! By default no page may be framed (clickjacking: another site could overlay the delete button
//! with its own). The local server `snapview.show()` starts for a notebook allows the notebook's
//! origins, so its IFrame can show the page.

use axum::http::HeaderValue;

/// The policy before `frame-ancestors`: only this origin's scripts, styles, images and
/// connections; no plugins, no base URL, forms only to this origin.
const POLICY_BASE: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'";

/// The origins allowed to frame the pages; empty: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameAncestors(Vec<String>);

impl FrameAncestors {
    /// `--frame-ancestors`: origins (`https://notebook.example.com`, `http://localhost:*`), a
    /// scheme alone (`vscode-webview:`) or `'self'`, separated by commas or spaces; `'none'` (or
    /// nothing) is the default. Each is checked whole, so no value can add a directive to the
    /// policy (`;`), another source (a space or `,`) or a keyword (quotes).
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut sources: Vec<String> = Vec::new();
        let entries: Vec<&str> = list
            .split(|c: char| c == ',' || c.is_ascii_whitespace())
            .filter(|entry| !entry.is_empty())
            .collect();
        if entries == ["'none'"] {
            return Ok(Self::default());
        }
        for entry in entries {
            let source = source_of(entry).ok_or_else(|| {
                format!(
                    "--frame-ancestors: {entry:?} is not an origin (scheme://host[:port], a port may be *), a scheme (vscode-webview:) or 'self'"
                )
            })?;
            if !sources.contains(&source) {
                sources.push(source);
            }
        }
        Ok(Self(sources))
    }

    pub fn is_none(&self) -> bool {
        self.0.is_empty()
    }

    /// The whole Content-Security-Policy header.
    pub fn content_security_policy(&self) -> HeaderValue {
        let ancestors = if self.is_none() {
            "'none'".to_owned()
        } else {
            self.0.join(" ")
        };
        // Every source was checked to be visible ASCII without `;`, `,`, quotes or spaces.
        HeaderValue::try_from(format!("{POLICY_BASE}; frame-ancestors {ancestors}"))
            .unwrap_or_else(|_| HeaderValue::from_static("frame-ancestors 'none'"))
    }

    /// `X-Frame-Options` for browsers without CSP's `frame-ancestors`: `DENY` by default,
    /// `SAMEORIGIN` for `'self'` alone, and none at all for a list of origins (the header cannot
    /// name them, and `DENY` would override the policy in some browsers).
    pub fn x_frame_options(&self) -> Option<HeaderValue> {
        match self.0.as_slice() {
            [] => Some(HeaderValue::from_static("DENY")),
            [only] if only == "'self'" => Some(HeaderValue::from_static("SAMEORIGIN")),
            _ => None,
        }
    }
}

/// One source as the policy writes it (lowercased), or `None` when it is not an origin, a
/// scheme or `'self'`.
fn source_of(entry: &str) -> Option<String> {
    if entry.eq_ignore_ascii_case("'self'") {
        return Some("'self'".into());
    }
    let entry = entry.to_ascii_lowercase();
    let scheme_ok = |scheme: &str| {
        scheme.starts_with(|c: char| c.is_ascii_lowercase())
            && scheme
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
    };
    let Some((scheme, rest)) = entry.split_once("://") else {
        // A scheme alone: `vscode-webview:`.
        let scheme = entry.strip_suffix(':')?;
        return scheme_ok(scheme).then(|| entry.clone());
    };
    if !scheme_ok(scheme) {
        return None;
    }
    // An origin has no path; a trailing slash is forgiven.
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let port_ok = port.is_none_or(|port| {
        port == "*" || (!port.is_empty() && port.len() <= 5 && port.parse::<u16>().is_ok())
    });
    // CSP's host-source: `*`, or labels of letters, digits and `-`, the first of which may be `*`.
    let labels = host.strip_prefix("*.").unwrap_or(host);
    let host_ok = host == "*"
        || (!labels.is_empty()
            && labels.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            }));
    (port_ok && host_ok).then(|| match port {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_schemes_and_self_are_accepted_as_the_policy_writes_them() {
        let ancestors = FrameAncestors::parse(
            "http://localhost:*, HTTP://127.0.0.1:8888 vscode-webview: 'self' https://*.example.com/",
        )
        .expect("valid");
        assert_eq!(
            ancestors.0,
            [
                "http://localhost:*",
                "http://127.0.0.1:8888",
                "vscode-webview:",
                "'self'",
                "https://*.example.com"
            ]
        );
        assert_eq!(ancestors.x_frame_options(), None);
        let policy = ancestors.content_security_policy();
        assert!(
            policy.to_str().expect("ascii").ends_with(
                "; frame-ancestors http://localhost:* http://127.0.0.1:8888 vscode-webview: 'self' https://*.example.com"
            ),
            "{policy:?}"
        );
    }

    #[test]
    fn the_default_is_unframeable() {
        for list in ["", "'none'", " , "] {
            let ancestors = FrameAncestors::parse(list).expect("the default");
            assert!(ancestors.is_none());
            assert_eq!(
                ancestors.x_frame_options(),
                Some(HeaderValue::from_static("DENY"))
            );
            assert!(
                ancestors
                    .content_security_policy()
                    .to_str()
                    .expect("ascii")
                    .ends_with("frame-ancestors 'none'")
            );
        }
        let own = FrameAncestors::parse("'self'").expect("self");
        assert_eq!(
            own.x_frame_options(),
            Some(HeaderValue::from_static("SAMEORIGIN"))
        );
    }

    #[test]
    fn nothing_can_add_to_the_policy() {
        for bad in [
            "http://a.example;script-src *",
            "http://a.example;",
            "'unsafe-inline'",
            "'none' http://a.example",
            "\"http://a.example\"",
            "http://a.example/path",
            "http://a.example:99999",
            "http://a.example:",
            "http://",
            "http://a..example",
            "http://a_b.example",
            "http://[::1]:80",
            "1http://a.example",
            "javascript",
            "http://a.example\u{0}",
            "http://exämple.com",
        ] {
            assert!(FrameAncestors::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
