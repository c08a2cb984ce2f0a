//! The command line's arguments: clap's structs, with sizes and durations typed by their value
//! parsers (in `parse`), and `ValidatedCommand`, the checked form each command runs from (built
//! in `validate`; `--help` texts and the serve flags are the user's interface: change with
//! care).

mod parse;
mod validate;

pub(super) use validate::default_public_url;

use crate::analysis::diff::{Align, DiffOptions};
use crate::server::{ConnectionLimits, ServeConfig};
use crate::torch_text::FoldedKind;
use clap::{Args, Parser, Subcommand, ValueEnum};
use parse::{
    at_least_one, blobs_url, database_url, parse_device, percentage, size, socket_address, timeout,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "snapview",
    version,
    about = "Look inside PyTorch CUDA memory snapshots",
    long_about = "Look inside PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot).\n\nReads pickle (protocols 2-5), gzip- or zstd-compressed pickle, and the JSON form. Never runs code from a file."
)]
pub(super) struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Trace events a snapshot may hold; a file with more is refused with a message (a pickle
    /// can repeat one entry for 2 bytes each, so its size says little). Every command that
    /// reads a file, and `serve` for uploads.
    #[arg(
        long,
        global = true,
        env = "SNAPVIEW_MAX_EVENTS",
        default_value_t = crate::snapshot::DEFAULT_MAX_EVENTS
    )]
    max_events: u64,
    /// Threads that read a large snapshot, uncompressed, gzip or zstd (default: the cores this
    /// process may use, from its CPU affinity and cgroup quota; 1 reads on one thread). Every
    /// command that reads a file, and `serve`.
    #[arg(long, global = true, env = "SNAPVIEW_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Read the file even when the cache holds what an earlier read of it computed
    /// (`$XDG_CACHE_HOME/snapview`, keyed by the file's path, size and modification time).
    #[arg(long, global = true, env = "SNAPVIEW_NO_CACHE")]
    no_cache: bool,
}

impl Cli {
    /// `--no-cache`.
    pub(super) fn no_cache(&self) -> bool {
        self.no_cache
    }

    /// `--threads`, if given.
    pub(super) fn threads(&self) -> Option<usize> {
        self.threads.map(usize::from)
    }

    /// `--max-events`, for the commands that read files.
    pub(super) fn max_events(&self) -> u64 {
        self.max_events
    }

    /// Whether the command sets up its own log (`serve` and `open`, which run a server).
    pub(super) fn logs_itself(&self) -> bool {
        matches!(self.command, Command::Serve(_) | Command::Open { .. })
    }
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
        /// Your own role rules: a TOML or JSON file (docs/roles.md).
        #[arg(long)]
        roles: Option<PathBuf>,
    },
    /// The allocations live at one moment, with their role (parameter, gradient, optimizer_state,
    /// activation, temporary, input, unknown), why, and their frames; and the bytes per role.
    Live(LiveArgs),
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
        /// Only this device's segments: a number, or `host` for pinned host memory. Default:
        /// every CUDA device, as torch's `_memory_viz` (which reads `segments` only).
        #[arg(long, value_parser = parse_device)]
        device: Option<DeviceArg>,
    },
    /// Show one file's pages on this machine only, keeping nothing: a server on 127.0.0.1 and a
    /// free port, its URL printed and opened in your browser, a private temporary folder
    /// removed at exit (Ctrl-C). For a snapshot that may not leave this machine.
    Open {
        /// A snapshot file (.pickle, .pickle.gz, .pickle.zst or .json); read where it is.
        file: PathBuf,
        /// Print the URL without starting a browser.
        #[arg(long)]
        no_browser: bool,
    },
    /// Start the web server: drag snapshots into the page, share their links.
    Serve(ServeArgs),
    /// Compare two snapshots: per device peaks and totals, and the stacks whose live memory at
    /// the peak grew or shrank the most. Exit status 1 when a peak grew past --max-peak-growth.
    Diff(DiffArgs),
    /// Upload a snapshot to a snapview server and print its URL.
    Upload(UploadArgs),
}

// `snapview live`'s arguments: one type, so that checking them passes them on as they are.
#[derive(Debug, Args)]
pub(super) struct LiveArgs {
    pub(super) file: PathBuf,
    /// The device: a number, or `host` for pinned host memory (default: the first with
    /// memory).
    #[arg(long, value_parser = parse_device)]
    pub(super) device: Option<DeviceArg>,
    /// `peak`, `end`, or an event index.
    #[arg(long, default_value = "end")]
    pub(super) at: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(super) json: bool,
    /// Your own role rules: a TOML or JSON file (docs/roles.md).
    #[arg(long)]
    pub(super) roles: Option<PathBuf>,
}

