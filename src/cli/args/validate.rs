//! From clap's arguments to a [`ValidatedCommand`]: what clap could not check (files there,
//! server URLs http(s), access settings that hold together), and the defaults that depend on
//! the environment.

use super::{
    Cli, Command, DiffArgs, DiffSource, ExportKind, ServeArgs, UploadArgs, ValidatedCommand,
};
use crate::analysis::diff::{Align, DiffOptions};
use crate::cli::client::{check_server_url, query_escape};
use crate::server::ServeConfig;
use crate::server::access::{AccessConfig, NamedToken};
use crate::torch_text::FoldedKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

impl ValidatedCommand {
    /// Checks what clap could not: the files are there, the server URLs are http(s), the
    /// access settings hold together (flags with a value of their own type were checked by
    /// their value parsers as clap read them).
    pub(in crate::cli) fn from_arguments(cli: Cli) -> Result<Self, String> {
        let max_events = cli.max_events;

        Ok(match cli.command {
            Command::Summary { file, json, roles } => {
                check_file(&file)?;
                ValidatedCommand::Summary { file, json, roles }
            }
            Command::Live(live) => {
                check_file(&live.file)?;
                ValidatedCommand::Live(live)
            }
            Command::Stats { file } => {
                check_file(&file)?;
                ValidatedCommand::Stats { file }
            }
            Command::Export {
                file,
                kind,
                output,
                roles,
                device,
            } => {
                check_file(&file)?;
                let kind = match kind {
                    ExportKind::Segments => FoldedKind::Segments,
                    ExportKind::Memory => FoldedKind::Memory,
                    ExportKind::Roles => {
                        return Ok(ValidatedCommand::ExportRoles {
                            file,
                            output,
                            roles,
                        });
                    }
                };
                ValidatedCommand::Export {
                    file,
                    kind,
                    output,
                    device,
                }
            }
            Command::Open { file, no_browser } => ValidatedCommand::Open { file, no_browser },
            Command::Serve(arguments) => arguments.validate(max_events)?,
            Command::Diff(arguments) => arguments.validate()?,
            Command::Upload(arguments) => arguments.validate()?,
        })
    }
}

impl ServeArgs {
    /// The checked command, or what is wrong with the arguments.
    fn validate(self, max_events: u64) -> Result<ValidatedCommand, String> {
        let ServeArgs {
            addr,
            data_dir,
            database,
            blobs,
            cache_dir,
            cache_size,
            max_upload,
            cache,
            parse_memory,
            public_url,
            trash_days,
            roles,
            reindex,
            connections,
            write_token,
            tokens_file,
            read_token,
            max_token_failures,
            user_header,
            allowed_hosts,
            trusted_proxies,
            frame_ancestors,
            metrics_token,
            log_format,
            import_allow,
            import_timeout,
            files,
        } = self;
        let limits = connections.limits(parse_memory, max_events);
        let access = access_config(
            write_token,
            tokens_file,
            read_token,
            user_header,
            allowed_hosts,
        )?;
        for file in &files {
            check_file(file)?;
        }
        let data_dir = match data_dir {
            Some(dir) => dir,
            None => default_data_dir()?,
        };
        let public_url = public_url
            .map(|u| u.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| default_public_url(addr));
        Ok(ValidatedCommand::Serve {
            config: Box::new(ServeConfig {
                addr,
                data_dir,
                max_upload_bytes: max_upload,
                cache_budget_bytes: cache,
                public_url,
                trash_days,
                reindex,
                database,
                blobs,
                cache_dir,
                cache_size_bytes: cache_size,
                limits,
                import: crate::server::upload::import::ImportConfig {
                    allow: import_allow
                        .iter()
                        .map(|prefix| crate::server::upload::import::AllowedPrefix::parse(prefix))
                        .collect::<Result<_, _>>()?,
                    timeout: import_timeout,
                },
                roles: std::sync::Arc::new(
                    crate::cli::roles_commands::read_rules(roles.as_deref())
                        .map_err(|e| format!("--roles: {e}"))?,
                ),
                access: AccessConfig {
                    trusted_proxies: match trusted_proxies {
                        Some(list) => crate::server::access::parse_trusted_proxies(&list)?,
                        None => Vec::new(),
                    },
                    frame_ancestors: crate::server::framing::FrameAncestors::parse(
                        frame_ancestors.as_deref().unwrap_or(""),
                    )?,
                    max_token_failures,
                    metrics_token: metrics_token_of(metrics_token, &access)?,
                    ..access
                },
            }),
            files,
            log_format,
        })
    }
}

/// `--metrics-token`, checked as the other tokens are, and distinct from them (it must never
/// grant what they do).
fn metrics_token_of(
    token: Option<String>,
    access: &AccessConfig,
) -> Result<Option<NamedToken>, String> {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    AccessConfig::check_token("--metrics-token", &token)?;
    let taken = access
        .write_tokens
        .iter()
        .chain(access.read_token.as_ref())
        .any(|t| t.token == token);
    if taken {
        return Err(
            "--metrics-token is also a read or write token: give the scraper a token of its own"
                .into(),
        );
    }
    Ok(Some(NamedToken {
        name: Some("metrics".into()),
        token,
    }))
}

