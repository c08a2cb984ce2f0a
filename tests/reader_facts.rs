//! Every corpus file reads, and what it holds equals what Python's own pickle reads
//! (`facts.json`): segment, block and trace counts, actions, reserved and active bytes.

use crate::common;

use snapview::snapshot::{BlockState, Snapshot};
use std::collections::BTreeMap;
use std::path::Path;

fn check_against_facts(name: &str, snapshot: &Snapshot) {
    let facts = common::facts();
    let fact = &facts[name];
    assert!(fact.is_object(), "{name} is in facts.json");
    assert_eq!(
        snapshot.segments.len() as u64,
        fact["segments"],
        "{name}: segments"
    );
    let blocks: usize = snapshot.segments.iter().map(|s| s.blocks.len()).sum();
    assert_eq!(blocks as u64, fact["blocks"], "{name}: blocks");
    let lengths: Vec<u64> = snapshot
        .device_traces
        .iter()
        .map(|t| t.len() as u64)
        .collect();
    let expected: Vec<u64> = fact["device_traces"]
        .as_array()
        .expect("device_traces")
        .iter()
        .map(|v| v.as_u64().expect("length"))
        .collect();
    assert_eq!(lengths, expected, "{name}: trace lengths");
    let mut actions: BTreeMap<String, u64> = BTreeMap::new();
    for trace in &snapshot.device_traces {
        for &code in &trace.action {
            *actions
                .entry(trace.action_name(code).to_owned())
                .or_default() += 1;
        }
    }
    let expected: BTreeMap<String, u64> =
        serde_json::from_value(fact["actions"].clone()).expect("actions");
    assert_eq!(actions, expected, "{name}: actions");
    let reserved: u64 = snapshot.segments.iter().map(|s| s.total_size).sum();
    assert_eq!(reserved, fact["reserved_bytes"], "{name}: reserved");
    let active = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated);
    let (requested, rounded) =
        active.fold((0u64, 0u64), |(r, s), b| (r + b.requested_size, s + b.size));
    assert_eq!(
        requested, fact["active_allocated_requested_bytes"],
        "{name}: requested"
    );
    assert_eq!(
        rounded, fact["active_allocated_size_bytes"],
        "{name}: rounded"
    );
    assert_eq!(
        snapshot.source.pickle_protocol.map(u64::from),
        fact["protocol"].as_u64(),
        "{name}: protocol"
    );
}

#[test]
fn every_small_corpus_file_matches_python_pickle() {
    let names = common::small_names();
    assert!(names.len() >= 19, "the corpus fixtures are present");
    for name in names {
        let snapshot = common::load(&name);
        check_against_facts(&name, &snapshot);
    }
}

#[test]
fn large_corpus_files_match_python_pickle_when_present() {
    for (name, path) in common::large_names() {
        let snapshot = snapview::snapshot::load_path(Path::new(&path), Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        check_against_facts(&name, &snapshot);
    }
}

#[test]
fn shared_frames_are_interned_once() {
    let snapshot = common::load("gpt2_adamw");
    // Counted with Python's pickle: 89 frame dicts in the file hold 75 distinct
    // (filename, line, name) frames; 3,319 of 7,294 entries carry frames (free_completed has
    // none), in 43 distinct stacks counting the empty one.
    assert_eq!(snapshot.frames.len(), 75);
    let trace = snapshot.trace(0);
    let with_stack = trace.stack.iter().filter(|&s| s != 0).count();
    assert_eq!(with_stack, 3319);
    let distinct: std::collections::BTreeSet<u32> = trace.stack.iter().collect();
    assert_eq!(distinct.len(), 43);
}

#[test]
fn cpp_frames_keep_their_unknown_line_numbers() {
    let snapshot = common::load("mlp_cpp_frames");
    assert!(
        snapshot
            .frames
            .iter()
            .any(|(_, f)| f.filename.as_ref() == "??")
    );
    assert!(
        snapshot
            .frames
            .iter()
            .any(|(_, f)| f.name.contains("unwind::unwind"))
    );
}

#[test]
fn settings_and_annotations_survive() {
    let snapshot = common::load("mlp_small");
    assert_eq!(snapshot.allocator_settings["expandable_segments"], false);
    assert_eq!(snapshot.allocator_settings["max_split_size"], -1);
    assert_eq!(snapshot.external_annotations.len(), 12);
    assert_eq!(snapshot.external_annotations[0].fields["stage"], "START");
    let oom = common::load("oom");
    let trace = oom.trace(0);
    assert_eq!(trace.device_free.len(), 1, "one oom event with device_free");
    let cuda_graph = common::load("cuda_graph");
    assert!(cuda_graph.segments.iter().any(|s| s.pool_id == (1, 0)));
}

/// Opcodes of a hand-written protocol-4 pickle.
#[derive(Default)]
struct Pickle(Vec<u8>);

impl Pickle {
    fn op(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }

    fn text(mut self, text: &str) -> Self {
        self.0.extend([0x8c, text.len() as u8]);
        self.0.extend_from_slice(text.as_bytes());
        self
    }

    /// A trace entry `{"action": "alloc", "addr": addr, "size": 8, "stream": 0}`.
    fn entry(self, addr: u8) -> Self {
        self.op(b"}(")
            .text("action")
            .text("alloc")
            .text("addr")
            .op(&[b'K', addr])
            .text("size")
            .op(b"K\x08")
            .text("stream")
            .op(b"K\x00u")
    }
}

/// A device's trace list is usually one run of entries in file order; lists that are not
/// (entries of two devices interleaved, a stray item, several APPENDS) keep their entries in
/// their own order all the same.
#[test]
fn trace_lists_in_any_order_keep_their_entries() {
    let bytes = Pickle(b"\x80\x04}(".to_vec())
        .text("segments")
        .op(b"]")
        .text("device_traces")
        .op(b"](") // the list of devices, MARK
        .op(b"]\x94") // device 0's list, memoized as 0
        .op(b"(")
        .entry(1)
        .entry(2)
        .op(b"e") // APPENDS: entries 0 and 1
        .op(b"(")
        .entry(3)
        .op(b"e") // entry 2 continues the run
        .op(b"]\x94") // device 1's list, memoized as 1
        .entry(4)
        .op(b"a") // APPEND entry 3 to device 1
        .op(b"0h\x00") // POP it, fetch device 0's list
        .op(b"K\x07a") // a stray integer
        .entry(5)
        .op(b"a") // entry 4 after it
        .op(b"0h\x01") // POP, fetch device 1's list
        .op(b"e") // close the list of devices: [device 0, device 1]
        .op(b"u.")
        .0;
    let snapshot = snapview::snapshot::load_reader(&bytes[..], Default::default()).expect("loads");
    let addrs: Vec<Vec<u64>> = snapshot
        .device_traces
        .iter()
        .map(|t| t.addr.iter().collect::<Vec<u64>>())
        .collect();
    assert_eq!(addrs, [vec![1, 2, 3, 5], vec![4]]);
}
