//! The command line: clap parses, `Config` validates, the library does the work.
//!
//! Every command prints one clear error line and exits with status 2 on bad input.

use crate::analysis::roles::commands as roles_commands;
use crate::analysis::{Analysis, Summary};
use crate::format::{bytes, count, duration_us};
use crate::server::access::{AccessConfig, NamedToken};
use crate::server::{AppState, ConnectionLimits, ServeConfig};
use crate::snapshot::{LoadOptions, Snapshot, load_path};
use crate::torch_text::{self, FoldedKind};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(
    name = "snapview",
    version,
    about = "Look inside PyTorch CUDA memory snapshots",
    long_about = "Look inside PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot).\n\nReads pickle (protocols 2-5), gzip- or zstd-compressed pickle, and the JSON form. Never runs code from a file."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

// `serve` has many more flags than the other commands; clap parses this once, so its size is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Per device: events, peaks, totals at the snapshot, OOM events, the stacks holding the most
    /// memory at the peak, and data-quality notes.
    Summary {
        /// A snapshot file (.pickle, .pickle.gz, .pickle.zst or .json).
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The allocations live at one moment, with their role (parameter, gradient, optimizer_state,
    /// activation, temporary, input, unknown), why, and their frames; and the bytes per role.
    Live {
        file: PathBuf,
        /// The device (default: the first with memory).
        #[arg(long)]
        device: Option<usize>,
        /// `peak`, `end`, or an event index.
        #[arg(long, default_value = "end")]
        at: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Your own role rules: a TOML or JSON file (docs/roles.md).
        #[arg(long)]
        roles: Option<PathBuf>,
    },
    /// The same text as torch's `python -m torch.cuda._memory_viz stats FILE`, byte for byte.
    Stats { file: PathBuf },
    /// Folded stacks for flamegraph.pl, inferno or speedscope: the same lines as torch's
    /// `_memory_viz segments` / `memory` output.
    Export {
        file: PathBuf,
        /// `segments`: one line per block, grouped by stream and segment; `memory`: by stream.
        #[arg(long, value_enum, default_value_t = ExportKind::Memory)]
        kind: ExportKind,
        /// Write to this file instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Role rules for `--kind roles` (TOML or JSON, docs/roles.md).
        #[arg(long)]
        roles: Option<PathBuf>,
    },
    /// Start the web server: drag snapshots into the page, share their links.
    Serve {
        /// Address to listen on; 0.0.0.0:7878 shares it with your network, port 0 takes a free
        /// port (the "serving at" line on stdout names it).
        #[arg(long, env = "SNAPVIEW_ADDR", default_value = "127.0.0.1:7878")]
        addr: String,
        /// Where snapshots and their index are kept [default: $XDG_DATA_HOME/snapview or
        /// ~/.local/share/snapview].
        #[arg(long, env = "SNAPVIEW_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Largest upload accepted, e.g. 8GiB, 500MB, 1000000.
        #[arg(long, env = "SNAPVIEW_MAX_UPLOAD", default_value = "8GiB")]
        max_upload: String,
        /// Memory for parsed snapshots kept ready; the least recently used go first.
        #[arg(long, env = "SNAPVIEW_CACHE", default_value = "4GiB")]
        cache: String,
        /// The URL links should use, if not http://ADDR (behind a proxy, say).
        #[arg(long, env = "SNAPVIEW_PUBLIC_URL")]
        public_url: Option<String>,
        /// Days a deleted snapshot stays in the trash, restorable, before it is removed for
        /// good (checked at start and hourly; 0 empties the trash at each check).
        #[arg(long, env = "SNAPVIEW_TRASH_DAYS", default_value_t = 7)]
        trash_days: u32,
        /// Rebuild the index from the stored files at start, parsing each again (done on its
        /// own when the index is empty but files are stored).
        #[arg(long)]
        reindex: bool,
        /// Open connections at most; a connection past it is answered 503 and closed.
        #[arg(long, env = "SNAPVIEW_MAX_CONNECTIONS", default_value_t = 1024)]
        max_connections: usize,
        /// Uploads received at once at most; past it an upload is answered 503 with
        /// Retry-After (each holds a parser thread and its snapshot in memory).
        #[arg(long, env = "SNAPVIEW_MAX_UPLOADS", default_value_t = 8)]
        max_uploads: usize,
        /// Time a client has to send a request's headers; also how long a kept-alive
        /// connection may sit idle. E.g. 30s, 500ms, 2m.
        #[arg(long, env = "SNAPVIEW_HEADER_TIMEOUT", default_value = "30s")]
        header_timeout: String,
        /// Longest wait for the next bytes of a request body (408 and nothing kept past it).
        #[arg(long, env = "SNAPVIEW_BODY_TIMEOUT", default_value = "30s")]
        body_timeout: String,
        /// On SIGTERM or Ctrl-C, how long requests in flight may take before the server exits.
        #[arg(long, env = "SNAPVIEW_SHUTDOWN_GRACE", default_value = "5s")]
        shutdown_grace: String,
        /// Writes (upload, rename, delete, restore) need `Authorization: Bearer TOKEN` with this
        /// token. Prefer the environment variable: command lines are visible to other users.
        #[arg(long, env = "SNAPVIEW_WRITE_TOKEN", hide_env_values = true)]
        write_token: Option<String>,
        /// A file of named write tokens, one `name:token` per line; the name is recorded with
        /// each write.
        #[arg(long, env = "SNAPVIEW_TOKENS_FILE")]
        tokens_file: Option<PathBuf>,
        /// Every page and API read needs this token (or a write token); pages ask for it once
        /// and keep a session cookie.
        #[arg(long, env = "SNAPVIEW_READ_TOKEN", hide_env_values = true)]
        read_token: Option<String>,
        /// A header a trusted SSO proxy sets to the signed-in user, e.g. X-Forwarded-User: its
        /// value is recorded with each write. Only safe when nothing but the proxy can reach
        /// the port.
        #[arg(long, env = "SNAPVIEW_USER_HEADER")]
        user_header: Option<String>,
        /// Host names the server answers to, comma-separated (e.g. gpu-box,gpu-box.lan), besides
        /// localhost and the public URL's host. Bound to loopback, other names are always refused
        /// (DNS rebinding); given, the check applies to any binding.
        #[arg(long, env = "SNAPVIEW_ALLOWED_HOSTS", value_name = "HOSTS")]
        allowed_hosts: Option<String>,
        /// Snapshot files to import at start; their URLs are printed.
        files: Vec<PathBuf>,
    },
    /// Compare two snapshots: per device peaks and totals, and the stacks whose live memory at
    /// the peak grew or shrank the most. Exit status 1 when a peak grew past --max-peak-growth.
    Diff {
        /// The "before" snapshot: a file, or an id with --server.
        before: String,
        /// The "after" snapshot.
        after: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Fail (exit status 1) when any device's peak allocated bytes grew by more than this
        /// many percent: a memory-regression gate for CI.
        #[arg(long, value_name = "PCT")]
        max_peak_growth: Option<f64>,
        /// Align stacks without line numbers, so edits that shift lines still match.
        #[arg(long)]
        ignore_lines: bool,
        /// Compare snapshots stored on this snapview server, http:// or https:// (BEFORE and
        /// AFTER are ids).
        #[arg(long, env = "SNAPVIEW_SERVER")]
        server: Option<String>,
        /// How many stacks to list each way.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// The token a --server that needs one wants (sent as `Authorization: Bearer`).
        #[arg(long, env = "SNAPVIEW_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Upload a snapshot to a snapview server and print its URL.
    Upload {
        file: PathBuf,
        /// The server's URL, http:// or https:// (certificates are checked against the
        /// system's trust store).
        #[arg(long, env = "SNAPVIEW_SERVER", default_value = "http://127.0.0.1:7878")]
        server: String,
        /// A display name (default: the file name).
        #[arg(long)]
        name: Option<String>,
        /// A group label, e.g. the job whose ranks these are.
        #[arg(long)]
        group: Option<String>,
        /// The server's write token, if it needs one (sent as `Authorization: Bearer`).
        #[arg(long, env = "SNAPVIEW_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ExportKind {
    Segments,
    Memory,
    /// What is live at the dump, rooted by role.
    Roles,
}

/// What a validated command will do.
#[derive(Debug)]
enum Config {
    Summary {
        file: PathBuf,
        json: bool,
    },
    Stats {
        file: PathBuf,
    },
    Live {
        file: PathBuf,
        device: Option<usize>,
        at: String,
        json: bool,
        roles: Option<PathBuf>,
    },
    ExportRoles {
        file: PathBuf,
        output: Option<PathBuf>,
        roles: Option<PathBuf>,
    },
    Export {
        file: PathBuf,
        kind: FoldedKind,
        output: Option<PathBuf>,
    },
    Serve {
        // Boxed: the serve configuration is many times the size of the other commands'.
        config: Box<ServeConfig>,
        files: Vec<PathBuf>,
    },
    Upload {
        file: PathBuf,
        url: String,
        token: Option<String>,
    },
    Diff {
        source: DiffSource,
        json: bool,
        max_peak_growth: Option<f64>,
        ignore_lines: bool,
        top: usize,
    },
}

/// Where the two snapshots of a diff come from.
#[derive(Debug)]
enum DiffSource {
    Files(PathBuf, PathBuf),
    /// `GET {server}/api/compare/{before}/{after}`, with the server's token if it needs one.
    Server {
        url: String,
        token: Option<String>,
    },
}

impl Config {
    fn from_cli(cli: Cli) -> Result<Self, String> {
        let check = |file: &Path| -> Result<(), String> {
            match std::fs::metadata(file) {
                Ok(meta) if meta.is_file() => Ok(()),
                Ok(_) => Err(format!("{} is not a file", file.display())),
                Err(e) => Err(format!("cannot read {}: {e}", file.display())),
            }
        };
        Ok(match cli.command {
            Command::Summary { file, json } => {
                check(&file)?;
                Config::Summary { file, json }
            }
            Command::Stats { file } => {
                check(&file)?;
                Config::Stats { file }
            }
            Command::Live {
                file,
                device,
                at,
                json,
                roles,
            } => {
                check(&file)?;
                Config::Live {
                    file,
                    device,
                    at,
                    json,
                    roles,
                }
            }
            Command::Export {
                file,
                kind,
                output,
                roles,
            } => {
                check(&file)?;
                let kind = match kind {
                    ExportKind::Segments => FoldedKind::Segments,
                    ExportKind::Memory => FoldedKind::Memory,
                    ExportKind::Roles => {
                        return Ok(Config::ExportRoles {
                            file,
                            output,
                            roles,
                        });
                    }
                };
                Config::Export { file, kind, output }
            }
            Command::Serve {
                addr,
                data_dir,
                max_upload,
                cache,
                public_url,
                trash_days,
                reindex,
                max_connections,
                max_uploads,
                header_timeout,
                body_timeout,
                shutdown_grace,
                write_token,
                tokens_file,
                read_token,
                user_header,
                allowed_hosts,
                files,
            } => {
                if max_connections == 0 || max_uploads == 0 {
                    return Err("--max-connections and --max-uploads must be at least 1".to_owned());
                }
                let limits = ConnectionLimits {
                    max_connections,
                    max_uploads,
                    header_timeout: parse_duration(&header_timeout)
                        .map_err(|e| format!("--header-timeout: {e}"))?,
                    body_timeout: parse_duration(&body_timeout)
                        .map_err(|e| format!("--body-timeout: {e}"))?,
                    shutdown_grace: parse_duration(&shutdown_grace)
                        .map_err(|e| format!("--shutdown-grace: {e}"))?,
                };
                let addr: SocketAddr = addr.parse().map_err(|_| {
                    format!("--addr {addr:?} is not an address like 127.0.0.1:7878")
                })?;
                for file in &files {
                    check(file)?;
                }
                let data_dir = match data_dir {
                    Some(dir) => dir,
                    None => default_data_dir()?,
                };
                let public_url = public_url
                    .map(|u| u.trim_end_matches('/').to_owned())
                    .unwrap_or_else(|| default_public_url(addr));
                Config::Serve {
                    config: Box::new(ServeConfig {
                        addr,
                        data_dir,
                        max_upload_bytes: parse_size(&max_upload)
                            .map_err(|e| format!("--max-upload: {e}"))?,
                        cache_budget_bytes: parse_size(&cache)
                            .map_err(|e| format!("--cache: {e}"))?,
                        public_url,
                        trash_days,
                        reindex,
                        limits,
                        access: access_config(
                            write_token,
                            tokens_file,
                            read_token,
                            user_header,
                            allowed_hosts,
                        )?,
                    }),
                    files,
                }
            }
            Command::Diff {
                before,
                after,
                json,
                max_peak_growth,
                ignore_lines,
                server,
                top,
                token,
            } => {
                if let Some(pct) = max_peak_growth
                    && !(pct.is_finite() && pct >= 0.0)
                {
                    return Err(format!(
                        "--max-peak-growth {pct} must be a percentage of 0 or more"
                    ));
                }
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
                            "{}/api/compare/{before}/{after}?ignore_lines={ignore_lines}",
                            server.trim_end_matches('/')
                        );
                        check_server_url(&server)?;
                        DiffSource::Server { url, token }
                    }
                    None => {
                        let (before, after) = (PathBuf::from(before), PathBuf::from(after));
                        check(&before)?;
                        check(&after)?;
                        DiffSource::Files(before, after)
                    }
                };
                Config::Diff {
                    source,
                    json,
                    max_peak_growth,
                    ignore_lines,
                    top,
                }
            }
            Command::Upload {
                file,
                server,
                name,
                group,
                token,
            } => {
                check(&file)?;
                let filename = file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let mut url = format!(
                    "{}/api/snapshots?filename={}",
                    server.trim_end_matches('/'),
                    query_escape(&filename)
                );
                if let Some(name) = name {
                    url.push_str(&format!("&name={}", query_escape(&name)));
                }
                if let Some(group) = group {
                    url.push_str(&format!("&group={}", query_escape(&group)));
                }
                check_server_url(&server)?;
                Config::Upload { file, url, token }
            }
        })
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
    })
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

/// `8GiB`, `500MB`, `1.5G`, `1000000` → bytes (binary units for the `i` forms and for bare
/// K/M/G, as people mean them for memory; decimal for kB/MB/GB).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 8GiB or 500MB"))?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => return Err(format!("unknown unit {other:?} in {text:?}")),
    };
    Ok((value * multiplier) as u64)
}