impl DiffArgs {
    /// The checked command, or what is wrong with the arguments.
    fn validate(self) -> Result<ValidatedCommand, String> {
        let DiffArgs {
            before,
            after,
            json,
            max_peak_growth,
            ignore_lines,
            align,
            server,
            top,
            token,
        } = self;
        let source = match server {
            Some(server) => {
                for id in [&before, &after] {
                    if crate::server::store::SnapshotId::parse(id).is_none() {
                        return Err(format!(
                            "{id:?} is not a snapshot id (16 hex digits, as in its URL)"
                        ));
                    }
                }
                let url = format!(
                    "{}/api/compare/{before}/{after}?ignore_lines={ignore_lines}&align={}",
                    server.trim_end_matches('/'),
                    align_query(align)
                );
                check_server_url(&server)?;
                DiffSource::Server { url, token }
            }
            None => {
                let (before, after) = (PathBuf::from(before), PathBuf::from(after));
                check_file(&before)?;
                check_file(&after)?;
                DiffSource::Files(before, after)
            }
        };
        Ok(ValidatedCommand::Diff {
            source,
            json,
            max_peak_growth,
            options: DiffOptions {
                ignore_lines,
                align,
                ..DiffOptions::default()
            },
            top,
        })
    }
}

impl UploadArgs {
    /// The checked command, or what is wrong with the arguments.
    fn validate(self) -> Result<ValidatedCommand, String> {
        check_server_url(&self.server)?;
        let server = self.server.trim_end_matches('/').to_owned();
        if let Some(source) = self.file.to_str().filter(|file| is_remote_source(file)) {
            // The server fetches it (`POST /api/snapshots/import`) and says whether it may.
            let mut request = serde_json::json!({ "url": source });
            if let Some(name) = &self.name {
                request["name"] = name.as_str().into();
            }
            if let Some(group) = &self.group {
                request["group"] = group.as_str().into();
            }
            return Ok(ValidatedCommand::Import {
                url: format!("{server}/api/snapshots/import"),
                request: request.to_string(),
                server,
                roles: self.roles,
                token: self.token,
                max_redirects: self.max_redirects,
            });
        }
        check_file(&self.file)?;
        let filename = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut url = format!(
            "{server}/api/snapshots?filename={}",
            query_escape(&filename)
        );
        if let Some(name) = &self.name {
            url.push_str(&format!("&name={}", query_escape(name)));
        }
        if let Some(group) = &self.group {
            url.push_str(&format!("&group={}", query_escape(group)));
        }
        Ok(ValidatedCommand::Upload {
            file: self.file,
            url,
            server,
            roles: self.roles,
            token: self.token,
            max_redirects: self.max_redirects,
        })
    }
}

/// Whether `upload`'s FILE is a URL for the server to import (`s3://`, `https://`; `http://`
/// too, so that the server's refusal says why) rather than a local file.
fn is_remote_source(file: &str) -> bool {
    ["s3://", "https://", "http://"].iter().any(|scheme| {
        file.get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    })
}

/// A FILE argument: it must be a file this process can read.
fn check_file(file: &Path) -> Result<(), String> {
    match std::fs::metadata(file) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(format!("{} is not a file", file.display())),
        Err(e) => Err(format!("cannot read {}: {e}", file.display())),
    }
}

/// The `serve` access flags, checked: tokens long enough, the tokens file readable and
/// well-formed, the header and host names valid.
fn access_config(
    write_token: Option<String>,
    tokens_file: Option<PathBuf>,
    read_token: Option<String>,
    user_header: Option<String>,
    allowed_hosts: Option<String>,
) -> Result<AccessConfig, String> {
    let mut write_tokens = Vec::new();
    if let Some(token) = write_token.filter(|t| !t.is_empty()) {
        AccessConfig::check_token("--write-token", &token)?;
        write_tokens.push(NamedToken { name: None, token });
    }
    if let Some(path) = tokens_file {
        write_tokens.extend(AccessConfig::read_tokens_file(&path)?);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if std::fs::metadata(&path).is_ok_and(|meta| meta.permissions().mode() & 0o077 != 0) {
                // Before the log starts, so on stderr directly; a warning, not a refusal, as a
                // team may share it through a group on purpose.
                eprintln!(
                    "snapview: warning: {} is readable by other users (chmod 600 it)",
                    path.display()
                );
            }
        }
    }
    let read_token = match read_token.filter(|t| !t.is_empty()) {
        Some(token) => {
            AccessConfig::check_token("--read-token", &token)?;
            if write_tokens.iter().any(|t| t.token == token) {
                return Err(
                    "--read-token is also a write token: whoever may only read could write".into(),
                );
            }
            crate::server::access::check_randomness()?;
            Some(NamedToken { name: None, token })
        }
        None => None,
    };
    let user_header = match user_header.filter(|h| !h.is_empty()) {
        Some(name) => Some(
            axum::http::HeaderName::try_from(name.as_str())
                .map_err(|_| format!("--user-header {name:?} is not a header name"))?,
        ),
        None => None,
    };
    let allowed_hosts = match allowed_hosts {
        Some(list) => AccessConfig::parse_hosts(&list)?,
        None => Vec::new(),
    };
    Ok(AccessConfig {
        write_tokens,
        read_token,
        user_header,
        allowed_hosts,
        ..AccessConfig::default()
    })
}

/// `http://HOST:PORT` for a server bound to `addr`, when `--public-url` does not say otherwise.
pub(in crate::cli) fn default_public_url(addr: SocketAddr) -> String {
    let host = if addr.ip().is_unspecified() {
        "localhost".to_owned()
    } else {
        addr.ip().to_string()
    };
    format!("http://{host}:{}", addr.port())
}

/// `$XDG_DATA_HOME/snapview`, else `~/.local/share/snapview`.
fn default_data_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("snapview"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/snapview")),
        None => Err("no data folder: set --data-dir (or HOME or XDG_DATA_HOME)".into()),
    }
}

/// `--align` as `?align=` spells it.
fn align_query(align: Align) -> String {
    match align {
        Align::Auto => "auto".to_owned(),
        Align::Off => "off".to_owned(),
        Align::DropOuter(frames) => frames.to_string(),
    }
}