/// `snapview serve`'s flags.
#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on; 0.0.0.0:7878 shares it with your network, port 0 takes a free
    /// port (the "serving at" line on stdout names it).
    #[arg(long, env = "SNAPVIEW_ADDR", default_value = "127.0.0.1:7878", value_parser = socket_address)]
    addr: SocketAddr,
    /// Where snapshots and their index are kept [default: $XDG_DATA_HOME/snapview or
    /// ~/.local/share/snapview].
    #[arg(long, env = "SNAPVIEW_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Keep the snapshots' records, the audit log and the leases in this PostgreSQL database
    /// (postgres://USER:PASSWORD@HOST:PORT/DB) instead of SQLite in the data folder, so that
    /// several servers share them. Prefer the environment variable: the URL holds a password.
    #[arg(
        long,
        env = "SNAPVIEW_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true,
        value_parser = database_url
    )]
    database: Option<String>,
    /// Keep the snapshot files and their stored indexes in S3-compatible object storage
    /// (s3://BUCKET/PREFIX) instead of the data folder; the endpoint, region and keys come
    /// from the AWS_* environment variables.
    #[arg(long, env = "SNAPVIEW_BLOBS", value_name = "URL", value_parser = blobs_url)]
    blobs: Option<String>,
    /// Where copies of the files from --blobs are kept while they are read [default:
    /// DATA_DIR/cache]. Only used with --blobs.
    #[arg(long, env = "SNAPVIEW_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Disk the --cache-dir copies may fill; past it the least recently used go. Only used
    /// with --blobs.
    #[arg(long, env = "SNAPVIEW_CACHE_SIZE", default_value = "20GiB", value_parser = size)]
    cache_size: u64,
    /// Largest upload accepted, e.g. 8GiB, 500MB, 1000000.
    #[arg(long, env = "SNAPVIEW_MAX_UPLOAD", default_value = "8GiB", value_parser = size)]
    max_upload: u64,
    /// Memory for parsed snapshots kept ready; the least recently used go first.
    #[arg(long, env = "SNAPVIEW_CACHE", default_value = "4GiB", value_parser = size)]
    cache: u64,
    /// Memory that parses and rules re-analyses in flight may hold together, charged as
    /// their events are found (96 bytes each); past it they wait, then answer 503.
    #[arg(long, env = "SNAPVIEW_PARSE_MEMORY", default_value = "5GiB", value_parser = size)]
    parse_memory: u64,
    /// The URL links should use, if not http://ADDR (behind a proxy, say).
    #[arg(long, env = "SNAPVIEW_PUBLIC_URL")]
    public_url: Option<String>,
    /// Days a deleted snapshot stays in the trash, restorable, before it is removed for
    /// good (checked at start and hourly; 0 empties the trash at each check).
    #[arg(long, env = "SNAPVIEW_TRASH_DAYS", default_value_t = 7)]
    trash_days: u32,
    /// Role rules for every snapshot: a TOML or JSON file (docs/roles.md). Checked at start:
    /// an invalid file stops the server with the parser's message.
    #[arg(long, env = "SNAPVIEW_ROLES")]
    roles: Option<PathBuf>,
    /// Rebuild the index from the stored files at start, parsing each again (done on its
    /// own when the index is empty but files are stored).
    #[arg(long)]
    reindex: bool,
    #[command(flatten)]
    connections: ConnectionFlags,
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
    /// Wrong tokens one client address may send a minute; past it every token it sends
    /// waits (429) until it slows down. Behind a reverse proxy every client is the proxy,
    /// so set it higher or 0 there; 0: no limit.
    #[arg(
        long,
        env = "SNAPVIEW_MAX_TOKEN_FAILURES",
        default_value_t = crate::server::access::DEFAULT_MAX_TOKEN_FAILURES
    )]
    max_token_failures: u32,
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
    /// The peers --user-header is accepted from: IP addresses or blocks, comma-separated
    /// (e.g. 10.0.0.5,10.1.0.0/16) [default: loopback only]. From any other peer a request
    /// carrying the header is refused (403).
    #[arg(long, env = "SNAPVIEW_TRUSTED_PROXIES", value_name = "IPS")]
    trusted_proxies: Option<String>,
    /// Origins that may show the pages in a frame, comma-separated (e.g.
    /// https://notebook.example.com, http://localhost:*, vscode-webview:, 'self')
    /// [default: none, the pages cannot be framed].
    #[arg(long, env = "SNAPVIEW_FRAME_ANCESTORS", value_name = "ORIGINS")]
    frame_ancestors: Option<String>,
    /// A token that opens only /metrics and /readyz (`Authorization: Bearer`), for a
    /// Prometheus scraper or a readiness probe that must not read snapshots. Without it
    /// they follow --read-token as every read does.
    #[arg(long, env = "SNAPVIEW_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// The log on stderr: `text` for a person, `json` for a log pipeline (one object per
    /// line: timestamp, level, target, fields with the message, spans).
    #[arg(long, env = "SNAPVIEW_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// An https:// URL prefix that `POST /api/snapshots/import` may fetch from (e.g.
    /// https://artifacts.example.com/runs/), compared by host, port and whole path segments;
    /// repeatable. Without it only s3:// imports are taken (with the server's AWS_*
    /// credentials).
    #[arg(
        long,
        env = "SNAPVIEW_IMPORT_ALLOW",
        value_name = "URL_PREFIX",
        value_delimiter = ','
    )]
    import_allow: Vec<String>,
    /// Longest one import may take to fetch and read its snapshot (504 and nothing kept past
    /// it), e.g. 1h, 20m.
    #[arg(long, env = "SNAPVIEW_IMPORT_TIMEOUT", default_value = "1h", value_parser = timeout)]
    import_timeout: Duration,
    /// Snapshot files to import at start; their URLs are printed.
    files: Vec<PathBuf>,
}

