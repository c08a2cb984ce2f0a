//! Opening an index: map the file, check it, and hand out the columns as windows of the map.

use super::layout::{
    ENTRY_BYTES, HEADER_BYTES, Header, Kind, MAGIC, MAX_SECTIONS, Meta, SectionEntry, StoredStep,
};
use super::write::header_checksum;
use super::{BlobIdentity, IndexError, Verify};
use crate::analysis::ranked_bits::RankedBits;
use crate::analysis::replay::{Allocations, Curve, EventAllocations, LifetimeIndex, Replay};
use crate::analysis::{Analysis, DeviceAnalysis, Summary};
use crate::snapshot::{
    AddrColumn, Column, Frame, FrameTable, SharedMap, SizeColumn, Snapshot, SparseIds, StackColumn,
    StackTable, StreamColumn, TimeColumn, Trace, blocked_times, narrow_times,
};
use bytemuck::Pod;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A snapshot opened from its index: its numeric columns mapped, the rest on the heap.
#[derive(Debug)]
pub struct Opened {
    pub snapshot: Snapshot,
    pub analysis: Analysis,
    /// The summary as stored: made with the rules whose fingerprint is `rules_fingerprint`.
    pub summary: Summary,
    pub rules_fingerprint: u64,
}

/// Opens the index at `path` made from `blob`, checking it as `verify` says. Any error means
/// the file is not to be trusted: the caller reads the snapshot again (and writes a new one).
/// Only a regular file is opened ([`open_regular`]): a symlink, FIFO or device at `path` is
/// refused with [`IndexError::NotRegular`].
///
/// # Safety
///
/// The file is memory-mapped, and the columns of the returned snapshot are windows of that
/// map for as long as it lives. Nothing may truncate or write the file in place while they do:
/// reading a page past a new end raises SIGBUS, which kills the process (a shared map cannot
/// be protected from that), and bytes changed under the map change answers that were checked.
/// Replacing the file by rename (what [`write`](super::write) does) or deleting it is safe: the
/// map keeps the old inode.
pub unsafe fn open(
    path: &Path,
    blob: BlobIdentity<'_>,
    verify: Verify,
) -> Result<Opened, IndexError> {
    let file = open_regular(path)?;
    // SAFETY: the caller promises (this function's contract) that nobody truncates or edits
    // the file in place while the map lives; `file` is a regular file (checked on the open
    // descriptor), so the map is of that file's pages and nothing else.
    let map: SharedMap = Arc::new(unsafe { memmap2::Mmap::map(&file) }?);
    let sections = Sections::check(map, blob, verify)?;
    let meta: Meta = serde_json::from_slice(sections.bytes(Kind::Meta, 0)?)
        .map_err(|e| IndexError::malformed(format!("its JSON section: {e}")))?;
    if meta.snapview_version != env!("CARGO_PKG_VERSION") {
        return Err(IndexError::Build {
            found: meta.snapview_version,
        });
    }
    let snapshot = snapshot(&sections, &meta)?;
    let analysis = analysis(&sections, &meta, &snapshot)?;
    let mut summary = meta.summary;
    if summary.devices.len() != meta.top_stack_ids.len() {
        return Err(IndexError::malformed("the summary's stacks"));
    }
    for (device, ids) in summary.devices.iter_mut().zip(meta.top_stack_ids) {
        if device.top_stacks_at_peak.len() != ids.len() {
            return Err(IndexError::malformed("the summary's stacks"));
        }
        for (stack, id) in device.top_stacks_at_peak.iter_mut().zip(ids) {
            stack.stack = id;
        }
    }
    Ok(Opened {
        snapshot,
        analysis,
        summary,
        rules_fingerprint: meta.rules_fingerprint,
    })
}

/// Opens `path` for reading if it is a regular file: never through a symlink (`O_NOFOLLOW`),
/// never waiting on a FIFO or a device (`O_NONBLOCK` makes the open itself return at once),
/// and checked on the open descriptor (`fstat`), so nothing can swap the path between the
/// check and the use. A missing file is [`IndexError::Missing`], anything else not a regular
/// file [`IndexError::NotRegular`].
pub fn open_regular(path: &Path) -> Result<std::fs::File, IndexError> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(IndexError::Missing);
        }
        // What O_NOFOLLOW answers for a symlink.
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            return Err(IndexError::NotRegular("a symbolic link"));
        }
        Err(error) => return Err(error.into()),
    };
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    use std::os::unix::fs::FileTypeExt;
    Err(IndexError::NotRegular(if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "something else"
    }))
}

