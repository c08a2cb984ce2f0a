//! What handlers take from a request, parsed and checked once: the live snapshot a path names
//! (id parsed, record looked up, analysis loaded from the cache), and the device and moment a
//! view's query asks for, with the server's defaults applied here and nowhere else.
//!
//! # What a replica sees of writes made through another
//!
//! Replicas share the store (database and blobs) and nothing else; each keeps its own cache of
//! analysed snapshots (`cache.rs`). Every request for a snapshot looks its record up in the
//! store first ([`StoredSnapshot::find`]; the list and groups read the store too), so:
//!
//! - **delete, restore, purge**: seen by the next request, through any replica: a snapshot
//!   deleted through B answers 410 through A at once (404 once purged), whatever A's cache
//!   holds, and one restored through B is served by A again (from its cache when still there:
//!   the bytes, and so the analysis, are the same);
//! - **rename, group**: the name and group come from the record, never from the cache: seen at
//!   once;
//! - **role rules** (`PUT`/`DELETE .../rules`): the record names the rules that apply, and the
//!   cache entry is good only for the rules it was analysed with (checked by their fingerprint
//!   on every request), so A's next request after a change through B analyses again with B's
//!   rules (from the stored index: the summary is made again, no parse);
//! - **upload**: a new snapshot is in the store, so any replica lists and loads it; its index,
//!   written by the replica that took the upload, is opened by the others when there, else
//!   they parse it under the parse lease (`stored_index::ColdLoad`).
//!
//! A write that lands while a request is already past its look-up (an answer in flight) is
//! seen by the next request, as on a single server.

use super::AppState;
use super::analysed::AnalysedSnapshot;
use super::cache::{LoadProgress, LoadState, Loader};
use super::error::{ApiError, blocking};
use super::store::{Lookup, Record, SnapshotId};
use super::stored_index::ColdLoad;
use crate::analysis::DeviceAnalysis;
use crate::analysis::moment::Moment;
use crate::analysis::roles::UserRules;
use crate::snapshot::{LoadError, LoadOptions};
use axum::extract::{FromRequestParts, Query, RawPathParams};
use axum::http::request::Parts;
use serde::Deserialize;
use std::sync::Arc;

pub fn parse_id(text: &str) -> Result<SnapshotId, ApiError> {
    SnapshotId::parse(text).ok_or_else(|| ApiError::BadId(text.chars().take(64).collect()))
}

/// Where `id` stands in the store, read on a blocking thread.
pub async fn lookup(state: &AppState, id: &SnapshotId) -> Result<Lookup, ApiError> {
    let store = state.store.clone();
    let target = id.clone();
    Ok(blocking(move || store.lookup(&target)).await??)
}

/// The error for a snapshot that is not live: 404 when it was never here (or is purged), 410
/// with what to do when it is in the trash or its file is lost.
pub fn not_live(state: &AppState, id: &SnapshotId, lookup: Lookup) -> ApiError {
    match lookup {
        Lookup::Trashed { record, .. } => ApiError::Gone(format!(
            "snapshot {id} ({}) was deleted: it stays in the trash for {} days after its deletion and can be restored until then (Undo on the list, or POST /api/snapshots/{id}/restore)",
            record.name, state.config.trash_days
        )),
        Lookup::FileMissing(record) => ApiError::Gone(format!(
            "the stored file of snapshot {id} ({}) is missing from the server's disk; upload the same file again to repair it",
            record.name
        )),
        Lookup::Live(_) | Lookup::Absent => ApiError::SnapshotNotFound(id.to_string()),
    }
}

/// The error for an edit (rename, group, rules) whose write found its snapshot not live, by
/// where it stands `now`: a delete that landed first is a conflict (409: nothing changed), not a
/// 404, and so is a delete and restore that both landed while the edit was made.
pub fn edit_refused(state: &AppState, id: &SnapshotId, now: Lookup) -> ApiError {
    match now {
        Lookup::Trashed { record, .. } => ApiError::Conflict(format!(
            "snapshot {id} ({}) was deleted while this change was being made, so nothing changed; restore it (Undo on the list, or POST /api/snapshots/{id}/restore), then try again",
            record.name
        )),
        Lookup::Live(_) => ApiError::Conflict(format!(
            "snapshot {id} was deleted and restored while this change was being made, so nothing changed; send it again"
        )),
        other => not_live(state, id, other),
    }
}

/// A query parameter that names one of a few `options`, the first being the default when it is
/// absent: `axis=event|time`, `mode=allocated|reserved`.
pub fn one_of<T: Copy>(
    parameter: &str,
    value: Option<&str>,
    options: &[(&str, T)],
) -> Result<T, ApiError> {
    let Some(value) = value else {
        return Ok(options[0].1);
    };
    options
        .iter()
        .find(|(name, _)| *name == value)
        .map(|&(_, option)| option)
        .ok_or_else(|| {
            let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
            ApiError::BadRequest(format!(
                "{parameter} must be {}, not {value:?}",
                names.join(" or ")
            ))
        })
}

