//! Copying decoded pickle values out of the heap, paid for from a budget.
//!
//! Both the top-level walk ([`super::build`]) and the trace compactor ([`super::compact`]) turn
//! heap values into owned text and JSON; the budget and the error they share live here, below
//! both, so neither has to import the other for them.

use crate::pickle::{Heap, Kind, Value};

/// A snapshot's shape was not what any torch version writes.
#[derive(Debug, thiserror::Error)]
#[error("not a memory snapshot: {0}")]
pub struct ShapeError(pub String);

/// Deepest nesting converted to JSON; settings are two levels deep in practice. Deeper values
/// (and reference cycles, which the memo can make) end in `"…"`.
const MAX_JSON_DEPTH: usize = 32;

/// What turning file values into owned text and JSON may still cost, in bytes of output.
///
/// The pickle memo lets a file refer to one value many times: a list holding itself twice, 32
/// levels deep, is 300 bytes of pickle and 2^32 values of JSON, and a 64 MiB string referenced
/// by every annotation is 64 MiB per reference. The heap keeps such sharing (each value is
/// decoded once); every conversion that copies values out of it spends from a budget bounded by
/// what was decoded, so a shared-structure bomb is refused after a bounded amount of work.
#[derive(Debug)]
pub(super) struct ConversionBudget {
    remaining: u64,
}

/// Output every file may convert, however small: settings and annotations of a real file are
/// kilobytes (a long trace's annotations a few MB, which the share below covers).
pub(super) const CONVERSION_FLOOR: u64 = 8 << 20;

/// Output allowed per byte of decoded values other than text: annotations copy each interned
/// name once per annotation (a 16-byte dict entry becomes two short strings, about 100 bytes as
/// counted below); much more than that is sharing.
const CONVERSION_PER_DECODED_BYTE: u64 = 16;

/// What each converted value costs beyond its text: a `serde_json::Value` is 32 bytes, a
/// `String` 24 plus its allocation; so the budget is close to the memory the output takes.
const COST_PER_VALUE: u64 = 32;

impl ConversionBudget {
    /// A budget of `bytes` of output.
    pub(super) fn new(bytes: u64) -> Self {
        Self { remaining: bytes }
    }

    /// The budget for converting values of `heap`: the floor, its text once, and a multiple of
    /// its other values (a reference to a text is one of those, so a text shared a million
    /// times costs its length once per reference, which this multiple does not cover).
    pub(super) fn for_heap(heap: &Heap) -> Self {
        let text = heap.text_bytes();
        let values = heap.footprint().saturating_sub(text);
        Self::new(
            CONVERSION_FLOOR
                .saturating_add(text)
                .saturating_add(values.saturating_mul(CONVERSION_PER_DECODED_BYTE)),
        )
    }

    /// Spends `bytes` (plus the per-value cost) converting `what`, or says why not.
    pub(super) fn spend(&mut self, bytes: usize, what: &str) -> Result<(), ShapeError> {
        let cost = (bytes as u64).saturating_add(COST_PER_VALUE);
        match self.remaining.checked_sub(cost) {
            Some(left) => {
                self.remaining = left;
                Ok(())
            }
            None => Err(ShapeError(format!(
                "{what} expands to more data than the whole file holds (a value shared through the pickle memo many times, or a reference cycle); refusing it"
            ))),
        }
    }

    /// An owned copy of `text`, paid for.
    pub(super) fn copy(&mut self, text: &str, what: &str) -> Result<String, ShapeError> {
        self.spend(text.len(), what)?;
        Ok(text.to_owned())
    }
}

/// A decoded value as JSON (for settings and metadata), paid for from `budget`; `what` names
/// the value in the error. Dict keys that are not strings are written in their JSON form; big
/// integers beyond 64 bits become strings.
pub(super) fn to_json(
    heap: &Heap,
    value: Value,
    budget: &mut ConversionBudget,
    what: &str,
) -> Result<serde_json::Value, ShapeError> {
    to_json_at(heap, value, 0, budget, what)
}

fn to_json_at(
    heap: &Heap,
    value: Value,
    depth: usize,
    budget: &mut ConversionBudget,
    what: &str,
) -> Result<serde_json::Value, ShapeError> {
    use serde_json::Value as J;
    if depth > MAX_JSON_DEPTH {
        budget.spend(3, what)?;
        return Ok(J::String("…".into()));
    }
    Ok(match value.kind() {
        Kind::None | Kind::Record => {
            budget.spend(0, what)?;
            J::Null
        }
        Kind::Bool => {
            budget.spend(0, what)?;
            J::Bool(heap.bool(value).unwrap_or(false))
        }
        Kind::Int | Kind::BigInt => {
            budget.spend(0, what)?;
            match (heap.i64(value), heap.u64(value)) {
                (Some(v), _) => J::from(v),
                (None, Some(v)) => J::from(v),
                (None, None) => J::String("<integer beyond 64 bits>".into()),
            }
        }
        Kind::Float => {
            budget.spend(0, what)?;
            heap.f64(value)
                .and_then(serde_json::Number::from_f64)
                .map_or(J::Null, J::Number)
        }
        Kind::Str => J::String(budget.copy(heap.str(value).unwrap_or(""), what)?),
        Kind::Bytes => {
            let bytes = heap.bytes(value).unwrap_or(&[]);
            budget.spend(bytes.len(), what)?;
            J::String(String::from_utf8_lossy(bytes).into())
        }
        Kind::List | Kind::Tuple => {
            budget.spend(0, what)?;
            let items = heap.items(value).unwrap_or(&[]);
            let mut array = Vec::new();
            for &item in items {
                array.push(to_json_at(heap, item, depth + 1, budget, what)?);
            }
            J::Array(array)
        }
        Kind::Dict => {
            budget.spend(0, what)?;
            let mut object = serde_json::Map::new();
            for &(k, v) in heap.pairs(value).unwrap_or(&[]) {
                let key = match heap.str(k) {
                    Some(text) => budget.copy(text, what)?,
                    None => {
                        let key = to_json_at(heap, k, depth + 1, budget, what)?.to_string();
                        // The text form is about as long again as the JSON it came from.
                        budget.spend(key.len(), what)?;
                        key
                    }
                };
                let v = to_json_at(heap, v, depth + 1, budget, what)?;
                object.insert(key, v);
            }
            J::Object(object)
        }
    })
}
