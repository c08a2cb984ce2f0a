//! An index reads back as what was written, and anything wrong with the file is refused.

use super::layout::{HEADER_BYTES, Header, SectionEntry};
use super::*;
use crate::analysis::{Analysis, Summary};
use crate::snapshot::Snapshot;
use std::path::{Path, PathBuf};

const ID: &str = "0123456789abcdef";

/// [`super::open`] for these tests' files.
fn open(path: &Path, blob: BlobIdentity<'_>, verify: Verify) -> Result<read::Opened, IndexError> {
    // SAFETY: each test's index is in its own temporary folder, and nothing truncates or
    // edits it in place while the returned map lives (the tests that damage a file do it
    // between opens, after the previous `Opened` was dropped).
    unsafe { super::open(path, blob, verify) }
}

fn blob(bytes: u64) -> BlobIdentity<'static> {
    BlobIdentity { id: ID, bytes }
}

/// `name` analysed and written to an index in `dir`: the snapshot, its analysis and summary,
/// and the index's path.
fn written(name: &str, dir: &Path) -> (Snapshot, Analysis, Summary, PathBuf) {
    let (snapshot, analysis) = crate::analysis::fixtures::analysed(name);
    let summary = Summary::new(&snapshot, &analysis);
    let path = dir.join(format!("{ID}{FILE_SUFFIX}"));
    write(&path, blob(1234), &snapshot, &analysis, &summary, 7).expect("writes");
    (snapshot, analysis, summary, path)
}

#[test]
fn an_index_reads_back_as_the_snapshot_and_analysis_it_was_made_from() {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["oom.pickle", "multi_device.pickle", "ring_wrap.pickle"] {
        let (snapshot, analysis, summary, path) = written(name, dir.path());
        let opened = open(&path, blob(1234), Verify::Everything).expect("opens");
        assert_eq!(opened.rules_fingerprint, 7);
        assert_eq!(
            serde_json::to_value(&opened.summary).expect("json"),
            serde_json::to_value(&summary).expect("json"),
            "{name}: summary"
        );
        for (stored, made) in opened.summary.devices.iter().zip(&summary.devices) {
            assert_eq!(stored.top_stacks_at_peak, made.top_stacks_at_peak, "{name}");
        }
        assert_eq!(opened.snapshot.segments, snapshot.segments, "{name}");
        assert_eq!(opened.snapshot.frames.len(), snapshot.frames.len());
        assert_eq!(opened.snapshot.stacks.len(), snapshot.stacks.len());
        for (stored, made) in opened
            .snapshot
            .device_traces
            .iter()
            .zip(&snapshot.device_traces)
        {
            assert!(
                stored.addr.parts().1.is_mapped() || stored.is_empty(),
                "{name}: mapped"
            );
            assert_eq!(stored.len(), made.len());
            for event in 0..made.len() {
                assert_eq!(
                    stored.entry(event),
                    made.entry(event),
                    "{name} event {event}"
                );
            }
        }
        assert_eq!(opened.analysis.devices.len(), analysis.devices.len());
        for (stored, made) in opened.analysis.devices.iter().zip(&analysis.devices) {
            let (stored, made) = (&stored.replay, &made.replay);
            assert_eq!(stored.allocations, made.allocations, "{name}");
            assert_eq!(stored.curve, made.curve);
            assert_eq!(stored.event_allocations, made.event_allocations, "{name}");
            assert_eq!(
                stored.first_peak(),
                made.first_peak(),
                "{name}: stored peak"
            );
            assert_eq!(stored.reserved_steps, made.reserved_steps);
            if !made.is_empty() {
                // Mapped columns are the OS's pages, not heap.
                assert!(stored.heap_bytes() < made.heap_bytes(), "{name}: heap");
            }
            for at in [None, Some(0), Some(made.len() / 3), Some(made.len() / 2)]
                .into_iter()
                .chain((!made.is_empty()).then(|| Some(made.len() - 1)))
            {
                assert_eq!(
                    stored.live_after(at),
                    made.live_after(at),
                    "{name} at {at:?}"
                );
            }
        }
    }
}