/// A live, readable snapshot's stored record (not parsed): for answers that need only the
/// metadata or the file.
pub struct StoredSnapshot {
    pub id: SnapshotId,
    pub record: Record,
}

impl StoredSnapshot {
    /// The snapshot `text` names; 400 for a malformed id, else 404 or 410 when not live.
    pub async fn find(state: &AppState, text: &str) -> Result<Self, ApiError> {
        let id = parse_id(text)?;
        match lookup(state, &id).await? {
            Lookup::Live(record) => Ok(Self { id, record }),
            other => Err(not_live(state, &id, other)),
        }
    }

    /// The role rules this snapshot is analysed with, as its record says now: its own
    /// (`PUT .../rules`), else the server's. They were checked when stored, so failing here
    /// means the database was edited by hand.
    pub fn rules(&self, state: &AppState) -> Result<Arc<UserRules>, ApiError> {
        match self.record.roles.as_deref() {
            Some(text) => Ok(Arc::new(UserRules::parse(text).map_err(|e| {
                ApiError::internal(format!("snapshot {}: its stored role rules", self.id), e)
            })?)),
            None => Ok(state.config.roles.clone()),
        }
    }

    /// What loads this snapshot for the cache with `rules`: a [`ColdLoad`] (its stored index
    /// when there is a sound one, written by any replica; else parsed here under the parse
    /// lease, or awaited while another replica parses it), reporting the bytes read. Its error
    /// is for a person (the status endpoint and the page show it): the cause with a server
    /// path goes to the log.
    fn loader(&self, state: &AppState, rules: Arc<UserRules>) -> impl Loader + use<> {
        let id = self.id.clone();
        let cold = ColdLoad::new(state, &self.record);
        let budget = state.parse_budget.clone();
        let max_events = state.config.limits.max_events;
        move |progress: &LoadProgress| {
            let waiting = || progress.waiting_for_another_server();
            cold.run(&rules, waiting, |path| {
                progress.begin_reading();
                let report = |read: u64| progress.read(read);
                // Charged to the server's parse memory as it reads, like an upload.
                let charge = budget.charge("reading this snapshot");
                let _timed = super::ops::ParseTimer::start("stored");
                let options = LoadOptions {
                    progress: Some(&report),
                    max_events,
                    events: Some(&charge),
                    ..LoadOptions::default()
                };
                let parsed = crate::analysis::load_path(path, options).map_err(|e| match e {
                    LoadError::Open { source, .. } => {
                        tracing::warn!(%id, path = %path.display(), error = %source, "a stored snapshot cannot be opened");
                        format!("the server cannot open its stored file ({})", source.kind())
                    }
                    limit @ (LoadError::TooManyEvents { .. } | LoadError::Refused(_)) => {
                        limit.to_string()
                    }
                    other => format!("its stored file does not read as a snapshot: {other}"),
                })?;
                progress.analysing();
                Ok(AnalysedSnapshot::new(parsed, &rules))
            })
        }
    }

    /// Parsed and analysed with the rules its record names now, from the cache or now
    /// (waiting for a load another request started).
    pub async fn load(self, state: &AppState) -> Result<LoadedSnapshot, ApiError> {
        let rules = self.rules(state)?;
        let fingerprint = rules.fingerprint();
        let load = self.loader(state, rules);
        let loaded = state
            .cache
            .get_or_load(&self.id, self.record.size_bytes, fingerprint, load)
            .await
            // Every request that waited on a failed load gets a 500 (the page and the status
            // endpoint say why); the log says it once per request, with the snapshot.
            .map_err(|e| ApiError::internal(format!("loading snapshot {}", self.id), e))?;
        // Opened from its stored index: its columns are checked after answering.
        super::stored_index::maintain_in_background(state, &self.id, &loaded);
        Ok(LoadedSnapshot {
            stored: self,
            loaded,
        })
    }

    /// The parsed snapshot if it is in memory, else where its load stands, starting the load
    /// in the background if none runs. Never waits.
    pub fn ready_or_start(
        &self,
        state: &AppState,
    ) -> Result<Result<Arc<AnalysedSnapshot>, LoadState>, ApiError> {
        let rules = self.rules(state)?;
        let fingerprint = rules.fingerprint();
        let load = self.loader(state, rules);
        let answer =
            state
                .cache
                .ready_or_start(&self.id, self.record.size_bytes, fingerprint, load);
        // A load followed by its status and pages alone (no view asked yet) gets its stored
        // index checked too, by the first request that finds it ready.
        if let Ok(loaded) = &answer {
            super::stored_index::maintain_in_background(state, &self.id, loaded);
        }
        Ok(answer)
    }
}

