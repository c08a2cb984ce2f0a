//! Flame graph data: the stack tree of live memory at a moment, in depth-first order.

use super::DeviceAnalysis;
use super::memory_map::MemoryMap;
use super::replay::AllocationId;
use super::roles::DeviceRoles;
use crate::snapshot::{FrameId, Snapshot, StackId};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlameMode {
    /// Live allocations by stack.
    Allocated,
    /// Every reserved byte: allocations by segment and stack, plus free, pending and rounding.
    Reserved,
}

#[derive(Debug, Serialize)]
pub struct Flame {
    pub device: usize,
    pub at: Option<usize>,
    pub total: u64,
    pub allocations: u64,
    pub nodes: Vec<FlameNode>,
}

#[derive(Debug, Serialize, Clone)]
pub struct FlameNode {
    pub name: String,
    /// File basename ("" for synthetic nodes such as segments or free space).
    pub file: String,
    pub path: String,
    pub line: u64,
    pub bytes: u64,
    pub allocations: u64,
    /// Index of the parent node; -1 for the root.
    pub parent: i64,
    pub depth: u32,
}

/// A tree being built: children by key, so equal frames merge.
#[derive(Default)]
struct Tree {
    nodes: Vec<Building>,
}

struct Building {
    label: Label,
    bytes: u64,
    allocations: u64,
    children: BTreeMap<Label, usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    Root,
    Frame(FrameId),
    Text(String),
}

impl Tree {
    fn new() -> Self {
        Self {
            nodes: vec![Building {
                label: Label::Root,
                bytes: 0,
                allocations: 0,
                children: BTreeMap::new(),
            }],
        }
    }

    fn child(&mut self, parent: usize, label: Label) -> usize {
        if let Some(&child) = self.nodes[parent].children.get(&label) {
            return child;
        }
        let id = self.nodes.len();
        self.nodes.push(Building {
            label: label.clone(),
            bytes: 0,
            allocations: 0,
            children: BTreeMap::new(),
        });
        self.nodes[parent].children.insert(label, id);
        id
    }

    /// Adds `bytes` along a path of labels below `from`.
    fn add(&mut self, from: usize, path: impl IntoIterator<Item = Label>, bytes: u64, count: u64) {
        let mut node = from;
        self.nodes[node].bytes += bytes;
        self.nodes[node].allocations += count;
        for label in path {
            node = self.child(node, label);
            self.nodes[node].bytes += bytes;
            self.nodes[node].allocations += count;
        }
    }

    fn add_stack(
        &mut self,
        snapshot: &Snapshot,
        from: usize,
        stack: StackId,
        bytes: u64,
        count: u64,
    ) {
        let frames = snapshot.stacks.get(stack);
        let visible: Vec<Label> = frames
            .iter()
            .rev()
            .filter(|&&f| !snapshot.frames.get(f).is_hidden())
            .map(|&f| Label::Frame(f))
            .collect();
        let path = if visible.is_empty() {
            vec![Label::Text("<non-python>".into())]
        } else {
            visible
        };
        self.add(from, path, bytes, count);
    }

    /// Depth-first, children largest first.
    fn flatten(&self, snapshot: &Snapshot) -> Vec<FlameNode> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack = vec![(0usize, -1i64, 0u32)];
        while let Some((node, parent, depth)) = stack.pop() {
            let building = &self.nodes[node];
            let (name, file, path, line) = match &building.label {
                Label::Root => ("all".to_owned(), String::new(), String::new(), 0),
                Label::Text(text) => (text.clone(), String::new(), String::new(), 0),
                Label::Frame(id) => {
                    let frame = snapshot.frames.get(*id);
                    (
                        frame.name.to_string(),
                        frame.basename().to_owned(),
                        frame.filename.to_string(),
                        frame.line,
                    )
                }
            };
            let index = out.len() as i64;
            out.push(FlameNode {
                name,
                file,
                path,
                line,
                bytes: building.bytes,
                allocations: building.allocations,
                parent,
                depth,
            });
            let mut children: Vec<usize> = building.children.values().copied().collect();
            // Pushed smallest first so the largest is popped (emitted) first.
            children.sort_by_key(|&c| (self.nodes[c].bytes, std::cmp::Reverse(c)));
            for child in children {
                stack.push((child, index, depth + 1));
            }
        }
        out
    }
}

