//! Writing an index: to a temporary name in the index's folder, fsync'd, then renamed into
//! place, so a reader never sees half a file and two writers racing (two servers on one
//! folder) each rename a whole, valid file over the other.

use super::BlobIdentity;
use super::layout::{
    ALIGN, ENTRY_BYTES, HEADER_BYTES, Header, Kind, MAGIC, Meta, SectionEntry, StoredStep,
    TraceMeta,
};
use crate::analysis::{Analysis, Summary};
use crate::snapshot::{Snapshot, StackColumn, TimeColumn};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Writes the index of `snapshot`, analysed as `analysis` and summarised as `summary` with the
/// role rules whose [`UserRules::fingerprint`](crate::analysis::roles::UserRules::fingerprint)
/// is `rules_fingerprint`, made from the blob `blob`, to `path` (atomically: see the module's
/// doc). Returns the bytes written.
pub fn write(
    path: &Path,
    blob: BlobIdentity<'_>,
    snapshot: &Snapshot,
    analysis: &Analysis,
    summary: &Summary,
    rules_fingerprint: u64,
) -> std::io::Result<u64> {
    let blob_id: [u8; 16] = blob
        .id
        .as_bytes()
        .try_into()
        .map_err(|_| std::io::Error::other("a snapshot id is 16 characters"))?;
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)?;
    let temp = temp_path(path);
    // Locked until after the rename: the sweep at a server's start removes only temporary
    // files nobody holds (a writer that died), never one being written by another server on
    // the same folder.
    let claim = claim_temp(&temp)?;
    let written = write_file(
        &temp,
        blob_id,
        blob.bytes,
        snapshot,
        analysis,
        summary,
        rules_fingerprint,
    )
    .and_then(|bytes| {
        std::fs::rename(&temp, path)?;
        // The rename is durable once the folder is.
        std::fs::File::open(folder)?.sync_all()?;
        Ok(bytes)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    drop(claim);
    written
}

/// Creates the temporary file `temp` and takes an exclusive lock on it (`flock`), held as long
/// as the returned file is open. A sweep that got the lock first (between the create and the
/// lock) may have removed it: then this write fails, and the next cold load writes again.
fn claim_temp(temp: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)?;
    file.lock()?;
    if file.metadata()?.nlink() == 0 {
        return Err(std::io::Error::other(
            "another server's start-up sweep removed the temporary index before it was locked",
        ));
    }
    Ok(file)
}

/// A name beside `path` that no other writer uses: this process's id and a counter.
fn temp_path(path: &Path) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    path.with_file_name(name)
}

/// Sections are written as they come, their table kept in memory; the header and table go in
/// last, at the front (room for them is left first).
struct Sections<W> {
    out: W,
    at: u64,
    table: Vec<SectionEntry>,
    /// The open section: its entry so far and the hash of its bytes so far.
    open: Option<(SectionEntry, xxhash_rust::xxh3::Xxh3)>,
}

impl<W: Write + Seek> Sections<W> {
    /// Starts a section at the next aligned offset.
    fn begin(&mut self, kind: Kind, part: usize) -> std::io::Result<()> {
        let padding = self.at.next_multiple_of(ALIGN) - self.at;
        self.out
            .write_all(&[0u8; ALIGN as usize][..padding as usize])?;
        self.at += padding;
        let entry = SectionEntry {
            kind: kind as u32,
            part: u32::try_from(part).map_err(std::io::Error::other)?,
            offset: self.at,
            bytes: 0,
            checksum: 0,
        };
        self.open = Some((entry, xxhash_rust::xxh3::Xxh3::new()));
        Ok(())
    }

    /// Appends to the open section.
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if let Some((entry, hasher)) = &mut self.open {
            hasher.update(bytes);
            entry.bytes += bytes.len() as u64;
        }
        self.out.write_all(bytes)?;
        self.at += bytes.len() as u64;
        Ok(())
    }

    fn end(&mut self) {
        if let Some((mut entry, hasher)) = self.open.take() {
            entry.checksum = hasher.digest();
            self.table.push(entry);
        }
    }

    fn add(&mut self, kind: Kind, part: usize, bytes: &[u8]) -> std::io::Result<()> {
        self.begin(kind, part)?;
        self.put(bytes)?;
        self.end();
        Ok(())
    }
}

/// Sections written per trace and per analysed device (a new column adds one here).
const SECTIONS_PER_TRACE: usize = 10;
const SECTIONS_PER_DEVICE: usize = 19;

