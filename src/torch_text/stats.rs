//! `segsum(snapshot)`: the page map of every large segment, then the totals, and the checks
//! that refuse a file whose page maps no machine could hold.

use super::*;

/// torch's `PAGE_SIZE`: one character of the `segsum` page map stands for 20 MiB.
pub const PAGE_SIZE: u64 = 20 * 1024 * 1024;

/// The `legend` string `segsum` appends, verbatim (it starts with an empty line).
const LEGEND: &str = "
Legend:
    [a     ] - a segment in the allocator
     ^-- a page 20.0MiB of memory in the segment
    a-z: pages filled with a single block's content
    ' ': page is completely free
    *: page if completely full with multiple blocks
    0-9: page is partially full with tensors of multiple blocks (9 == 90% full)
    (X% internal) - of the free memory, X% is free because we rounded the size of the allocation.
";

/// `segsum(snapshot)`, byte for byte: how the allocator has filled its segments.
///
/// Segments are visited in torch's order: a stable sort by `(total_size, calc_active)`. Only
/// segments of at least [`PAGE_SIZE`] get a page-map line, but every segment counts in the
/// totals. The page map places each `active_allocated` block at its offset in the segment (the
/// running sum of the *rounded* sizes of the blocks before it) with its *requested* length,
/// so rounding waste shows as free space. A page touched by one such block shows the block's
/// letter (`a` + its index among the segment's active blocks, mod 26); a page touched by
/// several shows the tenths of the page they fill (`0`-`9`, `*` when full), with the fraction
/// accumulated in floating point exactly as torch does.
///
/// A file whose segments are larger than any machine's memory (a hostile or corrupt size such
/// as 2^63) would need a page map of billions of characters, which torch itself cannot build
/// (it raises `MemoryError`); it is refused with [`ReportTooLarge`] before anything is sized by
/// it.
pub fn stats(snapshot: &Snapshot) -> Result<String, ReportTooLarge> {
    check_page_maps(snapshot)?;
    Ok(render(|out| write_stats(out, snapshot)))
}

/// Characters of `segsum` page maps a file may need in all: 2^24 pages of 20 MiB is 320 TiB of
/// reserved memory, a hundred times more than the largest machines hold.
const MAX_PAGE_MAP_CHARS: u128 = 1 << 24;

/// Page cells the blocks of a file may touch in all. Blocks of a real segment do not overlap,
/// so each page is touched once or twice; hostile requested sizes make every block span the
/// whole segment.
const MAX_PAGE_MAP_WORK: u128 = 1 << 26;

/// The pages of a segment's map (0 for a segment below [`PAGE_SIZE`], which gets no map line
/// but still needs its pages counted: torch builds its map anyway).
fn page_count(total_size: u64) -> u128 {
    u128::from(total_size).div_ceil(u128::from(PAGE_SIZE))
}

/// Refuses a snapshot whose page maps would be absurdly large, before any is allocated.
fn check_page_maps(snapshot: &Snapshot) -> Result<(), ReportTooLarge> {
    let mut chars = 0u128;
    let mut work = 0u128;
    for segment in &snapshot.segments {
        let pages = page_count(segment.total_size);
        chars += pages;
        if chars > MAX_PAGE_MAP_CHARS {
            return Err(ReportTooLarge(format!(
                "the segments total more than {} (the segment at address {} alone is {} bytes); no machine has that much memory, so this snapshot's sizes are corrupt and `stats` refuses to draw their page maps",
                format_size_f64((MAX_PAGE_MAP_CHARS * u128::from(PAGE_SIZE)) as f64),
                segment.address,
                segment.total_size
            )));
        }
        for block in &segment.blocks {
            work += u128::from(block.requested_size)
                .div_ceil(u128::from(PAGE_SIZE))
                .min(pages)
                + 1;
        }
        if work > MAX_PAGE_MAP_WORK {
            return Err(ReportTooLarge(format!(
                "the blocks of the segment at address {} overlap far beyond its size (their requested sizes exceed it); this snapshot is corrupt and `stats` refuses to draw its page maps",
                segment.address
            )));
        }
    }
    Ok(())
}

