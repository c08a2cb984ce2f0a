//! Writes refused with 401 or 403 (no token, a read-only token, another site's page, an
//! untrusted user header), recorded in the audit log as `refused` rows.
//!
//! A client may send refused writes as fast as it likes, and each costs the server nothing but
//! this count, so they are aggregated: one row per client address and minute (its `count` and
//! up to [`REQUESTS_KEPT`] distinct routes with why they were refused), at most
//! [`ADDRESSES_PER_MINUTE`] addresses a minute (the rest share one row, `"address": "others"`),
//! written by [`flush_periodically`] every [`FLUSH_EVERY`], never on the request's path; the
//! store keeps the newest `MAX_REFUSED_ROWS` of them. The log gets one line per new row.

use super::error::blocking;
use super::store::Store;
use axum::http::{Method, StatusCode};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the counts are written to the audit log.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// Distinct client addresses with a row of their own per minute; the rest share one.
pub const ADDRESSES_PER_MINUTE: usize = 256;
/// Distinct (route, status) pairs kept per row; the count counts them all.
pub const REQUESTS_KEPT: usize = 8;
/// Characters of a path or a reason kept (they come from the client, or name its values).
const TEXT_KEPT: usize = 200;

/// The refused writes of one address (or of the overflow) in one minute.
#[derive(Default)]
struct Bucket {
    /// The audit row, once written.
    row: Option<i64>,
    count: u64,
    /// `count` as last written.
    written: u64,
    requests: Vec<serde_json::Value>,
    /// The first token name that came with a refused write (a read-only token, say).
    actor: Option<String>,
}

/// (minute since the epoch, client address; `None`: the addresses past the per-minute cap, or
/// a request that came over no socket).
type Key = (i64, Option<IpAddr>);

/// A bucket to write: its key, row, count, requests and actor, taken under the lock.
type DueRow = (Key, Option<i64>, u64, serde_json::Value, Option<String>);

pub struct RefusedWrites {
    store: Arc<dyn Store>,
    buckets: Mutex<HashMap<Key, Bucket>>,
    /// One flush at a time (the periodic one and the last one at shutdown may meet).
    flushing: Mutex<()>,
}

impl RefusedWrites {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            buckets: Mutex::default(),
            flushing: Mutex::default(),
        }
    }

    /// Counts one refused write. Cheap and bounded: never touches the disk.
    pub fn count(
        &self,
        peer: Option<IpAddr>,
        method: &Method,
        path: &str,
        status: StatusCode,
        why: &str,
        token_name: Option<String>,
    ) {
        let minute = super::store::now_ms().div_euclid(60_000);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let mut key = (minute, peer.map(|peer| peer.to_canonical()));
        if !buckets.contains_key(&key) {
            let addresses = buckets.keys().filter(|(m, _)| *m == minute).count();
            if addresses >= ADDRESSES_PER_MINUTE {
                key = (minute, None);
            }
        }
        let bucket = buckets.entry(key).or_default();
        bucket.count += 1;
        if bucket.actor.is_none() {
            bucket.actor = token_name;
        }
        let route = format!("{method} {}", clipped(path));
        let status = status.as_u16();
        let known = bucket
            .requests
            .iter()
            .any(|r| r["route"] == route.as_str() && r["status"] == status);
        if !known && bucket.requests.len() < REQUESTS_KEPT {
            bucket.requests.push(serde_json::json!({
                "route": route,
                "status": status,
                "why": clipped(why),
            }));
        }
    }

    /// Writes the counts that changed since the last flush, and forgets the minutes that are
    /// over and written. Runs on a blocking thread (SQLite).
    pub fn flush(&self) {
        let _one_at_a_time = self.flushing.lock().unwrap_or_else(PoisonError::into_inner);
        let minute = super::store::now_ms().div_euclid(60_000);
        let due: Vec<DueRow> = {
            let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
            buckets
                .iter_mut()
                .filter(|(_, bucket)| bucket.count != bucket.written)
                .map(|(key, bucket)| {
                    bucket.written = bucket.count;
                    (
                        *key,
                        bucket.row,
                        bucket.count,
                        serde_json::Value::from(bucket.requests.clone()),
                        bucket.actor.clone(),
                    )
                })
                .collect()
        };
        for ((at_minute, address), row, count, requests, actor) in due {
            let address_text = address.map_or_else(|| "others".to_owned(), |a| a.to_string());
            let detail = serde_json::json!({
                "address": address_text,
                "minute_at_ms": at_minute * 60_000,
                "count": count,
                "requests": requests,
            });
            match self.store.record_refusals(row, actor.as_deref(), &detail) {
                Ok(seq) => {
                    if row.is_none() {
                        tracing::warn!(
                            address = %address_text,
                            requests = %detail["requests"],
                            "writes were refused (401/403); counted per address and minute in the audit log"
                        );
                    }
                    let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(bucket) = buckets.get_mut(&(at_minute, address)) {
                        bucket.row = Some(seq);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot record refused writes in the audit log");
                }
            }
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        buckets.retain(|(at_minute, _), bucket| {
            *at_minute >= minute || bucket.count != bucket.written
        });
    }
}

fn clipped(text: &str) -> String {
    text.chars()
        .take(TEXT_KEPT)
        .filter(|c| !c.is_control())
        .collect()
}

/// Writes the counts every [`FLUSH_EVERY`], forever (the task is aborted when the server
/// stops, and [`RefusedWrites::flush`] is called once more).
pub async fn flush_periodically(refusals: Arc<RefusedWrites>) {
    let mut ticks = tokio::time::interval(FLUSH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let refusals = refusals.clone();
        if let Err(error) = blocking(move || refusals.flush()).await {
            tracing::warn!(%error, "recording refused writes failed");
        }
    }
}