/// The header and section table at the start of `bytes` (the start of a file of `file_bytes`
/// bytes), checked: magic, version, length, table bounds and the header's checksum.
fn header_and_table(
    bytes: &[u8],
    file_bytes: u64,
) -> Result<(Header, Vec<SectionEntry>), IndexError> {
    let header_bytes = bytes
        .get(..HEADER_BYTES as usize)
        .ok_or(IndexError::Length {
            expected: HEADER_BYTES,
            actual: file_bytes,
        })?;
    let header: Header = bytemuck::pod_read_unaligned(header_bytes);
    if header.magic != MAGIC {
        return Err(IndexError::BadMagic);
    }
    if header.version != super::FORMAT_VERSION {
        return Err(IndexError::Version {
            found: header.version,
        });
    }
    if header.file_bytes != file_bytes {
        return Err(IndexError::Length {
            expected: header.file_bytes,
            actual: file_bytes,
        });
    }
    if header.sections > MAX_SECTIONS {
        return Err(IndexError::malformed("too many sections"));
    }
    let table_end = HEADER_BYTES + u64::from(header.sections) * ENTRY_BYTES;
    let table_bytes = bytes
        .get(HEADER_BYTES as usize..table_end as usize)
        .ok_or_else(|| IndexError::malformed("the section table lies past the end"))?;
    let table: Vec<SectionEntry> = table_bytes
        .chunks_exact(ENTRY_BYTES as usize)
        .map(bytemuck::pod_read_unaligned)
        .collect();
    if header_checksum(&header, &table) != header.checksum {
        return Err(IndexError::Checksum("the header".into()));
    }
    Ok((header, table))
}

/// Checks every section of the index at `path` against its checksum, reading the file in
/// order through a small buffer rather than mapping it, so the check does not add the file to
/// this process's resident memory (the page cache holds it; the OS may drop it). The server
/// runs it in the background after opening an index with [`Verify::Structure`].
pub fn verify_sections(path: &Path) -> Result<(), IndexError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = open_regular(path)?;
    let file_bytes = file.metadata()?.len();
    let mut start = vec![0u8; HEADER_BYTES as usize];
    file.read_exact(&mut start)
        .map_err(|_| IndexError::Length {
            expected: HEADER_BYTES,
            actual: file_bytes,
        })?;
    let header: Header = bytemuck::pod_read_unaligned(&start);
    let table_bytes = (u64::from(header.sections.min(MAX_SECTIONS)) * ENTRY_BYTES)
        .min(file_bytes.saturating_sub(HEADER_BYTES));
    start.resize((HEADER_BYTES + table_bytes) as usize, 0);
    file.read_exact(&mut start[HEADER_BYTES as usize..])?;
    let (_, mut table) = header_and_table(&start, file_bytes)?;
    table.sort_by_key(|entry| entry.offset);
    let mut buffer = vec![0u8; 1 << 20];
    for entry in table {
        let in_file = entry
            .offset
            .checked_add(entry.bytes)
            .is_some_and(|end| end <= file_bytes);
        if !in_file {
            return Err(IndexError::malformed(format!(
                "section {} of part {} lies outside the file",
                entry.kind, entry.part
            )));
        }
        file.seek(SeekFrom::Start(entry.offset))?;
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut left = entry.bytes;
        while left > 0 {
            let chunk = &mut buffer[..left.min(1 << 20) as usize];
            file.read_exact(chunk)?;
            hasher.update(chunk);
            left -= chunk.len() as u64;
        }
        if hasher.digest() != entry.checksum {
            return Err(IndexError::Checksum(format!(
                "section {} of part {}",
                entry.kind, entry.part
            )));
        }
    }
    Ok(())
}