/// `30s`, `500ms`, `2m`, `1.5` (seconds) → a duration; zero is refused, since every timeout
/// here bounds how long a client may hold something.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let wrong = || format!("{text:?} is not a duration like 30s, 500ms or 2m");
    let value: f64 = number.parse().map_err(|_| wrong())?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(wrong()),
    };
    if !(seconds > 0.0 && seconds <= 86_400.0) {
        return Err(format!("{text:?} must be more than 0 and at most a day"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// Percent-encodes a query value.
fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs the command line; returns the process exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match Config::from_cli(cli).and_then(run) {
        Ok(Outcome::Done) => 0,
        Ok(Outcome::Regression) => 1,
        Err(message) => {
            eprintln!("snapview: error: {message}");
            2
        }
    }
}

/// How a command that did its work ended.
enum Outcome {
    Done,
    /// `diff --max-peak-growth` found a peak that grew too much.
    Regression,
}

fn run(config: Config) -> Result<Outcome, String> {
    if let Config::Diff {
        source,
        json,
        max_peak_growth,
        ignore_lines,
        top,
    } = config
    {
        return run_diff(source, json, max_peak_growth, ignore_lines, top);
    }
    run_other(config).map(|()| Outcome::Done)
}

fn run_other(config: Config) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    let text = match config {
        // Handled by `run`.
        Config::Diff { .. } => String::new(),
        Config::Serve { config, files } => return serve(*config, files),
        Config::Upload { file, url, token } => upload(&file, &url, token.as_deref())?,
        Config::Summary { file, json } => {
            let snapshot = load_with_progress(&file)?;
            let analysis = Analysis::new(&snapshot);
            let summary = Summary::new(&snapshot, &analysis);
            if json {
                let mut text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
                text.push('\n');
                text
            } else {
                summary_text(&file, &snapshot, &summary)
            }
        }
        Config::Stats { file } => torch_text::stats(&load_with_progress(&file)?)
            .map_err(|e| format!("{}: {e}", file.display()))?,
        Config::Live {
            file,
            device,
            at,
            json,
            roles,
        } => {
            let rules = roles_commands::read_rules(roles.as_deref())?;
            let snapshot = load_with_progress(&file)?;
            roles_commands::live_command(&snapshot, device, &at, json, &rules)?
        }
        Config::ExportRoles {
            file,
            output,
            roles,
        } => {
            let rules = roles_commands::read_rules(roles.as_deref())?;
            let text = roles_commands::folded_by_role(&load_with_progress(&file)?, &rules);
            if let Some(output) = output {
                return std::fs::write(&output, text)
                    .map_err(|e| format!("cannot write {}: {e}", output.display()));
            }
            text
        }
        Config::Export { file, kind, output } => {
            let text = torch_text::folded(&load_with_progress(&file)?, kind)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            if let Some(output) = output {
                return std::fs::write(&output, text)
                    .map_err(|e| format!("cannot write {}: {e}", output.display()));
            }
            text
        }
    };
    match out.write_all(text.as_bytes()) {
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| e.to_string()),
    }
}