fn write_stats(out: &mut String, snapshot: &Snapshot) -> fmt::Result {
    let page = i128::from(PAGE_SIZE);
    writeln!(
        out,
        "Summary of segments >= {} in size",
        format_size(PAGE_SIZE)
    )?;
    let mut order: Vec<(&Segment, (u64, i128))> = snapshot
        .segments
        .iter()
        .map(|s| (s, (s.total_size, calc_active(s))))
        .collect();
    // `sort_by_key` is stable, like Python's `sorted`: equal keys keep file order.
    order.sort_by_key(|&(_, key)| key);

    let (mut total_reserved, mut total_allocated) = (0i128, 0i128);
    let (mut free_external, mut free_internal) = (0i128, 0i128);
    for (segment, _) in order {
        let total_size = i128::from(segment.total_size);
        total_reserved += total_size;

        let (mut seg_external, mut seg_internal, mut seg_allocated) = (0i128, 0i128, 0i128);
        // (offset in the segment, requested length) of each active block.
        let mut ranges: Vec<(i128, i128)> = Vec::new();
        let mut offset = 0i128;
        for block in &segment.blocks {
            let size = i128::from(block.size);
            if block.state == BlockState::ActiveAllocated {
                let allocated = accounted_size(block);
                ranges.push((offset, allocated));
                seg_allocated += allocated;
                seg_internal += size - allocated;
            } else {
                seg_external += size;
            }
            offset += size;
        }
        total_allocated += seg_allocated;
        free_external += seg_external;
        free_internal += seg_internal;

        // Python's `//` floors; with a positive divisor that is `div_euclid`.
        let pages = usize::try_from((total_size - 1).div_euclid(page) + 1).unwrap_or(0);
        let mut occupied = vec![' '; pages];
        let mut frac = vec![0.0f64; pages];
        for (i, &(start, size)) in ranges.iter().enumerate() {
            let finish = start + size;
            // Only pages inside the segment are drawn (see below), so the loop visits no
            // others: a block's size alone must not decide how long it runs.
            let first = start.div_euclid(page).max(0);
            let last = ((finish - 1).div_euclid(page) + 1).min(pages as i128);
            let letter = char::from(b'a' + (i % 26) as u8);
            for j in first..last {
                // torch would raise IndexError for blocks past the segment's end; skip them.
                let Some(slot) = usize::try_from(j).ok().filter(|&j| j < pages) else {
                    continue;
                };
                let s = start.max(j * page);
                let e = finish.min((j + 1) * page);
                frac[slot] += (e - s) as f64 / page as f64;
                if occupied[slot] != ' ' {
                    // `int()` truncates; an index past '*' would be torch's IndexError.
                    let tenths = (frac[slot] * 10.0) as usize;
                    occupied[slot] = "0123456789*".chars().nth(tenths).unwrap_or('*');
                } else {
                    occupied[slot] = letter;
                }
            }
        }
        if segment.total_size >= PAGE_SIZE {
            let body: String = occupied.into_iter().collect();
            let stream = if segment.stream != 0 {
                format!(" stream_{}", segment.stream)
            } else {
                String::new()
            };
            writeln!(
                out,
                "[{body}] {} allocated, {} free{stream}",
                bytes_repr(total_size),
                report_free(seg_external, seg_internal)
            )?;
        }
    }
    writeln!(out, "segments: {}", snapshot.segments.len())?;
    writeln!(out, "total_reserved: {}", bytes_repr(total_reserved))?;
    writeln!(out, "total_allocated: {}", bytes_repr(total_allocated))?;
    writeln!(
        out,
        "total_free: {}",
        report_free(free_external, free_internal)
    )?;
    out.push_str(LEGEND);
    Ok(())
}
