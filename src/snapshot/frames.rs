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
        basename(&self.filename)
    }

    /// The frame as people read it (see [`FrameLabel`]).
    pub fn label(&self) -> FrameLabel<'_> {
        FrameLabel {
            file: &self.filename,
            line: self.line,
            name: &self.name,
        }
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A frame as people read it, and the one formatter of its text forms:
///
/// - [`Display`](std::fmt::Display): `file:line:name`, the full form of the summary's stacks
///   (JSON and stored rows), which [`FrameLabel::parse`] reads back;
/// - [`FrameLabel::short`]: `basename:line name`, the label of pages, diffs, events and the CLI;
/// - [`FrameLabel::short_without_line`]: `basename name`, for diffs that ignore line shifts.
///
/// It serializes as `{file, line, name, short}`, so a page never splits the text itself.
/// (torch's own text formats, `torch_text` and the folded stacks, keep torch's spelling.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameLabel<'a> {
    /// The filename as recorded (a path).
    pub file: &'a str,
    /// Line number; `u64::MAX` for C++ frames with no line, as torch writes it.
    pub line: u64,
    /// The function.
    pub name: &'a str,
}

impl<'a> FrameLabel<'a> {
    /// Reads back the full form `file:line:name`. A path may hold colons (`C:/…`) and a C++
    /// name does (`at::native::empty`), so the line is the first `:digits:` run. `None` for text
    /// of another shape (`<non-python>`, a label already short).
    pub fn parse(text: &'a str) -> Option<Self> {
        text.match_indices(':').find_map(|(colon, _)| {
            let rest = &text[colon + 1..];
            let digits = rest.find(|c: char| !c.is_ascii_digit())?;
            if digits == 0 || !rest[digits..].starts_with(':') {
                return None;
            }
            Some(Self {
                file: &text[..colon],
                line: rest[..digits].parse().ok()?,
                name: &rest[digits + 1..],
            })
        })
    }

    /// `basename:line name`.
    pub fn short(&self) -> String {
        format!("{}:{} {}", basename(self.file), self.line, self.name)
    }

    /// `basename name`.
    pub fn short_without_line(&self) -> String {
        format!("{} {}", basename(self.file), self.name)
    }
}

impl std::fmt::Display for FrameLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.name)
    }
}

impl serde::Serialize for FrameLabel<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut frame = serializer.serialize_struct("Frame", 4)?;
        frame.serialize_field("file", self.file)?;
        frame.serialize_field("line", &self.line)?;
        frame.serialize_field("name", self.name)?;
        frame.serialize_field("short", &self.short())?;
        frame.end()
    }
}

/// The short label of a frame given in its full text form (`file:line:name`, as the summary's
/// stacks hold it); other text (`<non-python>`) is its own label. For code that holds only the
/// text, such as a stored summary row.
pub(crate) fn short_frame_label(text: &str) -> String {
    FrameLabel::parse(text).map_or_else(|| text.to_owned(), |label| label.short())
}

/// Every distinct frame of a snapshot.
#[derive(Debug, Default)]
pub struct FrameTable {
    frames: Vec<Frame>,
    index: hashbrown::HashMap<Frame, FrameId, rustc_hash::FxBuildHasher>,
}

/// A frame's fields, borrowed: found in [`FrameTable`] without cloning its texts (a clone of a
/// text the decoding threads share is an atomic write every core contends for).
#[derive(Hash)]
struct FrameKey<'a> {
    // The fields and their order are `Frame`'s, so both hash alike.
    filename: &'a str,
    line: u64,
    name: &'a str,
}

impl hashbrown::Equivalent<Frame> for FrameKey<'_> {
    fn equivalent(&self, frame: &Frame) -> bool {
        self.line == frame.line && self.filename == &*frame.filename && self.name == &*frame.name
    }
}

impl FrameTable {
    pub fn intern(&mut self, frame: Frame) -> FrameId {
        match self.index.get(&frame) {
            Some(&id) => id,
            None => self.add(frame),
        }
    }

    /// Adds `frame`, not in the table yet.
    fn add(&mut self, frame: Frame) -> FrameId {
        let id = self.frames.len() as FrameId;
        self.frames.push(frame.clone());
        self.index.insert(frame, id);
        id
    }

    /// [`FrameTable::intern`] of the frame these fields make, cloning them only for a new one.
    pub fn intern_parts(&mut self, filename: &Arc<str>, line: u64, name: &Arc<str>) -> FrameId {
        let key = FrameKey {
            filename,
            line,
            name,
        };
        match self.index.get(&key) {
            Some(&id) => id,
            None => self.add(Frame {
                filename: filename.clone(),
                line,
                name: name.clone(),
            }),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(filename: &str, line: u64, name: &str) -> Frame {
        Frame {
            filename: filename.into(),
            line,
            name: name.into(),
        }
    }

    /// Every text form of a frame comes from one label, and the full form reads back to it,
    /// even with colons in the path or torch's lineless C++ frames.
    #[test]
    fn a_frame_label_writes_and_reads_back_every_form() {
        for frame in [
            frame("/work/model/train.py", 42, "forward"),
            frame("C:/work/train.py", 7, "<lambda>"),
            frame("??", u64::MAX, "at::native::empty_cuda"),
            frame("train.py", 0, "<module>"),
        ] {
            let label = frame.label();
            let full = label.to_string();
            assert_eq!(
                full,
                format!("{}:{}:{}", frame.filename, frame.line, frame.name)
            );
            assert_eq!(FrameLabel::parse(&full), Some(label), "{full}");
            let short = format!("{}:{} {}", frame.basename(), frame.line, frame.name);
            assert_eq!(label.short(), short);
            assert_eq!(short_frame_label(&full), short);
            assert_eq!(
                label.short_without_line(),
                format!("{} {}", frame.basename(), frame.name)
            );
        }
        assert_eq!(
            frame("/a/b.py", 3, "f").label().short(),
            "b.py:3 f",
            "the pages' label"
        );
        // Text that is not a full frame is its own label.
        for text in [
            "<non-python>",
            "b.py:3 f",
            "no colon",
            "a:notanumber:f",
            "a::f",
            "a:1",
        ] {
            assert_eq!(short_frame_label(text), text);
        }
    }

    #[test]
    fn a_frame_label_serializes_its_parts_and_its_short_form() {
        let frame = frame("/a/b.py", 3, "f");
        let json = serde_json::to_value(frame.label()).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"file": "/a/b.py", "line": 3, "name": "f", "short": "b.py:3 f"})
        );
    }
}