/// Loads a snapshot, drawing a progress bar on stderr if it takes over a second and stderr is a
/// terminal.
pub fn load_with_progress(file: &Path) -> Result<Snapshot, String> {
    let total = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let show = std::io::stderr().is_terminal();
    let drawn = std::cell::Cell::new(false);
    let progress = |read: u64| {
        if show && started.elapsed() > Duration::from_secs(1) {
            draw_progress(file, read, total);
            drawn.set(true);
        }
    };
    let options = LoadOptions {
        progress: Some(&progress),
        ..LoadOptions::default()
    };
    let result = load_path(file, options);
    if drawn.get() {
        eprint!("\r\x1b[2K");
    }
    result.map_err(|e| format!("{}: {e}", file.display()))
}

fn draw_progress(file: &Path, read: u64, total: u64) {
    const WIDTH: u64 = 30;
    let fraction = if total == 0 {
        1.0
    } else {
        read as f64 / total as f64
    };
    let filled = ((fraction.min(1.0) * WIDTH as f64) as u64).min(WIDTH);
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    eprint!(
        "\r\x1b[2Kreading {name} [{}{}] {:>3.0}% {} of {}",
        "#".repeat(filled as usize),
        " ".repeat((WIDTH - filled) as usize),
        fraction * 100.0,
        bytes(read),
        bytes(total)
    );
}