#[test]
fn times_read_back_from_an_index_whichever_way_they_are_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut snapshot, analysis) = crate::analysis::fixtures::analysed("ring_wrap.pickle");
    let summary = Summary::new(&snapshot, &analysis);
    let events = snapshot.device_traces[0].len();
    assert!(
        events > 2_000,
        "enough events to leave the narrow column: {events}"
    );
    let first = 1_700_000_000_000_000i64;
    /// Microseconds from event `e - 1` to event `e`.
    type Spacing = fn(i64) -> i64;
    // (spacing, the column that keeps such times)
    let spacings: [(Spacing, &str); 3] = [
        (
            |e| if e % 500 == 0 { 90_000 } else { 7 },
            "narrow, with times aside",
        ),
        (|_| 100_000, "blocked"),
        (|_| 3_600_000_000, "wide"),
    ];
    for (spacing, kept) in spacings {
        let mut at = first;
        let times: Vec<i64> = (0..events as i64)
            .map(|e| {
                at += spacing(e);
                at
            })
            .collect();
        let column: crate::snapshot::TimeColumn = times.clone().into();
        let variant = match &column {
            crate::snapshot::TimeColumn::Narrow { .. } => "narrow, with times aside",
            crate::snapshot::TimeColumn::Blocked { .. } => "blocked",
            crate::snapshot::TimeColumn::Wide(_) => "wide",
        };
        assert_eq!(variant, kept);
        snapshot.device_traces[0].time_us = column;
        let path = dir.path().join(format!("{ID}{FILE_SUFFIX}"));
        write(&path, blob(1234), &snapshot, &analysis, &summary, 7).expect("writes");
        let opened = open(&path, blob(1234), Verify::Everything).expect("opens");
        let stored = &opened.snapshot.device_traces[0].time_us;
        assert_eq!(stored.len(), events, "{kept}");
        assert!(
            (0..events).all(|e| stored.get(e) == times[e]),
            "{kept}: times read back"
        );
        std::fs::remove_file(&path).expect("removed");
    }
}

/// Rewrites the header of the index at `path` with `edit` applied, its checksum made right
/// again (so only what `edit` changed is wrong).
fn edit_header(path: &Path, edit: impl FnOnce(&mut Header)) {
    let mut bytes = std::fs::read(path).expect("read");
    let mut header: Header = bytemuck::pod_read_unaligned(&bytes[..HEADER_BYTES as usize]);
    edit(&mut header);
    let table: Vec<SectionEntry> = bytes[HEADER_BYTES as usize..]
        [..header.sections as usize * std::mem::size_of::<SectionEntry>()]
        .chunks_exact(std::mem::size_of::<SectionEntry>())
        .map(bytemuck::pod_read_unaligned)
        .collect();
    header.checksum = write::header_checksum(&header, &table);
    bytes[..HEADER_BYTES as usize].copy_from_slice(bytemuck::bytes_of(&header));
    std::fs::write(path, bytes).expect("write");
}

fn section(path: &Path, kind: layout::Kind) -> SectionEntry {
    let bytes = std::fs::read(path).expect("read");
    let header: Header = bytemuck::pod_read_unaligned(&bytes[..HEADER_BYTES as usize]);
    bytes[HEADER_BYTES as usize..]
        .chunks_exact(std::mem::size_of::<SectionEntry>())
        .take(header.sections as usize)
        .map(bytemuck::pod_read_unaligned::<SectionEntry>)
        .find(|entry| entry.kind == kind as u32 && entry.bytes > 0)
        .expect("section")
}

