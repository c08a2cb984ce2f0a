//! Parsing an upload: on a thread of its own as its bytes land in its file (or from the stored
//! file, when it was hashed first), under the server's limits and parse-memory budget.

use crate::analysis::roles::UserRules;
use crate::pickle::Landing;
use crate::server::AppState;
use crate::server::analysed::AnalysedSnapshot;
use crate::server::error::ApiError;
use crate::snapshot::LoadError;
use std::sync::Arc;

pub(super) type ParseResult = Result<AnalysedSnapshot, LoadError>;

/// How an upload is read: a compressed upload may expand to no more than an uncompressed one
/// may be (`--max-upload`), besides the reader's ratio and string bounds; its trace may hold
/// `--max-events`; and the events it holds are charged to the server's `--parse-memory` as
/// they are found (`charge`, released when the parse and its analysis are done).
fn upload_load_options<'a>(
    reading: &Reading,
    charge: &'a crate::server::budget::Charge,
) -> crate::snapshot::LoadOptions<'a> {
    crate::snapshot::LoadOptions {
        limits: crate::pickle::Limits::for_input_limit(reading.max_upload_bytes),
        max_events: reading.max_events,
        events: Some(charge),
        progress: None,
        ..crate::snapshot::LoadOptions::default()
    }
}

/// What reading an upload needs from the server: its limits, rules and memory budget.
#[derive(Clone)]
pub(super) struct Reading {
    max_upload_bytes: u64,
    max_events: u64,
    rules: Arc<UserRules>,
    budget: Arc<crate::server::budget::ParseBudget>,
    /// The upload's size, when its request says it.
    expected_bytes: Option<u64>,
}

impl Reading {
    pub(super) fn of(state: &AppState) -> Self {
        Self {
            max_upload_bytes: state.config.max_upload_bytes,
            max_events: state.config.limits.max_events,
            rules: state.config.roles.clone(),
            budget: state.parse_budget.clone(),
            expected_bytes: None,
        }
    }

    /// This reading, for an upload of `bytes` (when known).
    pub(super) fn expecting(self, bytes: Option<u64>) -> Self {
        Self {
            expected_bytes: bytes,
            ..self
        }
    }

    /// The most bytes this upload will land, when its request says (a multipart form's
    /// length is its file's and a little more).
    pub(super) fn expected_bytes(&self) -> Option<u64> {
        self.expected_bytes
    }

    /// Parses (with `read`) and analyses under this server's limits, holding a share of its
    /// parse memory until done (the caller's thread: a parser thread or a blocking one).
    pub(super) fn load(
        &self,
        read: impl FnOnce(
            crate::snapshot::LoadOptions<'_>,
        )
            -> Result<(crate::snapshot::Snapshot, crate::analysis::ReplaySeed), LoadError>,
    ) -> ParseResult {
        let charge = self.budget.charge("this upload");
        let _timed = crate::server::ops::ParseTimer::start("upload");
        let parsed = read(upload_load_options(self, &charge))?;
        Ok(AnalysedSnapshot::new(parsed, &self.rules))
    }
}

/// Starts parsing the upload landing in `file` (sized to `room` bytes, 0 if its size is not
/// known), on a thread of its own, reading each byte as soon as it has landed: a large
/// uncompressed pickle on every core, anything else as a stream. The parser waits whenever
/// the client is slow, and on tokio's blocking pool enough such uploads would leave no thread
/// for the file writes and store calls every request needs (the server stopped answering at
/// ~513 slow uploads). Upload slots bound how many of these threads exist.
pub(super) fn spawn_parser(
    reading: Reading,
    file: std::fs::File,
    room: u64,
    landing: Arc<Landing>,
) -> Result<tokio::sync::oneshot::Receiver<ParseResult>, ApiError> {
    let (answer, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("snapview-upload-parser".into())
        .spawn(move || {
            let parsed = reading
                .load(|options| crate::analysis::load_landing(&file, room, &landing, options));
            // Closed before the answer: whoever waits for it may count on the file's space.
            drop(file);
            // The upload may have been dropped meanwhile; then nobody wants the answer.
            let _ = answer.send(parsed);
        })
        .map_err(|e| ApiError::internal("cannot start a parser thread", e))?;
    Ok(result)
}

pub(super) async fn join_parser(
    parser: tokio::sync::oneshot::Receiver<ParseResult>,
) -> Result<ParseResult, ApiError> {
    parser
        .await
        .map_err(|e| ApiError::internal("the parser thread stopped without an answer", e))
}

/// A reader's refusal as the client sees it (see [`ApiError::unreadable`]).
pub(super) fn refused(error: crate::snapshot::LoadError) -> ApiError {
    ApiError::unreadable(error)
}

/// Bytes of an upload's start that tell a wrong file type (a PDF, a zip, text) for certain.
pub(super) const SNIFF_BYTES: usize = 16;

/// Refuses an upload whose first bytes are no snapshot's, at once and in the handler itself, so
/// a large wrong file is refused from its start however fast its bytes arrive (the parser
/// thread would say the same, but only once it has been scheduled). A start that only looks
/// cut short is left to the parser.
pub(super) fn refuse_wrong_file_type(head: &[u8]) -> Result<(), ApiError> {
    match crate::pickle::detect_encoding(head) {
        Err(error @ crate::pickle::PickleError::NotASnapshot(_)) => {
            Err(ApiError::NotASnapshot(error.to_string()))
        }
        _ => Ok(()),
    }
}