/// The human-readable summary.
fn summary_text(file: &Path, snapshot: &Snapshot, summary: &Summary) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let encoding = match snapshot.source.pickle_protocol {
        Some(protocol) => format!("pickle protocol {protocol}"),
        None => "JSON".to_owned(),
    };
    let _ = writeln!(
        s,
        "{} — {}, {}{}",
        file.display(),
        encoding,
        bytes(size),
        match snapshot.source.compression {
            crate::snapshot::Compression::None => "",
            crate::snapshot::Compression::Gzip => ", gzip",
            crate::snapshot::Compression::Zstd => ", zstd",
        }
    );
    let _ = writeln!(
        s,
        "segments {}, blocks {}",
        count(summary.segments as u64),
        count(summary.blocks as u64)
    );
    for device in &summary.devices {
        let trace = snapshot.trace(device.device);
        let start = trace.time_us.first().copied().unwrap_or(0);
        let at = |event: Option<usize>| match event {
            None => "before the first event".to_owned(),
            Some(i) if trace.has_time => format!(
                "at event {} ({} into the trace)",
                count(i as u64),
                duration_us(trace.time_us[i] - start)
            ),
            Some(i) => format!("at event {}", count(i as u64)),
        };
        let _ = writeln!(s, "\ndevice {}", device.device);
        let actions: Vec<String> = device
            .actions
            .iter()
            .map(|(name, n)| format!("{name} {}", count(*n as u64)))
            .collect();
        let _ = writeln!(
            s,
            "  trace entries    {}{}",
            count(device.trace_entries as u64),
            if actions.is_empty() {
                String::new()
            } else {
                format!("  ({})", actions.join(", "))
            }
        );
        let _ = writeln!(
            s,
            "  peak allocated   {}  {}",
            bytes(device.peak_allocated_bytes),
            at(device.peak_event_index)
        );
        let _ = writeln!(
            s,
            "  peak reserved    {}  {}",
            bytes(device.peak_reserved_bytes),
            at(device.peak_reserved_event_index)
        );
        let stats = &device.segment_stats;
        let _ = writeln!(
            s,
            "  at the snapshot  allocated {}, reserved {} in {} segments, free {} (largest block {}), rounding waste {}",
            bytes(device.allocated_bytes_at_snapshot),
            bytes(device.reserved_bytes_at_snapshot),
            count(device.segments as u64),
            bytes(stats.external_free),
            bytes(stats.largest_free_block),
            bytes(stats.internal_free)
        );
        if device.oom_events.is_empty() {
            let _ = writeln!(s, "  OOM events       none");
        } else {
            for oom in &device.oom_events {
                let _ = writeln!(
                    s,
                    "  OOM              {} requested, {} free on the device, {}",
                    bytes(oom.requested_bytes),
                    oom.device_free_bytes.map_or("unknown".to_owned(), bytes),
                    at(Some(oom.event_index))
                );
            }
        }
        if !device.top_stacks_at_peak.is_empty() && device.peak_allocated_bytes > 0 {
            let _ = writeln!(s, "  top stacks at the peak:");
            for stack in &device.top_stacks_at_peak {
                let share = stack.bytes as f64 * 100.0 / device.peak_allocated_bytes as f64;
                let frames: Vec<&str> = stack
                    .frames
                    .iter()
                    .take(4)
                    .map(|f| short_frame(f))
                    .collect();
                let more = stack.frames.len().saturating_sub(4);
                let _ = writeln!(
                    s,
                    "    {:>10} {:>5.1}% {:>7} allocs  {}{}",
                    bytes(stack.bytes),
                    share,
                    count(stack.allocations as u64),
                    frames.join(" ← "),
                    if more > 0 {
                        format!(" ← … {more} more")
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    if !summary.notes.is_empty() {
        let _ = writeln!(s, "\nnotes:");
        for note in &summary.notes {
            let _ = writeln!(s, "  - {}", note.message);
        }
    }
    s
}

/// `path/to/file.py:12:name` as `file.py:12:name`.
fn short_frame(frame: &str) -> &str {
    match frame.find(':') {
        Some(colon) => {
            let path = &frame[..colon];
            match path.rfind('/') {
                Some(slash) => &frame[slash + 1..],
                None => frame,
            }
        }
        None => frame,
    }
}

/// `snapview serve`: opens the store, imports FILEs, prints the URL, serves until Ctrl-C.
fn serve(config: ServeConfig, files: Vec<PathBuf>) -> Result<(), String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "snapview=info,tower_http=warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in a log file or journald.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
        println!("snapview is serving at {}/", config.public_url);
        crate::server::serve(state, listener)
            .await
            .map_err(|e| format!("the server failed: {e}"))
    });
    // Dropping the runtime would wait for every blocking task; the grace period is over, so
    // what is still running (a store write at most) gets a moment, not forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

/// `http://HOST:PORT` for a server bound to `addr`, when `--public-url` does not say otherwise.
fn default_public_url(addr: SocketAddr) -> String {
    let host = if addr.ip().is_unspecified() {
        "localhost".to_owned()
    } else {
        addr.ip().to_string()
    };
    format!("http://{host}:{}", addr.port())
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
}

fn run_diff(
    source: DiffSource,
    json: bool,
    max_peak_growth: Option<f64>,
    ignore_lines: bool,
    top: usize,
) -> Result<Outcome, String> {
    let (names, diff) = match source {
        DiffSource::Files(before, after) => {
            let load = |file: &Path| -> Result<(Snapshot, Analysis, Summary), String> {
                let snapshot = load_with_progress(file)?;
                let analysis = Analysis::new(&snapshot);
                let summary = Summary::new(&snapshot, &analysis);
                Ok((snapshot, analysis, summary))
            };
            let (b, a) = (load(&before)?, load(&after)?);
            let options = crate::analysis::diff::DiffOptions {
                ignore_lines,
                ..Default::default()
            };
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
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.to_string()),
        _ => {}
    }
    Ok(if regressed.is_empty() {
        Outcome::Done
    } else {
        Outcome::Regression
    })
}

fn diff_text(
    before: &str,
    after: &str,
    diff: &crate::analysis::diff::SnapshotDiff,
    top: usize,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "before: {before}\nafter:  {after}");
    let signed = |delta: i64| {
        if delta >= 0 {
            format!("+{}", bytes(delta as u64))
        } else {
            format!("-{}", bytes(delta.unsigned_abs()))
        }
    };
    for device in &diff.devices {
        let _ = writeln!(
            s,
            "\ncuda:{} → cuda:{}",
            device.before_device, device.after_device
        );
        let row = |s: &mut String, label: &str, b: u64, a: u64| {
            let pct = if b > 0 {
                format!("  ({:+.1}%)", (a as f64 - b as f64) * 100.0 / b as f64)
            } else {
                String::new()
            };
            let _ = writeln!(s, "  {label:<17}{:>10} → {:<10}{pct}", bytes(b), bytes(a));
        };
        row(
            &mut s,
            "peak allocated",
            device.before.peak_allocated_bytes,
            device.after.peak_allocated_bytes,
        );
        row(
            &mut s,
            "peak reserved",
            device.before.peak_reserved_bytes,
            device.after.peak_reserved_bytes,
        );
        row(
            &mut s,
            "allocated at end",
            device.before.allocated_bytes_at_snapshot,
            device.after.allocated_bytes_at_snapshot,
        );
        row(
            &mut s,
            "reserved at end",
            device.before.reserved_bytes_at_snapshot,
            device.after.reserved_bytes_at_snapshot,
        );
        let _ = writeln!(
            s,
            "  {:<17}{:>10} → {}",
            "allocations",
            count(device.before.allocations as u64),
            count(device.after.allocations as u64)
        );
        for (title, growing) in [
            ("grew most at the peak", true),
            ("shrank most at the peak", false),
        ] {
            let listed: Vec<_> = device
                .stacks
                .iter()
                .filter(|st| (st.delta_bytes > 0) == growing)
                .take(top)
                .collect();
            if listed.is_empty() {
                continue;
            }
            let _ = writeln!(s, "  {title}:");
            for stack in listed {
                // Innermost frames say most: show the last few, innermost first.
                let frames: Vec<&str> = stack
                    .frames
                    .iter()
                    .rev()
                    .take(4)
                    .map(String::as_str)
                    .collect();
                let more = stack.frames.len().saturating_sub(4);
                let _ = writeln!(
                    s,
                    "    {:>11}  {} → {}  {}{}",
                    signed(stack.delta_bytes),
                    bytes(stack.before_bytes),
                    bytes(stack.after_bytes),
                    frames.join(" ← "),
                    if more > 0 {
                        format!(" ← … {more} more")
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    s
}

/// `--server` must name an http:// or https:// server.
fn check_server_url(server: &str) -> Result<(), String> {
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
    use ureq::tls::{RootCerts, TlsConfig};
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}

/// Why the server could not be reached, in words a user can act on.
fn unreachable(error: ureq::Error) -> String {
    let text = error.to_string();
    if text.contains("certificate") {
        format!(
            "cannot reach the server: {text} (the server's HTTPS certificate is not one this machine trusts: add its authority to the system's trust store, or use http://)"
        )
    } else {
        format!("cannot reach the server: {text}")
    }
}

/// The `Authorization` header value for a token given with --token or SNAPVIEW_TOKEN.
fn bearer(token: Option<&str>) -> Option<String> {
    token
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| format!("Bearer {t}"))
}

fn http_get_json(url: &str, token: Option<&str>) -> Result<serde_json::Value, String> {
    let mut request = http_agent().get(url);
    if let Some(authorization) = bearer(token) {
        request = request.header("Authorization", authorization);
    }
    let response = request.call().map_err(unreachable)?;
    json_answer(response, 256 << 20, bearer(token).is_some())
}

/// `snapview upload`: streams the file to the server and returns the line to print.
fn upload(file: &Path, url: &str, token: Option<&str>) -> Result<String, String> {
    let reader =
        std::fs::File::open(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut request = http_agent()
        .post(url)
        .header("Content-Type", "application/octet-stream")
        // The server answers a refusal (no token, say) before reading the body: without this,
        // the refusal is lost in a broken pipe while the file is still being sent.
        .header("Expect", "100-continue");
    if let Some(authorization) = bearer(token) {
        request = request.header("Authorization", authorization);
    }
    let response = request
        // A file body is sent with its Content-Length, so a server refuses one over its limit
        // (413) before the body, instead of cutting the upload off mid-stream.
        .send(&reader)
        .map_err(unreachable)?;
    let json = json_answer(response, 16 << 20, bearer(token).is_some())?;
    Ok(format!("{}\n", json["url"].as_str().unwrap_or_default()))
}

/// The JSON body of a server's answer (at most `limit` bytes), or the error it reports;
/// `sent_token` says whether the request carried one, to tell the user what to do on a 401.
fn json_answer(
    mut response: ureq::http::Response<ureq::Body>,
    limit: u64,
    sent_token: bool,
) -> Result<serde_json::Value, String> {
    let status = response.status();
    let body = response
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_string()
        .map_err(|e| format!("unreadable answer from the server: {e}"))?;
    let json: serde_json::Value = match serde_json::from_str(&body) {
        Ok(json) => json,
        // A proxy in front may answer 401 with its own page; the hint still applies.
        Err(_) if status == ureq::http::StatusCode::UNAUTHORIZED => serde_json::Value::Null,
        Err(_) => {
            return Err(format!(
                "the server answered {status} without JSON: {}",
                body.chars().take(200).collect::<String>()
            ));
        }
    };
    let message = json["error"]["message"]
        .as_str()
        .map_or_else(|| format!("the server answered {status}"), str::to_owned);
    if status.is_success() {
        Ok(json)
    } else if status == ureq::http::StatusCode::UNAUTHORIZED && !sent_token {
        Err(format!(
            "the server needs a token: set SNAPVIEW_TOKEN (or pass --token) ({message})"
        ))
    } else if status == ureq::http::StatusCode::UNAUTHORIZED {
        Err(format!(
            "the server refused the token from SNAPVIEW_TOKEN / --token: {message}"
        ))
    } else {
        Err(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["", "0", "0s", "-1s", "5 parsecs", "2d", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