fn flip_byte(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at as usize] ^= 0x5a;
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn a_corrupt_short_older_or_foreign_index_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fresh = || written("oom.pickle", dir.path()).3;
    let refusal = |path: &Path, verify| {
        open(path, blob(1234), verify)
            .map(|_| ())
            .expect_err("refused")
            .to_string()
    };

    let path = fresh();
    let column = section(&path, layout::Kind::TraceAddr);
    flip_byte(&path, column.offset + column.bytes / 2);
    assert!(refusal(&path, Verify::Everything).contains("checksum mismatch in section"));
    // Checking the structure only does not read the columns (the trade-off `Verify` states).
    assert!(open(&path, blob(1234), Verify::Structure).is_ok());
    // ... which the server's background check then does, through a buffer.
    let reason = verify_sections(&path).expect_err("caught").to_string();
    assert!(reason.contains("checksum mismatch in section"), "{reason}");
    assert!(verify_sections(&fresh()).is_ok(), "a sound index passes");
    for kind in [layout::Kind::AllocationStart, layout::Kind::TraceAction] {
        let path = fresh();
        let column = section(&path, kind);
        flip_byte(&path, column.offset);
        assert!(verify_sections(&path).is_err(), "{kind:?}");
    }

    let path = fresh();
    let meta = section(&path, layout::Kind::Meta);
    flip_byte(&path, meta.offset + meta.bytes / 2);
    assert!(refusal(&path, Verify::Structure).contains("checksum mismatch in section 1"));

    let path = fresh();
    flip_byte(&path, 20); // the blob's byte size, in the header
    assert!(refusal(&path, Verify::Structure).contains("checksum mismatch in the header"));
    let path = fresh();
    flip_byte(&path, HEADER_BYTES + 10); // the section table
    assert!(refusal(&path, Verify::Structure).contains("checksum mismatch in the header"));
    let path = fresh();
    flip_byte(&path, 0);
    assert!(refusal(&path, Verify::Structure).contains("bad magic"));

    let path = fresh();
    let length = std::fs::metadata(&path).expect("meta").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    file.set_len(length - 100).expect("truncate");
    assert!(refusal(&path, Verify::Structure).contains("cut short"));
    assert!(verify_sections(&path).is_err(), "cut short");
    std::fs::write(&path, b"SNAPIDX").expect("write");
    assert!(refusal(&path, Verify::Structure).contains("cut short"));

    let path = fresh();
    edit_header(&path, |header| header.version = FORMAT_VERSION - 1);
    assert!(refusal(&path, Verify::Structure).contains(&format!(
        "version {}, this program reads {FORMAT_VERSION}",
        FORMAT_VERSION - 1
    )));

    let path = fresh();
    let other = open(&path, blob(1235), Verify::Structure).map(|_| ());
    assert!(matches!(other, Err(IndexError::OtherBlob { .. })));
    std::fs::remove_file(&path).expect("remove");
    assert!(matches!(
        open(&path, blob(1234), Verify::Structure).map(|_| ()),
        Err(IndexError::Missing)
    ));
}

#[test]
fn only_a_regular_file_is_opened_never_a_fifo_or_what_a_symlink_names() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (.., path) = written("oom.pickle", dir.path());
    let aside = dir.path().join("aside.snapidx");
    std::fs::rename(&path, &aside).expect("rename");
    std::os::unix::fs::symlink(&aside, &path).expect("symlink");
    let refused = open(&path, blob(1234), Verify::Everything).map(|_| ());
    assert!(
        matches!(refused, Err(IndexError::NotRegular("a symbolic link"))),
        "{refused:?}"
    );
    std::fs::remove_file(&path).expect("remove");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    // Without O_NONBLOCK this open would wait for a writer forever.
    let refused = open(&path, blob(1234), Verify::Everything).map(|_| ());
    assert!(
        matches!(refused, Err(IndexError::NotRegular("a FIFO"))),
        "{refused:?}"
    );
    assert!(matches!(
        verify_sections(&path),
        Err(IndexError::NotRegular("a FIFO"))
    ));
    assert!(matches!(
        open(dir.path(), blob(1234), Verify::Everything).map(|_| ()),
        Err(IndexError::NotRegular("a directory"))
    ));
}