/// A live snapshot, parsed and analysed: its record (looked up once) and the cached analysis.
pub struct LoadedSnapshot {
    pub stored: StoredSnapshot,
    pub loaded: Arc<AnalysedSnapshot>,
}

impl LoadedSnapshot {
    pub async fn find(state: &AppState, text: &str) -> Result<Self, ApiError> {
        StoredSnapshot::find(state, text).await?.load(state).await
    }

    /// Runs `work` on the device `choice` picks, on a blocking thread (analysis is CPU work).
    pub async fn on_device<T, F>(&self, choice: DeviceChoice, work: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&AnalysedSnapshot, &DeviceAnalysis) -> Result<T, ApiError> + Send + 'static,
    {
        let loaded = self.loaded.clone();
        blocking(move || work(&loaded, choice.pick(&loaded)?)).await?
    }
}

/// The `{id}` of the request's path (every snapshot route names it so).
async fn path_id(parts: &mut Parts, state: &AppState) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
    params
        .iter()
        .find(|(name, _)| *name == "id")
        .map(|(_, value)| value.to_owned())
        .ok_or_else(|| ApiError::internal("routing", "a snapshot route without {id}"))
}

impl FromRequestParts<AppState> for StoredSnapshot {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let id = path_id(parts, state).await?;
        Self::find(state, &id).await
    }
}

impl FromRequestParts<AppState> for LoadedSnapshot {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let id = path_id(parts, state).await?;
        Self::find(state, &id).await
    }
}

/// The device a query names (`?device=N`, or `?device=host` for pinned host memory), or the
/// server's default.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct DeviceChoice {
    pub device: Option<DeviceName>,
}

/// `?device=`'s value: a device ordinal, or `host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum DeviceName {
    Ordinal(usize),
    /// Pinned host memory, whatever ordinal the snapshot gave it.
    Host,
}

impl TryFrom<String> for DeviceName {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        if text == "host" {
            return Ok(Self::Host);
        }
        text.parse().map(Self::Ordinal).map_err(|_| {
            // The value may be long: the message names its first characters only.
            let shown: String = text.chars().take(40).collect();
            format!("device {shown:?} is neither a device number nor \"host\"")
        })
    }
}

impl DeviceChoice {
    /// The named device (400 when the snapshot has none such), else [`default_device`].
    pub fn pick(self, loaded: &AnalysedSnapshot) -> Result<&DeviceAnalysis, ApiError> {
        let analysis = &loaded.analysis;
        match self.device {
            Some(DeviceName::Host) => loaded
                .snapshot
                .source
                .host_device
                .and_then(|d| analysis.device(d))
                .ok_or_else(|| {
                    ApiError::BadRequest(
                        "this snapshot recorded no pinned host memory (record_pinned_host_memory=True)"
                            .into(),
                    )
                }),
            Some(DeviceName::Ordinal(d)) => analysis
                .device(d)
                .ok_or_else(|| ApiError::BadRequest(format!("this snapshot has no device {d}"))),
            None => default_device(loaded)
                .ok_or_else(|| ApiError::BadRequest("this snapshot has no devices".into())),
        }
    }
}

/// The device the views show unless asked for another: the first with a trace, else the first.
pub fn default_device(loaded: &AnalysedSnapshot) -> Option<&DeviceAnalysis> {
    let devices = &loaded.analysis.devices;
    devices
        .iter()
        .find(|d| !loaded.snapshot.trace(d.device).is_empty())
        .or(devices.first())
}

/// `?device=N&at=M` of a view: the device, and the moment (absent: the view's own default).
#[derive(Debug, Clone, Copy)]
pub struct DeviceMoment {
    pub device: DeviceChoice,
    pub at: Option<Moment>,
}

#[derive(Deserialize)]
struct DeviceMomentQuery {
    device: Option<DeviceName>,
    at: Option<String>,
}

impl DeviceMoment {
    /// The moment asked for, else `default`.
    pub fn moment_or(&self, default: Moment) -> Moment {
        self.at.unwrap_or(default)
    }
}

impl FromRequestParts<AppState> for DeviceMoment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Query(query) = Query::<DeviceMomentQuery>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
        Ok(Self {
            device: DeviceChoice {
                device: query.device,
            },
            at: query
                .at
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(ApiError::BadRequest)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_takes_the_first_option_by_default_and_names_them_all_when_refusing() {
        let options = [("event", 1), ("time", 2)];
        assert_eq!(one_of("axis", None, &options).expect("default"), 1);
        assert_eq!(one_of("axis", Some("time"), &options).expect("named"), 2);
        let refused = one_of("axis", Some("bytes"), &options).expect_err("unknown");
        assert_eq!(
            refused.to_string(),
            "axis must be event or time, not \"bytes\""
        );
    }
}
