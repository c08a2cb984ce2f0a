//! The JSON form of a snapshot (PyTorch's viewer accepts it too): the same structure as the
//! pickle, so it is decoded into the same heap values and built by the same rules.

use super::Snapshot;
use super::build::{TraceCompactor, build};
use super::load::{LoadError, LoadOptions};
use crate::pickle::{Heap, Value};
use serde_json::Value as Json;

/// Builds a snapshot from JSON text already parsed, within the events `options` allow.
pub(super) fn from_json(json: &Json, options: &LoadOptions<'_>) -> Result<Snapshot, LoadError> {
    let mut heap = Heap::default();
    let root = into_heap(&mut heap, json);
    let compactor =
        TraceCompactor::<()>::default().counting_events(options.max_events, options.events);
    build(root, heap, compactor).map(|(snapshot, _)| snapshot)
}

fn into_heap(heap: &mut Heap, json: &Json) -> Value {
    match json {
        Json::Null => Value::NONE,
        Json::Bool(b) => Value::bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(v), _, _) if Value::small_int(v).is_some() => {
                Value::small_int(v).unwrap_or(Value::NONE)
            }
            (Some(v), _, _) => heap.push_long(&v.to_le_bytes()),
            (None, Some(v), _) => {
                let mut bytes = v.to_le_bytes().to_vec();
                bytes.push(0);
                heap.push_long(&bytes)
            }
            (_, _, Some(f)) => heap.push_float(f),
            _ => Value::NONE,
        },
        Json::String(s) => heap.intern_str(s),
        Json::Array(items) => {
            let list = heap.new_list();
            for item in items {
                let value = into_heap(heap, item);
                heap.list_push(list, value);
            }
            list
        }
        Json::Object(map) => {
            let dict = heap.new_dict();
            for (key, item) in map {
                let key = heap.intern_str(key);
                let value = into_heap(heap, item);
                heap.dict_insert(dict, key, value);
            }
            dict
        }
    }
}
