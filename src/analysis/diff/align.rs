//! Pairing the outer frames of two snapshots that stand for the same caller (a script renamed,
//! a model built from another line), so their stacks line up below it.

use super::{Alignment, FrameKey};
use std::collections::BTreeMap;

/// Live bytes and allocation counts by stack (root first), as both sides are compared.
pub(super) type LiveByStack = BTreeMap<Vec<FrameKey>, (u64, u64)>;

/// Outer frames of `before` and of `after` proposed to stand for the same caller.
type Pairing = (Vec<FrameKey>, Vec<FrameKey>);

/// One-sided stacks tried per side when looking for outer frames to pair: bounds the pairs
/// looked at to this squared, however many stacks a trace has.
const ALIGN_CANDIDATE_STACKS: usize = 64;
/// Candidate pairings checked against every stack, the heaviest first.
const ALIGN_CANDIDATES_TRIED: usize = 128;
/// Distinct stacks that must continue the same way below two paired outer parts: one stack
/// ending alike is a coincidence (every model calls `linear.py forward`), several are a pattern.
const MIN_MATCHED_STACKS: usize = 3;
/// The matched stacks must also hold at least 1/this of the bytes that do not line up frame for
/// frame, on the side with fewer of them: a pairing has to explain the difference, not a corner
/// of it. Two models moved to the GPU by the same `Module.cuda` share a few stacks, but those
/// hold a sliver of either model.
const MIN_MATCHED_SHARE_DIVISOR: u64 = 4;

/// The stacks of `live` that start with `prefix` (a BTreeMap keeps them next to each other).
fn under<'m>(
    live: &'m LiveByStack,
    prefix: &'m [FrameKey],
) -> impl Iterator<Item = (&'m Vec<FrameKey>, &'m (u64, u64))> {
    live.range(prefix.to_vec()..)
        .take_while(move |(key, _)| key.starts_with(prefix))
}

/// Outer frames of `before` and `after` that stand for the same caller, found from the leaf side:
/// two stacks, one on each side only, that end the same way propose their differing outer parts
/// as a pairing; a pairing is kept only when each side alone has its part, and when several
/// stacks below continue identically and hold a fair share of the bytes (see the constants). Of
/// those, the one matching the most bytes wins. `None`: nothing pairs honestly.
///
/// With `established` (a pairing already made), only the same outer callers reached from
/// another line are looked for (the model built at line 140 of the same two functions whose
/// line 147 and 155 were paired): one matching stack is enough, since the callers are known.
pub(super) fn find_alignment(
    before: &LiveByStack,
    after: &LiveByStack,
    established: Option<&Alignment>,
) -> Option<Alignment> {
    let one_sided = |side: &'_ LiveByStack, other: &LiveByStack| {
        let mut stacks: Vec<(Vec<FrameKey>, u64)> = side
            .iter()
            .filter(|(key, _)| !other.contains_key(*key))
            .map(|(key, &(bytes, _))| (key.clone(), bytes))
            .collect();
        stacks.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        stacks.truncate(ALIGN_CANDIDATE_STACKS);
        stacks
    };
    let (before_only, after_only) = (one_sided(before, after), one_sided(after, before));
    let unmatched_bytes = |side: &LiveByStack, other: &LiveByStack| -> u64 {
        side.iter()
            .filter(|(key, _)| !other.contains_key(*key))
            .map(|(_, &(bytes, _))| bytes)
            .sum()
    };
    let unmatched = unmatched_bytes(before, after).min(unmatched_bytes(after, before));
    let mut candidates: BTreeMap<Pairing, u64> = BTreeMap::new();
    for (b, b_bytes) in &before_only {
        for (a, a_bytes) in &after_only {
            let same_end = b
                .iter()
                .rev()
                .zip(a.iter().rev())
                .take_while(|(x, y)| x == y)
                .count();
            // Ending alike is the point; a stack wholly inside the other has no outer part.
            if same_end == 0 || same_end >= b.len() || same_end >= a.len() {
                continue;
            }
            let pairing = (
                b[..b.len() - same_end].to_vec(),
                a[..a.len() - same_end].to_vec(),
            );
            *candidates.entry(pairing).or_default() += (*b_bytes).min(*a_bytes);
        }
    }
    let mut ranked: Vec<(Pairing, u64)> = candidates.into_iter().collect();
    ranked.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    ranked
        .into_iter()
        .take(ALIGN_CANDIDATES_TRIED)
        .filter_map(|((before_frames, after_frames), _)| {
            check_pairing(
                before,
                after,
                before_frames,
                after_frames,
                unmatched,
                established,
            )
        })
        // The first of equals wins (`max_by_key` keeps the last), so the answer is stable.
        .fold(None, |best: Option<Alignment>, found| match best {
            Some(best) if matched_weight(&best) >= matched_weight(&found) => Some(best),
            _ => Some(found),
        })
}

fn matched_weight(alignment: &Alignment) -> (u64, usize) {
    (
        alignment
            .matched_before_bytes
            .min(alignment.matched_after_bytes),
        alignment.matched_stacks,
    )
}