fn write_file(
    temp: &Path,
    blob_id: [u8; 16],
    blob_bytes: u64,
    snapshot: &Snapshot,
    analysis: &Analysis,
    summary: &Summary,
    rules_fingerprint: u64,
) -> std::io::Result<u64> {
    // Made (and locked) by `claim_temp`, empty.
    let file = std::fs::OpenOptions::new().write(true).open(temp)?;
    let section_count = 1
        + snapshot.device_traces.len() * SECTIONS_PER_TRACE
        + analysis.devices.len() * SECTIONS_PER_DEVICE;
    let table_end = HEADER_BYTES + section_count as u64 * ENTRY_BYTES;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    out.seek(SeekFrom::Start(table_end))?;
    let mut sections = Sections {
        out,
        at: table_end,
        table: Vec::with_capacity(section_count),
        open: None,
    };

    let meta = serde_json::to_vec(&meta(snapshot, analysis, summary, rules_fingerprint))?;
    sections.add(Kind::Meta, 0, &meta)?;
    for (part, trace) in snapshot.device_traces.iter().enumerate() {
        sections.add(Kind::TraceAction, part, trace.action.as_bytes())?;
        sections.add(Kind::TraceAddr, part, trace.addr.parts().1.as_bytes())?;
        sections.add(Kind::TraceSize, part, trace.size.parts().0.as_bytes())?;
        sections.add(Kind::TraceStream, part, trace.stream.parts().0)?;
        let (times, time_bases) = match &trace.time_us {
            TimeColumn::Narrow { bases, offsets, .. } => (offsets.as_bytes(), bases.as_bytes()),
            TimeColumn::Blocked { offsets, .. } => (offsets.as_bytes(), &[][..]),
            TimeColumn::Wide(values) => (values.as_bytes(), &[][..]),
        };
        sections.add(Kind::TraceTime, part, times)?;
        sections.add(Kind::TraceTimeBases, part, time_bases)?;
        sections.add(Kind::TraceStack, part, trace.stack.as_bytes())?;
        sections.add(
            Kind::TraceCompileContext,
            part,
            trace.compile_context.column().as_bytes(),
        )?;
        sections.add(
            Kind::TraceUserMetadata,
            part,
            trace.user_metadata.column().as_bytes(),
        )?;
        sections.add(Kind::TraceCategory, part, trace.category.as_bytes())?;
    }
    for (part, device) in analysis.devices.iter().enumerate() {
        let replay = &device.replay;
        sections.add(
            Kind::AllocatedBeforeStep,
            part,
            replay.curve.before_step.as_bytes(),
        )?;
        let events = &replay.event_allocations;
        sections.add(Kind::EventOpens, part, events.opens.words().as_bytes())?;
        sections.add(Kind::EventCloses, part, events.closes.words().as_bytes())?;
        sections.add(Kind::ClosedAllocations, part, events.closed.as_bytes())?;
        let lifetimes = &replay.lifetimes;
        sections.add(Kind::LevelFirst, part, lifetimes.level_first.as_bytes())?;
        sections.add(Kind::BucketFirst, part, lifetimes.bucket_first.as_bytes())?;
        sections.add(Kind::ByStart, part, lifetimes.by_start.as_bytes())?;
        sections.add(Kind::ByEnd, part, lifetimes.by_end.as_bytes())?;
        sections.add(
            Kind::FreedWithoutAlloc,
            part,
            replay.freed_without_alloc.as_bytes(),
        )?;
        sections.add(Kind::Ghosts, part, replay.ghosts.as_bytes())?;
        let allocations = &replay.allocations;
        let addrs = allocations.addr.parts().1;
        sections.add(Kind::AllocationAddr, part, addrs.as_bytes())?;
        let sizes = allocations.size.parts().0;
        sections.add(Kind::AllocationSize, part, sizes.as_bytes())?;
        sections.add(Kind::AllocationStream, part, allocations.stream.parts().0)?;
        sections.add(Kind::AllocationStack, part, allocations.stack.as_bytes())?;
        sections.add(Kind::AllocationStart, part, allocations.start.as_bytes())?;
        sections.add(Kind::AllocationEnd, part, allocations.end.as_bytes())?;
        sections.add(
            Kind::AllocationVersion,
            part,
            allocations.version.as_bytes(),
        )?;
        sections.add(Kind::AllocationOrigin, part, allocations.origin.as_bytes())?;
        let steps: Vec<StoredStep> = replay
            .reserved_steps
            .iter()
            .map(|&(event, bytes)| StoredStep {
                event,
                padding: 0,
                bytes,
            })
            .collect();
        sections.add(Kind::ReservedSteps, part, bytemuck::cast_slice(&steps))?;
    }

    let Sections { out, at, table, .. } = sections;
    // The table was given room for `section_count` entries before the sections were written.
    if table.len() != section_count {
        return Err(std::io::Error::other(format!(
            "the index has {} sections where its table has room for {section_count}",
            table.len()
        )));
    }
    let mut header = Header {
        magic: MAGIC,
        version: super::FORMAT_VERSION,
        sections: table.len() as u32,
        blob_bytes,
        blob_id,
        file_bytes: at,
        checksum: 0,
        reserved: 0,
    };
    header.checksum = header_checksum(&header, &table);
    let mut file = out
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(bytemuck::bytes_of(&header))?;
    file.write_all(bytemuck::cast_slice(&table))?;
    file.set_len(at)?;
    file.sync_all()?;
    Ok(at)
}