/// The flame graph of `device` after event `at`.
pub fn flame(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
    mode: FlameMode,
    map: Option<&MemoryMap>,
) -> Flame {
    let replay = &device.replay;
    let live: Vec<AllocationId> = replay.live_after(at);
    let mut tree = Tree::new();
    match (mode, map) {
        (FlameMode::Reserved, Some(map)) => {
            for segment in &map.segments {
                let segment_node = tree.child(0, Label::Text(format!("stream {}", segment.stream)));
                let segment_node = tree.child(
                    segment_node,
                    Label::Text(format!("segment 0x{:x}", segment.address)),
                );
                for block in &segment.blocks {
                    match (block.state, block.allocation) {
                        ("inactive", _) => tree.add(
                            segment_node,
                            [Label::Text("free (cached)".into())],
                            block.size,
                            0,
                        ),
                        (state, Some(id)) => {
                            let allocation = replay.allocations.at(id as usize);
                            let state_node =
                                tree.child(segment_node, Label::Text(state.to_owned()));
                            tree.add_stack(
                                snapshot,
                                state_node,
                                allocation.stack,
                                block.requested,
                                1,
                            );
                            // The counts above the segment are added once, below.
                            let gaps = block.size - block.requested;
                            if gaps > 0 {
                                tree.add(segment_node, [Label::Text("rounding".into())], gaps, 0);
                            }
                        }
                        (state, None) => {
                            tree.add(segment_node, [Label::Text(state.to_owned())], block.size, 0);
                        }
                    }
                }
                let (bytes, count) = {
                    let node = &tree.nodes[segment_node];
                    let children_bytes: u64 =
                        node.children.values().map(|&c| tree.nodes[c].bytes).sum();
                    let children_count: u64 = node
                        .children
                        .values()
                        .map(|&c| tree.nodes[c].allocations)
                        .sum();
                    (children_bytes, children_count)
                };
                // Propagate the segment's totals to its stream node and the root.
                tree.nodes[segment_node].bytes = bytes;
                tree.nodes[segment_node].allocations = count;
            }
            // Stream and root totals from their children.
            let streams: Vec<usize> = tree.nodes[0].children.values().copied().collect();
            for stream in &streams {
                let (bytes, count) = tree.nodes[*stream]
                    .children
                    .values()
                    .fold((0, 0), |(b, c), &s| {
                        (b + tree.nodes[s].bytes, c + tree.nodes[s].allocations)
                    });
                tree.nodes[*stream].bytes = bytes;
                tree.nodes[*stream].allocations = count;
            }
            let (bytes, count) = streams.iter().fold((0, 0), |(b, c), &s| {
                (b + tree.nodes[s].bytes, c + tree.nodes[s].allocations)
            });
            tree.nodes[0].bytes = bytes;
            tree.nodes[0].allocations = count;
        }
        _ => {
            let mut by_stack: BTreeMap<StackId, (u64, u64)> = BTreeMap::new();
            for &id in &live {
                let allocation = replay.allocations.at(id as usize);
                let entry = by_stack.entry(allocation.stack).or_default();
                entry.0 += allocation.size;
                entry.1 += 1;
            }
            for (stack, (bytes, count)) in by_stack {
                tree.add_stack(snapshot, 0, stack, bytes, count);
            }
        }
    }
    finished(tree, snapshot, device, at)
}

/// The answer for a built tree: its nodes in depth-first order, totals from the root.
fn finished(tree: Tree, snapshot: &Snapshot, device: &DeviceAnalysis, at: Option<usize>) -> Flame {
    let nodes = tree.flatten(snapshot);
    Flame {
        device: device.device,
        at,
        total: nodes.first().map_or(0, |n| n.bytes),
        allocations: nodes.first().map_or(0, |n| n.allocations),
        nodes,
    }
}

/// The flame graph of live memory after `at` with each allocation's role as the first frame of
/// its stack: the root's children are roles, so "whose stacks hold the activations" is one
/// click (`flame?by=role`).
pub fn flame_by_role(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
    roles: &DeviceRoles,
) -> Flame {
    let replay = &device.replay;
    let mut by_role_and_stack: BTreeMap<(u8, StackId), (u64, u64)> = BTreeMap::new();
    for id in replay.live_after(at) {
        let allocation = replay.allocations.at(id as usize);
        let entry = by_role_and_stack
            .entry((roles.role_index_of(id), allocation.stack))
            .or_default();
        entry.0 += allocation.size;
        entry.1 += 1;
    }
    let mut tree = Tree::new();
    for ((role, stack), (bytes, count)) in by_role_and_stack {
        let name = roles.names()[role as usize].clone();
        let role_node = tree.child(0, Label::Text(name));
        // `add_stack` counts from the role down; the root above it is counted here.
        tree.nodes[0].bytes += bytes;
        tree.nodes[0].allocations += count;
        tree.add_stack(snapshot, role_node, stack, bytes, count);
    }
    finished(tree, snapshot, device, at)
}
