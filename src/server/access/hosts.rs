//! The Host and Origin checks: a loopback server answers only to its own names (no DNS
//! rebinding), and no browser may write on behalf of another site.

use super::Access;
use axum::http::{HeaderMap, header};

/// `Host`-header text without its port, lowercased, without a trailing dot: `[::1]:80` ->
/// `[::1]`, `Example.COM.:7878` -> `example.com`.
pub(super) fn host_name(host: &str) -> Option<String> {
    let host = host.trim();
    let name = if host.starts_with('[') {
        let end = host.find(']')?;
        &host[..=end]
    } else {
        host.split(':').next()?
    };
    Some(name.trim_end_matches('.').to_ascii_lowercase())
}

impl Access {
    pub(super) fn host_is_allowed(
        &self,
        headers: &HeaderMap,
        uri: &axum::http::Uri,
    ) -> Result<(), String> {
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
            // Which names it does answer to is for the operator (some are internal): the flags
            // that set them are enough for a person who should know.
            _ => Err(format!(
                "this server does not answer to the host name {:?}; its operator sets the names it answers to with --allowed-hosts and --public-url",
                host.chars().take(100).collect::<String>()
            )),
        }
    }

    /// Refuses a write a browser sent on behalf of another site.
    pub(super) fn cross_site_write(&self, headers: &HeaderMap) -> Result<(), String> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn host_names_lose_ports_case_and_trailing_dots() {
        assert_eq!(host_name("LocalHost:7878").as_deref(), Some("localhost"));
        assert_eq!(host_name("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(host_name("example.com.").as_deref(), Some("example.com"));
        assert_eq!(host_name("[::1"), None);
    }
}
