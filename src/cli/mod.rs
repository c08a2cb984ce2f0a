//! The command line: clap parses, [`ValidatedCommand`](args::ValidatedCommand) checks what it
//! parsed, the library does the work.
//!
//! Every command prints one clear error line on failure, and its exit status says what kind of
//! failure it was (see [`Failure`]), so a script need not read the message.
//!
//! - [`args`]: clap's structs and the validated command;
//! - [`reports`]: the text of `summary` and `diff`;
//! - [`client`]: `upload` and `diff --server` over HTTP;
//! - [`progress`]: loading with a progress bar.

mod args;
mod cache;
mod client;
mod open;
mod progress;
mod reports;
mod roles_commands;

use crate::analysis::{Analysis, Summary};
use crate::server::{AppState, ServeConfig};
use crate::snapshot::{Snapshot, load_path};
use crate::torch_text;
use args::{Cli, DeviceArg, DiffSource, LiveArgs, LogFormat, ValidatedCommand, default_public_url};
use clap::Parser;
use client::{http_get_json, import, put_rules, upload};
use progress::load_with_progress;
use reports::{diff_text, summary_text};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Runs the command line; returns the process exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let max_events = cli.max_events();
    if let Some(threads) = cli.threads() {
        crate::snapshot::set_default_threads(threads);
    }
    if cli.no_cache() {
        cache::disable();
    }
    // A command that reads a file logs only when asked (`RUST_LOG=snapview=debug` says where a
    // read's time goes); `serve` and `open` set up their own log.
    if std::env::var_os("RUST_LOG").is_some() && !cli.logs_itself() {
        init_logging("warn", LogFormat::Text);
    }
    let outcome = ValidatedCommand::from_arguments(cli)
        .map_err(Failure::from)
        .and_then(|command| execute(command, max_events));
    match outcome {
        Ok(Outcome::Done) => 0,
        Ok(Outcome::Regression) => 1,
        Err(failure) => {
            eprintln!("snapview: error: {}", failure.message);
            failure.kind.exit_status()
        }
    }
}

/// How a command that did its work ended.
enum Outcome {
    Done,
    /// `diff --max-peak-growth` found a peak that grew too much.
    Regression,
}

/// Why a command failed: the message printed, and the kind of failure, which its exit status
/// tells (the Python package raises on these, never on the message's words).
#[derive(Debug)]
pub(super) struct Failure {
    kind: FailureKind,
    message: String,
}

/// The kinds of failure, each with its own exit status (documented in the README; 1 is
/// `diff --max-peak-growth`'s regression).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FailureKind {
    /// Refused (2): a bad flag or file (clap's own usage errors are 2 as well), or a request
    /// the server refused (no or a wrong token, a file it would not store, a redirect an upload
    /// cannot follow).
    Refused,
    /// The server could not be reached: refused connection, DNS, TLS, timeout (3).
    Unreachable,
    /// The server has no such snapshot, or no such page (404) (4).
    NotFound,
}

impl FailureKind {
    fn exit_status(self) -> i32 {
        match self {
            FailureKind::Refused => 2,
            FailureKind::Unreachable => 3,
            FailureKind::NotFound => 4,
        }
    }
}

impl Failure {
    pub(super) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The same failure, its message put in context.
    fn context(self, describe: impl FnOnce(&str) -> String) -> Self {
        Self {
            message: describe(&self.message),
            ..self
        }
    }
}

/// A message alone is a refusal (status 2): bad input, most often.
impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::new(FailureKind::Refused, message)
    }
}

