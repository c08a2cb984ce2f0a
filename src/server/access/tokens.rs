//! The tokens that open the server: `--write-token`, `--read-token` and `--tokens-file`, how
//! they are checked when given, and how a request's token is matched against them (as SHA-256
//! digests, in constant time).

use super::hosts::host_name;
use super::{Access, Grant};
use axum::http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};
use std::path::Path;
use subtle::ConstantTimeEq;

/// Tokens shorter than this could be guessed by trying: `--max-token-failures` slows one
/// address down, not many.
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
#[derive(Debug, Clone)]
pub struct AccessConfig {
    /// Tokens that may write (and read). Empty: writes need no token.
    pub write_tokens: Vec<NamedToken>,
    /// The token that may read; `None`: reads are open.
    pub read_token: Option<NamedToken>,
    /// The token that opens `/metrics` and `/readyz` only (`--metrics-token`), for a
    /// scraper or a probe that must not read snapshots; `None`: none.
    pub metrics_token: Option<NamedToken>,
    /// A header a trusted proxy sets to the signed-in user, e.g. `x-forwarded-user`.
    pub user_header: Option<HeaderName>,
    /// Host names (without port) accepted besides `localhost`, `127.0.0.1`, `[::1]` and the public
    /// URL's host. Given, the Host check applies whatever the binding.
    pub allowed_hosts: Vec<String>,
    /// The peers `user_header` is believed from (`--trusted-proxies`); empty: loopback only.
    pub trusted_proxies: Vec<super::proxies::IpBlock>,
    /// Who may frame the pages (`--frame-ancestors`); nobody by default.
    pub frame_ancestors: crate::server::framing::FrameAncestors,
    /// Wrong tokens one client address may send a minute before it must wait
    /// (`--max-token-failures`); 0: no limit.
    pub max_token_failures: u32,
}

impl Default for AccessConfig {
    fn default() -> Self {
        Self {
            write_tokens: Vec::new(),
            read_token: None,
            metrics_token: None,
            user_header: None,
            allowed_hosts: Vec::new(),
            trusted_proxies: Vec::new(),
            frame_ancestors: crate::server::framing::FrameAncestors::default(),
            max_token_failures: super::DEFAULT_MAX_TOKEN_FAILURES,
        }
    }
}

impl AccessConfig {
    /// Checks a token given on the command line or in the environment.
    pub fn check_token(flag: &str, token: &str) -> Result<(), String> {
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "{flag}: a token needs at least {MIN_TOKEN_CHARS} characters (clients at many addresses may try many); `openssl rand -hex 32` makes a good one"
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

pub(super) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Equal in a time that depends on neither where the first difference is nor the contents.
pub(super) fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

impl Access {
    /// Whether the request's Bearer token is the metrics token.
    pub(super) fn carries_metrics_token(&self, headers: &HeaderMap) -> bool {
        let Some(metrics) = &self.metrics else {
            return false;
        };
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
            })
            .is_some_and(|token| same_digest(&sha256(token.trim().as_bytes()), metrics))
    }

    /// The grant of a raw token, and the name of the write token that matched.
    pub(super) fn grant_of_token(&self, token: &str) -> (Grant, Option<String>) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