/// `snapview diff`'s arguments.
#[derive(Debug, Args)]
struct DiffArgs {
    /// The "before" snapshot: a file, or an id with --server.
    before: String,
    /// The "after" snapshot.
    after: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Fail (exit status 1) when any device's peak allocated bytes grew by more than this
    /// many percent: a memory-regression gate for CI.
    #[arg(long, value_name = "PCT", value_parser = percentage)]
    max_peak_growth: Option<f64>,
    /// Align stacks without line numbers, so edits that shift lines still match.
    #[arg(long)]
    ignore_lines: bool,
    /// How stacks are lined up: `auto` pairs outer callers that differ (a no_grad wrapper,
    /// another entry point) when many stacks below them match; `off` matches frame for
    /// frame; a number N drops the N outermost frames of every stack.
    #[arg(long, default_value = "auto", value_name = "auto|off|N", value_parser = Align::parse)]
    align: Align,
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
}

/// `snapview upload`'s arguments.
#[derive(Debug, Args)]
struct UploadArgs {
    /// The snapshot file; or s3://bucket/key, or an https:// URL the server allows
    /// (--import-allow), which the server fetches itself with its own credentials.
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
    /// Role rules for this snapshot in place of the server's: a TOML or JSON file
    /// (docs/roles.md), sent once the upload is stored (`PUT /api/snapshots/{id}/rules`).
    #[arg(long)]
    roles: Option<PathBuf>,
    /// The server's write token, if it needs one (sent as `Authorization: Bearer`).
    #[arg(long, env = "SNAPVIEW_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Most redirects followed (307 and 308 only, which resend the file; a 301, 302 or
    /// 303 is an error, as it would drop the upload).
    #[arg(long, env = "SNAPVIEW_MAX_REDIRECTS", default_value_t = 5)]
    max_redirects: usize,
}

