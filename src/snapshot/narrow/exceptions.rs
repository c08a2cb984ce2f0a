//! The values a narrow column keeps beside it, exactly, because they do not fit it.

/// The exceptions of a narrow column, as patched frame-of-reference coding calls the values
/// its narrow form cannot hold: kept exactly, `(event, value)` in event order, each marked in
/// the column by a reserved code. Shared by [`SizeColumn`](super::SizeColumn) (sizes of 4 GiB or
/// more), [`AddrColumn`](super::AddrColumn) (addresses that fit no offset) and
/// [`TimeColumn`](super::TimeColumn) (times too far from their block's base).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Exceptions(pub(super) Vec<(usize, u64)>);

impl Exceptions {
    pub(super) fn get(&self, event: usize) -> Option<u64> {
        self.0
            .binary_search_by_key(&event, |&(e, _)| e)
            .ok()
            .map(|i| self.0[i].1)
    }

    /// Adds the value of event `event`, past every event already an exception.
    pub(super) fn push(&mut self, event: usize, value: u64) {
        self.0.push((event, value));
    }

    /// Sets (or, with `None`, removes) the value of event `event`, anywhere.
    pub(super) fn set(&mut self, event: usize, value: Option<u64>) {
        let at = self.0.partition_point(|&(e, _)| e < event);
        match (self.0.get(at).is_some_and(|&(e, _)| e == event), value) {
            (true, Some(value)) => self.0[at].1 = value,
            (true, None) => {
                self.0.remove(at);
            }
            (false, Some(value)) => self.0.insert(at, (event, value)),
            (false, None) => {}
        }
    }

    pub(super) fn truncate(&mut self, len: usize) {
        let keep = self.0.partition_point(|&(e, _)| e < len);
        self.0.truncate(keep);
    }

    /// Moves events `start..` into exceptions of their own, counted from `start`.
    pub(super) fn split_off(&mut self, start: usize) -> Self {
        let at = self.0.partition_point(|&(e, _)| e < start);
        Self(
            self.0
                .split_off(at)
                .into_iter()
                .map(|(e, value)| (e - start, value))
                .collect(),
        )
    }

    /// Whether these are in event order and all before `len` (as read from a stored index).
    pub(super) fn fits(&self, len: usize) -> bool {
        let ordered = self.0.windows(2).all(|pair| pair[0].0 < pair[1].0);
        ordered && self.0.last().is_none_or(|&(event, _)| event < len)
    }

    pub(super) fn events(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().map(|&(e, _)| e)
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }

    pub(super) fn heap_bytes(&self) -> u64 {
        (self.0.capacity() * std::mem::size_of::<(usize, u64)>()) as u64
    }
}