/// The pairing of `before_frames` with `after_frames` as an `Alignment`, if it is honest
/// (`unmatched`: the bytes not lined up frame for frame, on the side with fewer).
fn check_pairing(
    before: &LiveByStack,
    after: &LiveByStack,
    before_frames: Vec<FrameKey>,
    after_frames: Vec<FrameKey>,
    unmatched: u64,
    established: Option<&Alignment>,
) -> Option<Alignment> {
    let shared_frames = before_frames
        .iter()
        .zip(&after_frames)
        .take_while(|(x, y)| x == y)
        .count();
    if let Some(known) = established {
        // The same shared frames, then the same two functions (lines aside) where they part.
        let parts = |frames: &[FrameKey]| frames.get(shared_frames).map(|f| without_line(f));
        let same_callers = shared_frames == known.shared_frames
            && before_frames[..shared_frames] == known.before_frames[..shared_frames]
            && parts(&before_frames).is_some()
            && parts(&before_frames) == parts(&known.before_frames)
            && parts(&after_frames) == parts(&known.after_frames);
        if !same_callers {
            return None;
        }
    }
    // Where the other side has stacks under the same frames, those already line up frame for frame.
    if under(after, &before_frames).next().is_some()
        || under(before, &after_frames).next().is_some()
    {
        return None;
    }
    let below = |live: &'_ LiveByStack, prefix: &[FrameKey]| -> BTreeMap<Vec<FrameKey>, u64> {
        under(live, prefix)
            .map(|(key, &(bytes, _))| (key[prefix.len()..].to_vec(), bytes))
            .collect()
    };
    let (before_below, after_below) = (below(before, &before_frames), below(after, &after_frames));
    let (mut matched_stacks, mut matched_before_bytes, mut matched_after_bytes) = (0, 0, 0);
    for (rest, bytes) in &before_below {
        if let Some(after_bytes) = after_below.get(rest) {
            matched_stacks += 1;
            matched_before_bytes += bytes;
            matched_after_bytes += after_bytes;
        }
    }
    let matched = matched_before_bytes.min(matched_after_bytes);
    let evidence_needed = established.is_none();
    if matched == 0
        || (evidence_needed
            && (matched_stacks < MIN_MATCHED_STACKS
                || matched.saturating_mul(MIN_MATCHED_SHARE_DIVISOR) < unmatched))
    {
        return None;
    }
    Some(Alignment {
        before_frames,
        after_frames,
        shared_frames,
        matched_stacks,
        matched_before_bytes,
        matched_after_bytes,
    })
}

/// `file:line function` as `file function`: the function whatever line it was at.
pub(super) fn without_line(frame: &str) -> String {
    match frame.split_once(' ') {
        Some((place, function)) => {
            let file = place.split_once(':').map_or(place, |(file, _)| file);
            format!("{file} {function}")
        }
        None => frame.to_owned(),
    }
}

/// Rounds of "the same callers from another line" after the first pairing: each pairs one more
/// line of the two callers; bounded since each round looks at every stack.
pub(super) const FURTHER_ALIGNMENT_ROUNDS: usize = 8;

/// The frames that stand for paired outer parts: frame by frame when both are as deep
/// (`"a ⇄ b"`, or the frame itself where the two agree), else one frame for the whole part.
fn paired_names(before: &[FrameKey], after: &[FrameKey]) -> Vec<FrameKey> {
    if before.len() == after.len() {
        before
            .iter()
            .zip(after)
            .map(|(b, a)| {
                if b == a {
                    b.clone()
                } else {
                    format!("{b} ⇄ {a}")
                }
            })
            .collect()
    } else {
        vec![format!("{} ⇄ {}", before.join(" › "), after.join(" › "))]
    }
}

/// Both sides with the paired outer frames renamed, so the stacks below them line up.
pub(super) fn apply_alignment(
    found: &Alignment,
    before: LiveByStack,
    after: LiveByStack,
) -> (LiveByStack, LiveByStack) {
    let shared = found.shared_frames;
    let full = (
        found.before_frames.clone(),
        found.after_frames.clone(),
        paired_names(
            &found.before_frames[shared..],
            &found.after_frames[shared..],
        ),
    );
    let mut pairings = vec![full];
    if found.before_frames.len() == found.after_frames.len() {
        // Frame j of one part stands for frame j of the other, so the shorter parts pair too
        // (the input made in `_infer` itself under both callers), while each side alone has them.
        for depth in (shared + 1..found.before_frames.len()).rev() {
            let (b, a) = (&found.before_frames[..depth], &found.after_frames[..depth]);
            if under(&after, b).next().is_some() || under(&before, a).next().is_some() {
                break;
            }
            pairings.push((
                b.to_vec(),
                a.to_vec(),
                paired_names(&b[shared..], &a[shared..]),
            ));
        }
    }
    let rename = |live: LiveByStack, after_side: bool| -> LiveByStack {
        let mut renamed: LiveByStack = BTreeMap::new();
        for (key, (bytes, count)) in live {
            let key = pairings
                .iter()
                .find_map(|(b, a, names)| {
                    let prefix = if after_side { a } else { b };
                    key.starts_with(prefix).then(|| {
                        let mut new_key = key[..shared].to_vec();
                        new_key.extend(names.iter().cloned());
                        new_key.extend(key[prefix.len()..].iter().cloned());
                        new_key
                    })
                })
                .unwrap_or(key);
            let entry = renamed.entry(key).or_default();
            entry.0 += bytes;
            entry.1 += count;
        }
        renamed
    };
    (rename(before, false), rename(after, true))
}

/// Every stack without its outermost `frames` frames (the leaf always stays), merged where equal.
pub(super) fn drop_outer(live: LiveByStack, frames: usize) -> LiveByStack {
    let mut merged: LiveByStack = BTreeMap::new();
    for (key, (bytes, count)) in live {
        let from = frames.min(key.len().saturating_sub(1));
        let entry = merged.entry(key[from..].to_vec()).or_default();
        entry.0 += bytes;
        entry.1 += count;
    }
    merged
}