/// `serve`'s bounds on what clients may hold: connections, uploads, their pace, the shutdown's
/// grace (the server's [`ConnectionLimits`], less the memory ones).
#[derive(Debug, Args)]
struct ConnectionFlags {
    /// Open connections at most; past it a connection idle or waiting on its client for a
    /// second is closed to make room, else the new one is answered 503 and closed.
    #[arg(long, env = "SNAPVIEW_MAX_CONNECTIONS", default_value_t = 1024, value_parser = at_least_one)]
    max_connections: usize,
    /// Open connections from one client address at most (the TCP peer: behind a reverse
    /// proxy every client is the proxy, so set it high or 0 there); 0: no limit.
    #[arg(
        long,
        env = "SNAPVIEW_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 64
    )]
    max_connections_per_client: usize,
    /// Uploads received at once at most; past it an upload is answered 503 with
    /// Retry-After (each holds a parser thread and its snapshot in memory).
    #[arg(long, env = "SNAPVIEW_MAX_UPLOADS", default_value_t = 8, value_parser = at_least_one)]
    max_uploads: usize,
    /// Uploads received at once from one client address at most (the TCP peer, as for
    /// --max-connections-per-client); 0: no limit.
    #[arg(long, env = "SNAPVIEW_MAX_UPLOADS_PER_CLIENT", default_value_t = 4)]
    max_uploads_per_client: usize,
    /// Slowest average an upload may arrive at, per second waited for it, after its first
    /// 10 s (408 and nothing kept below it), e.g. 64KiB; 0: no minimum.
    #[arg(long, env = "SNAPVIEW_MIN_UPLOAD_RATE", default_value = "64KiB", value_parser = size)]
    min_upload_rate: u64,
    /// Time a client has to send a request's headers; also how long a kept-alive
    /// connection may sit idle. E.g. 30s, 500ms, 2m.
    #[arg(long, env = "SNAPVIEW_HEADER_TIMEOUT", default_value = "30s", value_parser = timeout)]
    header_timeout: Duration,
    /// Longest wait for the next bytes of a request body (408 and nothing kept past it).
    #[arg(long, env = "SNAPVIEW_BODY_TIMEOUT", default_value = "30s", value_parser = timeout)]
    body_timeout: Duration,
    /// Longest a response may wait for its client to accept any of its bytes; past it the
    /// connection is dropped. E.g. 30s.
    #[arg(long, env = "SNAPVIEW_SEND_TIMEOUT", default_value = "30s", value_parser = timeout)]
    send_timeout: Duration,
    /// Slowest a client may accept a response, per second it keeps the server waiting,
    /// after its first 10 s of waiting (the connection is dropped below it), e.g. 16KiB;
    /// 0: no minimum.
    #[arg(long, env = "SNAPVIEW_MIN_SEND_RATE", default_value = "16KiB", value_parser = size)]
    min_send_rate: u64,
    /// On SIGTERM or Ctrl-C, how long requests in flight may take before the server exits.
    #[arg(long, env = "SNAPVIEW_SHUTDOWN_GRACE", default_value = "5s", value_parser = timeout)]
    shutdown_grace: Duration,
}

impl ConnectionFlags {
    fn limits(self, parse_memory_bytes: u64, max_events: u64) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            max_uploads: self.max_uploads,
            max_uploads_per_client: self.max_uploads_per_client,
            min_upload_rate: self.min_upload_rate,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            send_timeout: self.send_timeout,
            min_send_rate: self.min_send_rate,
            shutdown_grace: self.shutdown_grace,
            parse_memory_bytes,
            max_events,
        }
    }
}

/// `serve --log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ExportKind {
    Segments,
    Memory,
    /// What is live at the dump, rooted by role.
    Roles,
}

/// `--device`: a device ordinal, or `host` for pinned host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeviceArg {
    Ordinal(usize),
    Host,
}

/// What a validated command will do.
#[derive(Debug)]
pub(super) enum ValidatedCommand {
    Summary {
        file: PathBuf,
        json: bool,
        roles: Option<PathBuf>,
    },
    Stats {
        file: PathBuf,
    },
    Live(LiveArgs),
    ExportRoles {
        file: PathBuf,
        output: Option<PathBuf>,
        roles: Option<PathBuf>,
    },
    Export {
        file: PathBuf,
        kind: FoldedKind,
        output: Option<PathBuf>,
        device: Option<DeviceArg>,
    },
    Open {
        file: PathBuf,
        no_browser: bool,
    },
    Serve {
        // Boxed: the serve configuration is many times the size of the other commands'.
        config: Box<ServeConfig>,
        files: Vec<PathBuf>,
        log_format: LogFormat,
    },
    Upload {
        file: PathBuf,
        /// Where the file is sent: `{server}/api/snapshots?filename=…`.
        url: String,
        /// `--server`, where `--roles` go once the snapshot is stored.
        server: String,
        roles: Option<PathBuf>,
        token: Option<String>,
        max_redirects: usize,
    },
    /// `upload s3://…` (or `https://…`): the server fetches the snapshot itself.
    Import {
        /// `{server}/api/snapshots/import`.
        url: String,
        /// The JSON body: `url`, and `name` and `group` when given.
        request: String,
        server: String,
        roles: Option<PathBuf>,
        token: Option<String>,
        max_redirects: usize,
    },
    Diff {
        source: DiffSource,
        json: bool,
        max_peak_growth: Option<f64>,
        options: DiffOptions,
        top: usize,
    },
}

/// Where the two snapshots of a diff come from.
#[derive(Debug)]
pub(super) enum DiffSource {
    Files(PathBuf, PathBuf),
    /// `GET {server}/api/compare/{before}/{after}`, with the server's token if it needs one.
    Server {
        url: String,
        token: Option<String>,
    },
}