/// Does what `command` says; files are read with at most `max_events` trace events
/// (`--max-events`).
fn execute(command: ValidatedCommand, max_events: u64) -> Result<Outcome, Failure> {
    let text = match command {
        ValidatedCommand::Diff {
            source,
            json,
            max_peak_growth,
            options,
            top,
        } => return diff(source, json, max_peak_growth, options, top, max_events),
        // These two print as they go, and return when the server stops.
        ValidatedCommand::Serve {
            config,
            files,
            log_format,
        } => {
            serve(*config, files, log_format)?;
            return Ok(Outcome::Done);
        }
        ValidatedCommand::Open { file, no_browser } => {
            open::open(file, no_browser, max_events)?;
            return Ok(Outcome::Done);
        }
        ValidatedCommand::Upload {
            file,
            url,
            server,
            roles,
            token,
            max_redirects,
        } => upload_with_rules(
            || upload(&file, &url, token.as_deref(), max_redirects),
            &server,
            roles.as_deref(),
            token.as_deref(),
        )?,
        ValidatedCommand::Import {
            url,
            request,
            server,
            roles,
            token,
            max_redirects,
        } => upload_with_rules(
            || import(&url, &request, token.as_deref(), max_redirects),
            &server,
            roles.as_deref(),
            token.as_deref(),
        )?,
        ValidatedCommand::Summary { file, json, roles } => {
            let rules = roles_commands::read_rules(roles.as_deref())?;
            let (snapshot, summary) = cache::summary(&file, max_events, &rules)?;
            if json {
                let mut text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
                text.push('\n');
                text
            } else {
                summary_text(&file, &snapshot, &summary)
            }
        }
        ValidatedCommand::Stats { file } => {
            torch_text::stats(&load_with_progress(&file, max_events, load_path)?)
                .map_err(|e| format!("{}: {e}", file.display()))?
        }
        ValidatedCommand::Live(LiveArgs {
            file,
            device,
            at,
            json,
            roles,
        }) => {
            let rules = roles_commands::read_rules(roles.as_deref())?;
            let snapshot = load_with_progress(&file, max_events, load_path)?;
            let device = device
                .map(|d| device_ordinal(&snapshot, &file, d))
                .transpose()?;
            roles_commands::live_command(&snapshot, device, &at, json, &rules)?
        }
        ValidatedCommand::ExportRoles {
            file,
            output,
            roles,
        } => {
            let rules = roles_commands::read_rules(roles.as_deref())?;
            let text = roles_commands::folded_by_role(
                &load_with_progress(&file, max_events, load_path)?,
                &rules,
            );
            write_output(text, output)?;
            return Ok(Outcome::Done);
        }
        ValidatedCommand::Export {
            file,
            kind,
            output,
            device,
        } => {
            let mut snapshot = load_with_progress(&file, max_events, load_path)?;
            // torch's `_memory_viz` reads `segments` only: the host's pinned segments are
            // written when asked for (`--device host`), never mixed into the GPUs' lines.
            let host = snapshot.source.host_device;
            let keep = match device {
                None => None,
                Some(d) => Some(device_ordinal(&snapshot, &file, d)?),
            };
            snapshot.segments.retain(|segment| {
                let device = usize::try_from(segment.device).ok();
                match keep {
                    Some(wanted) => device == Some(wanted),
                    None => host.is_none() || device != host,
                }
            });
            let text = torch_text::folded(&snapshot, kind)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            write_output(text, output)?;
            return Ok(Outcome::Done);
        }
    };
    write_output(text, None)?;
    Ok(Outcome::Done)
}

/// `snapview upload`: sends the file to `url`, then, with `--roles`, gives the stored snapshot
/// those rules on `server`; returns the line to print, the snapshot's URL. The rules file is
/// read before the upload, so a missing one stores nothing.
fn upload_with_rules(
    send: impl FnOnce() -> Result<client::Stored, Failure>,
    server: &str,
    roles: Option<&Path>,
    token: Option<&str>,
) -> Result<String, Failure> {
    let rules = roles
        .map(|path| {
            std::fs::read(path)
                .map(|bytes| (path, bytes))
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
        })
        .transpose()?;
    let stored = send()?;
    if let Some((path, bytes)) = rules {
        put_rules(server, &stored.id, bytes, token).map_err(|failure| {
            failure.context(|message| {
                format!(
                    "{} was stored, but the server refused the role rules {}: {message}",
                    stored.url,
                    path.display()
                )
            })
        })?;
    }
    Ok(format!("{}\n", stored.url))
}

/// The ordinal `--device` names in `snapshot`: `host` is the pinned host memory's, refused with
/// a message when the file recorded none.
fn device_ordinal(snapshot: &Snapshot, file: &Path, device: DeviceArg) -> Result<usize, String> {
    match device {
        DeviceArg::Ordinal(d) => Ok(d),
        DeviceArg::Host => snapshot.source.host_device.ok_or_else(|| {
            format!(
                "{} recorded no pinned host memory (torch writes it with _record_memory_history(record_pinned_host_memory=True))",
                file.display()
            )
        }),
    }
}

/// A command's text, to `output` or to standard output (a closed pipe, `| head`, is not an
/// error worth a message).
fn write_output(text: String, output: Option<PathBuf>) -> Result<(), String> {
    match output {
        Some(output) => std::fs::write(&output, text)
            .map_err(|e| format!("cannot write {}: {e}", output.display())),
        None => match std::io::stdout().lock().write_all(text.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other.map_err(|e| e.to_string()),
        },
    }
}