/// The mapped file with its header and section table checked.
struct Sections {
    map: SharedMap,
    table: HashMap<(u32, u32), SectionEntry>,
}

impl Sections {
    fn check(map: SharedMap, blob: BlobIdentity<'_>, verify: Verify) -> Result<Self, IndexError> {
        let (header, table) = header_and_table(&map, map.len() as u64)?;
        let table_end = HEADER_BYTES + u64::from(header.sections) * ENTRY_BYTES;
        if header.blob_id != blob.id.as_bytes() || header.blob_bytes != blob.bytes {
            return Err(IndexError::OtherBlob {
                found: format!(
                    "{} of {} bytes",
                    String::from_utf8_lossy(&header.blob_id),
                    header.blob_bytes
                ),
            });
        }
        let mut by_kind = HashMap::with_capacity(table.len());
        for entry in table {
            let in_file = entry
                .offset
                .checked_add(entry.bytes)
                .is_some_and(|end| entry.offset >= table_end && end <= header.file_bytes);
            if !in_file {
                return Err(IndexError::malformed(format!(
                    "section {} of part {} lies outside the file",
                    entry.kind, entry.part
                )));
            }
            // The JSON section is checked always, as it is read whole on open anyway.
            if verify == Verify::Everything || entry.kind == Kind::Meta as u32 {
                let bytes = &map[entry.offset as usize..(entry.offset + entry.bytes) as usize];
                if xxhash_rust::xxh3::xxh3_64(bytes) != entry.checksum {
                    return Err(IndexError::Checksum(format!(
                        "section {} of part {}",
                        entry.kind, entry.part
                    )));
                }
            }
            by_kind.insert((entry.kind, entry.part), entry);
        }
        Ok(Self {
            map,
            table: by_kind,
        })
    }

    fn entry(&self, kind: Kind, part: usize) -> Result<SectionEntry, IndexError> {
        u32::try_from(part)
            .ok()
            .and_then(|part| self.table.get(&(kind as u32, part)))
            .copied()
            .ok_or_else(|| IndexError::malformed(format!("no section {kind:?} for part {part}")))
    }

    fn bytes(&self, kind: Kind, part: usize) -> Result<&[u8], IndexError> {
        let entry = self.entry(kind, part)?;
        // In the file: checked in `Sections::check`.
        Ok(&self.map[entry.offset as usize..(entry.offset + entry.bytes) as usize])
    }

    /// A stream column: codes indexing `table` when there is one, else raw values.
    fn streams(
        &self,
        kind: Kind,
        part: usize,
        len: Option<usize>,
        table: &Option<Vec<u64>>,
    ) -> Result<StreamColumn, IndexError> {
        Ok(match table {
            Some(streams) => StreamColumn::Coded {
                codes: self.column(kind, part, len)?,
                streams: streams.clone(),
            },
            None => StreamColumn::Raw(self.column(kind, part, len)?),
        })
    }

    /// An address column: the offsets of section `kind`, with its bases and the addresses set
    /// aside from the JSON.
    fn addrs(
        &self,
        kind: Kind,
        part: usize,
        len: Option<usize>,
        bases: &[u64],
        aside: &[(usize, u64)],
    ) -> Result<AddrColumn, IndexError> {
        AddrColumn::from_parts(
            bases.to_vec(),
            self.column(kind, part, len)?,
            aside.to_vec(),
        )
        .ok_or_else(|| {
            IndexError::malformed(format!(
                "{kind:?} of part {part}: address bases or addresses aside do not fit"
            ))
        })
    }

    /// A stack column: section `kind` holds `u32` ids if `wide`, else `u16`s.
    fn stacks(
        &self,
        kind: Kind,
        part: usize,
        len: Option<usize>,
        wide: bool,
    ) -> Result<StackColumn, IndexError> {
        Ok(if wide {
            StackColumn::Wide(self.column(kind, part, len)?)
        } else {
            StackColumn::Narrow(self.column(kind, part, len)?)
        })
    }