/// xxh3 of the header (its checksum field taken as 0) and the section table.
pub(super) fn header_checksum(header: &Header, table: &[SectionEntry]) -> u64 {
    let mut unsummed = *header;
    unsummed.checksum = 0;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(bytemuck::bytes_of(&unsummed));
    hasher.update(bytemuck::cast_slice(table));
    hasher.digest()
}

fn meta(
    snapshot: &Snapshot,
    analysis: &Analysis,
    summary: &Summary,
    rules_fingerprint: u64,
) -> Meta {
    Meta {
        snapview_version: env!("CARGO_PKG_VERSION").to_owned(),
        rules_fingerprint,
        segments: snapshot.segments.clone(),
        allocator_settings: snapshot.allocator_settings.clone(),
        external_annotations: snapshot.external_annotations.clone(),
        unknown_keys: snapshot.unknown_keys.clone(),
        frames: snapshot
            .frames
            .iter()
            .map(|(_, frame)| {
                (
                    frame.filename.to_string(),
                    frame.line,
                    frame.name.to_string(),
                )
            })
            .collect(),
        stacks: (1..snapshot.stacks.len())
            .map(|stack| snapshot.stacks.get(stack as u32).to_vec())
            .collect(),
        source: snapshot.source.clone(),
        traces: snapshot
            .device_traces
            .iter()
            .map(|trace| TraceMeta {
                events: trace.len(),
                streams: trace.stream.parts().1.map(<[u64]>::to_vec),
                large_sizes: trace.size.parts().1.to_vec(),
                wide_stacks: matches!(trace.stack, StackColumn::Wide(_)),
                addr_bases: trace.addr.parts().0.to_vec(),
                addrs_aside: trace.addr.parts().2.to_vec(),
                time_bases: match &trace.time_us {
                    TimeColumn::Blocked { bases, .. } => Some(bases.clone()),
                    TimeColumn::Narrow { .. } | TimeColumn::Wide(_) => None,
                },
                times_aside: trace.time_us.times_aside(),
                strings: trace.strings.clone(),
                device_free: trace.device_free.iter().map(|(&e, &b)| (e, b)).collect(),
                unknown_actions: trace.unknown_actions.clone(),
                categories: trace.categories.clone(),
                has_time: trace.has_time,
            })
            .collect(),
        devices: analysis
            .devices
            .iter()
            .map(|device| super::layout::DeviceMeta {
                device: device.device,
                allocated_at_start: device.replay.allocated_at_start,
                allocated_peak: device.replay.first_peak(),
                reserved_at_start: device.replay.reserved_at_start,
                allocations: device.replay.allocations.len(),
                allocation_streams: device
                    .replay
                    .allocations
                    .stream
                    .parts()
                    .1
                    .map(<[u64]>::to_vec),
                allocation_large_sizes: device.replay.allocations.size.parts().1.to_vec(),
                allocation_addr_bases: device.replay.allocations.addr.parts().0.to_vec(),
                allocation_addrs_aside: device.replay.allocations.addr.parts().2.to_vec(),
                allocation_wide_stacks: matches!(
                    device.replay.allocations.stack,
                    StackColumn::Wide(_)
                ),
                pending_requests: device.replay.pending_requests.clone(),
            })
            .collect(),
        summary: summary.clone(),
        top_stack_ids: summary
            .devices
            .iter()
            .map(|device| device.top_stacks_at_peak.iter().map(|s| s.stack).collect())
            .collect(),
    }
}