/// `snapview serve`: opens the store, imports FILEs, prints the URL, serves until Ctrl-C.
fn serve(config: ServeConfig, files: Vec<PathBuf>, log_format: LogFormat) -> Result<(), String> {
    init_logging("snapview=info,tower_http=warn", log_format);
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let served = runtime.block_on(async move {
        let mut config = config;
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
        // Port 0 asks the system for a free port: links name the one it gave, and the line
        // printed below tells a script (or a test) where to connect, with no race for the port.
        if let Ok(bound) = listener.local_addr()
            && config.addr.port() == 0
        {
            if config.public_url == default_public_url(config.addr) {
                config.public_url = default_public_url(bound);
            }
            config.addr = bound;
        }
        let data_dir = config.data_dir.clone();
        let state = AppState::open(config.clone())
            .map_err(|e| format!("cannot open the data folder {}: {e}", data_dir.display()))?;
        for file in &files {
            match crate::server::upload::import_path(&state, file).await {
                Ok(view) => println!("{}  {}", view.url, file.display()),
                Err(e) => return Err(format!("{}: {e}", file.display())),
            }
        }
        tracing::info!(data_dir = %data_dir.display(), "snapshots are kept here");
        log_access(&config);
        // Listening for Ctrl-C and SIGTERM before saying where it serves: a script that stops
        // the server once it read that line gets the graceful shutdown.
        let signals = crate::server::StopSignals::listen()
            .map_err(|e| format!("cannot listen for Ctrl-C and SIGTERM: {e}"))?;
        println!("snapview is serving at {}/", config.public_url);
        crate::server::serve(state, listener, signals)
            .await
            .map_err(|e| format!("the server failed: {e}"))
    });
    // Dropping the runtime would wait for every blocking task; the grace period is over, so
    // what is still running (a store write at most) gets a moment, not forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

/// The server's log on stderr, `default` unless `RUST_LOG` says otherwise; for `serve` and
/// `open`. `json`: one object per line (`timestamp`, `level`, `target`, `fields` with the
/// `message`, and the request's `span`/`spans`), for a log pipeline.
fn init_logging(default: &str, format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => log
            // Colour codes only for a person at a terminal, not in a log file or journald.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => log.json().with_ansi(false).init(),
    }
}

/// Says at start who may do what, and warns when a shared server lets anyone delete.
fn log_access(config: &ServeConfig) {
    let access = &config.access;
    if !access.write_tokens.is_empty() {
        tracing::info!(
            tokens = access.write_tokens.len(),
            "writes need a write token (Authorization: Bearer)"
        );
    } else if !config.addr.ip().is_loopback() && access.read_token.is_none() {
        tracing::warn!(
            addr = %config.addr,
            "no --write-token: anyone who can reach this address can upload, rename and delete snapshots"
        );
    }
    if access.read_token.is_some() {
        tracing::info!("pages and API reads need the read token (or a write token)");
    }
    if let Some(header) = &access.user_header {
        let trusted = if access.trusted_proxies.is_empty() {
            "loopback only (127.0.0.0/8, ::1): set --trusted-proxies to your proxy's address if it is elsewhere".to_owned()
        } else {
            access
                .trusted_proxies
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        tracing::warn!(
            %header,
            trusted_proxies = %trusted,
            "--user-header names who made each write: it is safe only behind a proxy that overwrites or strips the header on every request; it is accepted only from the trusted proxies, and a request carrying it from any other address is refused"
        );
    }
    if !access.frame_ancestors.is_none() {
        tracing::info!(
            frame_ancestors = ?access.frame_ancestors,
            "pages may be shown in frames of these origins (--frame-ancestors)"
        );
    }
}

/// `snapview diff`: compares two files, or two snapshots on a server, and prints the
/// comparison; a regression past `max_peak_growth` is [`Outcome::Regression`].
fn diff(
    source: DiffSource,
    json: bool,
    max_peak_growth: Option<f64>,
    options: crate::analysis::diff::DiffOptions,
    top: usize,
    max_events: u64,
) -> Result<Outcome, Failure> {
    let (names, diff) = match source {
        DiffSource::Files(before, after) => {
            let load = |file: &Path| -> Result<(Snapshot, Analysis, Summary), String> {
                let (snapshot, seed) =
                    load_with_progress(file, max_events, crate::analysis::load_path)?;
                let analysis = Analysis::seeded(&snapshot, seed);
                let summary = Summary::new(&snapshot, &analysis);
                Ok((snapshot, analysis, summary))
            };
            let (b, a) = (load(&before)?, load(&after)?);
            (
                (before.display().to_string(), after.display().to_string()),
                crate::analysis::diff::diff((&b.0, &b.1, &b.2), (&a.0, &a.1, &a.2), options),
            )
        }
        DiffSource::Server { url, token } => {
            let json = http_get_json(&url, token.as_deref())?;
            let diff = serde_json::from_value(json["diff"].clone())
                .map_err(|e| format!("unexpected answer from the server: {e}"))?;
            let name = |side: &str| json[side]["name"].as_str().unwrap_or(side).to_owned();
            ((name("before"), name("after")), diff)
        }
    };
    let regressed: Vec<String> = match max_peak_growth {
        Some(limit) => diff
            .devices
            .iter()
            .filter(|d| d.peak_growth_percent.is_some_and(|g| g > limit))
            .map(|d| {
                format!(
                    "cuda:{} peak grew {:+.1}%",
                    d.after_device,
                    d.peak_growth_percent.unwrap_or(0.0)
                )
            })
            .collect(),
        None => Vec::new(),
    };
    let mut text = if json {
        let mut text = serde_json::to_string_pretty(&diff).map_err(|e| e.to_string())?;
        text.push('\n');
        text
    } else {
        diff_text(&names.0, &names.1, &diff, top)
    };
    if !regressed.is_empty() && !json {
        text.push_str(&format!(
            "\nmemory regression: {} (limit {:.1}%)\n",
            regressed.join(", "),
            max_peak_growth.unwrap_or(0.0)
        ));
    }
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.to_string().into()),
        _ => {}
    }
    Ok(if regressed.is_empty() {
        Outcome::Done
    } else {
        Outcome::Regression
    })
}