    /// The column `kind` of `part`, mapped; `len`, when given, is the count it must hold.
    fn column<T: Pod>(
        &self,
        kind: Kind,
        part: usize,
        len: Option<usize>,
    ) -> Result<Column<T>, IndexError> {
        let entry = self.entry(kind, part)?;
        let column = Column::mapped(
            self.map.clone(),
            entry.offset as usize,
            entry.bytes as usize,
        )
        .map_err(|e| IndexError::malformed(format!("{kind:?} of part {part}: {e}")))?;
        match len {
            Some(len) if column.len() != len => Err(IndexError::malformed(format!(
                "{kind:?} of part {part} holds {} values, not {len}",
                column.len()
            ))),
            _ => Ok(column),
        }
    }
}

fn snapshot(sections: &Sections, meta: &Meta) -> Result<Snapshot, IndexError> {
    let mut frames = FrameTable::default();
    for (id, (filename, line, name)) in meta.frames.iter().enumerate() {
        let frame = Frame {
            filename: filename.as_str().into(),
            line: *line,
            name: name.as_str().into(),
        };
        if frames.intern(frame) as usize != id {
            return Err(IndexError::malformed("a frame is stored twice"));
        }
    }
    let mut stacks = StackTable::default();
    for (i, frame_ids) in meta.stacks.iter().enumerate() {
        if frame_ids.iter().any(|&f| f as usize >= frames.len()) {
            return Err(IndexError::malformed(
                "a stack names a frame that is not there",
            ));
        }
        if stacks.intern(frame_ids) as usize != i + 1 {
            return Err(IndexError::malformed("a stack is stored twice"));
        }
    }
    let device_traces = meta
        .traces
        .iter()
        .enumerate()
        .map(|(part, stored)| trace(sections, part, stored))
        .collect::<Result<_, _>>()?;
    Ok(Snapshot {
        segments: meta.segments.clone(),
        device_traces,
        allocator_settings: meta.allocator_settings.clone(),
        external_annotations: meta.external_annotations.clone(),
        unknown_keys: meta.unknown_keys.clone(),
        frames,
        stacks,
        source: meta.source.clone(),
    })
}

fn trace(
    sections: &Sections,
    part: usize,
    stored: &super::layout::TraceMeta,
) -> Result<Trace, IndexError> {
    let events = Some(stored.events);
    let category = sections.column(Kind::TraceCategory, part, None)?;
    if category.len() > stored.events {
        return Err(IndexError::malformed(
            "a category column longer than its trace",
        ));
    }
    let size = SizeColumn::from_parts(
        sections.column(Kind::TraceSize, part, events)?,
        stored.large_sizes.clone(),
    )
    .ok_or_else(|| IndexError::malformed("large sizes out of order or past the trace"))?;
    let addr = sections.addrs(
        Kind::TraceAddr,
        part,
        events,
        &stored.addr_bases,
        &stored.addrs_aside,
    )?;
    let stream = sections.streams(Kind::TraceStream, part, events, &stored.streams)?;
    let time_us = match (&stored.times_aside, &stored.time_bases) {
        (Some(aside), _) => narrow_times(
            sections.column(Kind::TraceTimeBases, part, None)?,
            sections.column(Kind::TraceTime, part, events)?,
            aside.clone(),
        )
        .ok_or_else(|| {
            IndexError::malformed(
                "a time column without a base per block, or times aside out of order",
            )
        })?,
        (None, Some(bases)) => blocked_times(
            bases.clone(),
            sections.column(Kind::TraceTime, part, events)?,
        )
        .ok_or_else(|| IndexError::malformed("a time column without a base per block"))?,
        (None, None) => TimeColumn::Wide(sections.column(Kind::TraceTime, part, events)?),
    };
    // Text ids are stored up to the last event that has one.
    let sparse = |kind| -> Result<SparseIds, IndexError> {
        let ids: Column<u32> = sections.column(kind, part, None)?;
        if ids.len() > stored.events {
            return Err(IndexError::malformed(
                "text ids past the end of their trace",
            ));
        }
        Ok(SparseIds::from_column(ids))
    };
    Ok(Trace {
        action: sections.column(Kind::TraceAction, part, events)?,
        addr,
        size,
        stream,
        time_us,
        stack: sections.stacks(Kind::TraceStack, part, events, stored.wide_stacks)?,
        compile_context: sparse(Kind::TraceCompileContext)?,
        user_metadata: sparse(Kind::TraceUserMetadata)?,
        strings: stored.strings.clone(),
        device_free: stored.device_free.iter().copied().collect(),
        unknown_actions: stored.unknown_actions.clone(),
        category,
        categories: stored.categories.clone(),
        has_time: stored.has_time,
    })
}

