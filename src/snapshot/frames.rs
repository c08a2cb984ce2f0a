//! Interned frames and stacks.
//!
//! A long trace references the same few hundred frame dicts millions of times, so each distinct
//! frame is stored once ([`FrameId`]) and each distinct stack once, as a run of frame ids
//! ([`StackId`]). Stack 0 is always the empty stack (no frames recorded).

use rustc_hash::FxHashMap;
use std::sync::Arc;

pub type FrameId = u32;
pub type StackId = u32;

/// One Python or C++ frame as the allocator recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: Arc<str>,
    /// Line number; C++ frames with no line use `u64::MAX` (written as a 9-byte LONG1 by torch).
    pub line: u64,
    pub name: Arc<str>,
}

impl Frame {
    /// Whether PyTorch's viewer hides this frame (allocator and interpreter internals).
    pub fn is_hidden(&self) -> bool {
        const HIDDEN_NAMES: [&str; 8] = [
            "unwind::unwind",
            "CapturedTraceback::gather",
            "gather_with_cpp",
            "_start",
            "__libc_start_main",
            "PyEval_",
            "PyObject_",
            "PyFunction_",
        ];
        const HIDDEN_FILES: [&str; 10] = [
            "core/boxing",
            "/Register",
            "/Redispatch",
            "pythonrun.c",
            "Modules/main.c",
            "Objects/call.c",
            "Objects/methodobject.c",
            "pycore_ceval.h",
            "ceval.c",
            "cpython/abstract.h",
        ];
        HIDDEN_NAMES.iter().any(|part| self.name.contains(part))
            || HIDDEN_FILES.iter().any(|part| self.filename.contains(part))
    }

    /// The last path component of the filename.
    pub fn basename(&self) -> &str {
        self.filename.rsplit('/').next().unwrap_or(&self.filename)
    }
}

/// Every distinct frame of a snapshot.
#[derive(Debug, Default)]
pub struct FrameTable {
    frames: Vec<Frame>,
    index: FxHashMap<Frame, FrameId>,
}

impl FrameTable {
    pub fn intern(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.index.get(&frame) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(frame.clone());
        self.index.insert(frame, id);
        id
    }

    pub fn get(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (FrameId, &Frame)> {
        self.frames
            .iter()
            .enumerate()
            .map(|(id, frame)| (id as FrameId, frame))
    }
}

/// Every distinct stack of a snapshot, innermost frame first (as torch writes them).
#[derive(Debug)]
pub struct StackTable {
    /// `frame_ids[starts[s]..starts[s + 1]]` is stack `s`.
    starts: Vec<u32>,
    frame_ids: Vec<FrameId>,
    index: FxHashMap<Box<[FrameId]>, StackId>,
}

impl Default for StackTable {
    fn default() -> Self {
        let mut index = FxHashMap::default();
        index.insert(Box::default(), 0);
        Self {
            starts: vec![0, 0],
            frame_ids: Vec::new(),
            index,
        }
    }
}

impl StackTable {
    /// The empty stack: no frames were recorded.
    pub const EMPTY: StackId = 0;

    pub fn intern(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.index.get(frames) {
            return id;
        }
        let id = (self.starts.len() - 1) as StackId;
        self.frame_ids.extend_from_slice(frames);
        self.starts.push(self.frame_ids.len() as u32);
        self.index.insert(frames.into(), id);
        id
    }

    /// Frame ids of `stack`, innermost first. Unknown ids give the empty stack.
    pub fn get(&self, stack: StackId) -> &[FrameId] {
        let s = stack as usize;
        match (self.starts.get(s), self.starts.get(s + 1)) {
            (Some(&start), Some(&end)) => &self.frame_ids[start as usize..end as usize],
            _ => &[],
        }
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