fn analysis(sections: &Sections, meta: &Meta, snapshot: &Snapshot) -> Result<Analysis, IndexError> {
    let devices = meta
        .devices
        .iter()
        .enumerate()
        .map(|(part, stored)| {
            let event_count = snapshot.trace(stored.device).len();
            let events = Some(event_count);
            let count = Some(stored.allocations);
            // Mapped, as the trace is: a restart keeps none of them on the heap.
            let allocations = Allocations {
                addr: sections.addrs(
                    Kind::AllocationAddr,
                    part,
                    count,
                    &stored.allocation_addr_bases,
                    &stored.allocation_addrs_aside,
                )?,
                size: SizeColumn::from_parts(
                    sections.column(Kind::AllocationSize, part, count)?,
                    stored.allocation_large_sizes.clone(),
                )
                .ok_or_else(|| {
                    IndexError::malformed("large allocation sizes out of order or past the end")
                })?,
                stream: sections.streams(
                    Kind::AllocationStream,
                    part,
                    count,
                    &stored.allocation_streams,
                )?,
                stack: sections.stacks(
                    Kind::AllocationStack,
                    part,
                    count,
                    stored.allocation_wide_stacks,
                )?,
                start: sections.column(Kind::AllocationStart, part, count)?,
                end: sections.column(Kind::AllocationEnd, part, count)?,
                version: sections.column(Kind::AllocationVersion, part, count)?,
                origin: sections.column(Kind::AllocationOrigin, part, count)?,
            };
            let steps: Column<StoredStep> = sections.column(Kind::ReservedSteps, part, None)?;
            if stored
                .pending_requests
                .iter()
                .any(|&(_, id)| id as usize >= stored.allocations)
            {
                return Err(IndexError::malformed("a pending free names no allocation"));
            }
            let pending_steps =
                crate::analysis::replay::pending_over_time(&allocations, &stored.pending_requests);
            let events_bits = |kind| {
                let words = sections.column(kind, part, Some(event_count.div_ceil(64)))?;
                RankedBits::from_words(words, event_count)
                    .ok_or_else(|| IndexError::malformed(format!("{kind:?} of part {part}")))
            };
            let event_allocations = EventAllocations::from_parts(
                events_bits(Kind::EventOpens)?,
                events_bits(Kind::EventCloses)?,
                sections.column(Kind::ClosedAllocations, part, None)?,
            )
            .filter(|table| table.opened() <= stored.allocations)
            .ok_or_else(|| IndexError::malformed("events that open or close no allocation"))?;
            let replay = Replay {
                pending_requests: stored.pending_requests.clone(),
                pending_steps,
                allocations,
                curve: Curve {
                    before_step: sections.column(
                        Kind::AllocatedBeforeStep,
                        part,
                        events.map(Curve::steps_for),
                    )?,
                },
                allocated_at_start: stored.allocated_at_start,
                reserved_steps: steps.iter().map(|step| (step.event, step.bytes)).collect(),
                reserved_at_start: stored.reserved_at_start,
                event_allocations,
                lifetimes: LifetimeIndex {
                    level_first: sections.column(Kind::LevelFirst, part, None)?,
                    bucket_first: sections.column(Kind::BucketFirst, part, None)?,
                    by_start: sections.column(Kind::ByStart, part, None)?,
                    by_end: sections.column(Kind::ByEnd, part, None)?,
                },
                freed_without_alloc: sections.column(Kind::FreedWithoutAlloc, part, None)?,
                ghosts: sections.column(Kind::Ghosts, part, None)?,
                event_matches: Default::default(),
                peak: stored.allocated_peak.into(),
                step_extremes: Default::default(),
            };
            Ok(DeviceAnalysis::from_stored(stored.device, replay))
        })
        .collect::<Result<_, IndexError>>()?;
    Ok(Analysis { devices })
}
