//! [`Column<T>`]: a vector of plain numbers that is either owned or a window of a read-only
//! memory map (a stored index, see [`crate::index`]).
//!
//! Parsing builds columns as ordinary vectors (push, extend); a snapshot opened from its stored
//! index gets the same columns as typed windows of the mapped file, so the OS page cache, not
//! the heap, holds their bytes and a restart reads only the pages a question touches. Readers
//! never know which: a column derefs to `&[T]`, so `trace.action[i]` and `&replay.ghosts[a..b]`
//! read the same either way.

use bytemuck::Pod;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// A read-only file mapping shared by every column cut from it; the file stays mapped while
/// any of them lives.
pub type SharedMap = Arc<memmap2::Mmap>;

/// Owned numbers, or a typed window of a shared read-only mapping.
#[derive(Clone)]
pub struct Column<T: Pod> {
    /// The values when `mapped` is `None`; empty otherwise.
    owned: Vec<T>,
    mapped: Option<Window>,
}

/// `map[offset..offset + bytes]`, checked in bounds and aligned for the column's values when
/// made (see [`Column::mapped`]), so reading it back cannot fail.
#[derive(Clone)]
struct Window {
    map: SharedMap,
    offset: usize,
    bytes: usize,
}

impl Window {
    fn values<T: Pod>(&self) -> &[T] {
        // Checked in bounds and aligned in `Column::mapped`, and a mapping never moves, so the
        // empty fallback is never taken.
        self.map
            .get(self.offset..self.offset + self.bytes)
            .and_then(|bytes| bytemuck::try_cast_slice(bytes).ok())
            .unwrap_or_default()
    }
}

/// Why a window of a mapping cannot be a column of `T`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WindowError {
    #[error("section {offset}+{bytes} lies past the end of the file ({file} bytes)")]
    OutOfBounds {
        offset: usize,
        bytes: usize,
        file: usize,
    },
    #[error("section of {bytes} bytes is not a whole number of {size}-byte values")]
    Ragged { bytes: usize, size: usize },
    #[error("section at {offset} is not aligned for its {align}-byte values")]
    Misaligned { offset: usize, align: usize },
}

impl<T: Pod> Column<T> {
    /// A column over `bytes` bytes of `map` from `offset`: refused unless the window lies in the
    /// file, holds whole values and starts aligned for `T` (the index aligns every section to 64
    /// bytes and the mapping itself is page-aligned).
    pub fn mapped(map: SharedMap, offset: usize, bytes: usize) -> Result<Self, WindowError> {
        let size = std::mem::size_of::<T>().max(1);
        let in_file = offset
            .checked_add(bytes)
            .and_then(|end| map.get(offset..end));
        let Some(window) = in_file else {
            return Err(WindowError::OutOfBounds {
                offset,
                bytes,
                file: map.len(),
            });
        };
        if !bytes.is_multiple_of(size) {
            return Err(WindowError::Ragged { bytes, size });
        }
        if bytemuck::try_cast_slice::<u8, T>(window).is_err() {
            return Err(WindowError::Misaligned {
                offset,
                align: std::mem::align_of::<T>(),
            });
        }
        Ok(Self {
            owned: Vec::new(),
            mapped: Some(Window { map, offset, bytes }),
        })
    }

    /// Whether the values live in a mapped file rather than on the heap.
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// Heap bytes held (the capacity of an owned column; 0 for a mapped one, whose pages are
    /// the OS's to keep or drop), for the analysis cache's byte budget.
    pub fn heap_bytes(&self) -> u64 {
        (self.owned.capacity() * std::mem::size_of::<T>()) as u64
    }

    /// The values as raw little-endian bytes, for writing them to an index.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }

    /// The owned vector, copying a mapped column onto the heap first. Only building code
    /// mutates columns, and it builds owned ones, so the copy is for tests and odd callers.
    #[inline]
    pub fn make_owned(&mut self) -> &mut Vec<T> {
        if self.mapped.is_some() {
            self.copy_mapped();
        }
        &mut self.owned
    }

    // Out of line: `push` is in the hottest loops, and a column there is always owned.
    #[cold]
    fn copy_mapped(&mut self) {
        if let Some(window) = self.mapped.take() {
            self.owned = window.values::<T>().to_vec();
        }
    }

    #[inline]
    pub fn push(&mut self, value: T) {
        self.make_owned().push(value);
    }

    pub fn extend_from_slice(&mut self, values: &[T]) {
        self.make_owned().extend_from_slice(values);
    }

    pub fn resize(&mut self, len: usize, value: T) {
        self.make_owned().resize(len, value);
    }

    pub fn try_reserve(
        &mut self,
        additional: usize,
    ) -> Result<(), std::collections::TryReserveError> {
        self.make_owned().try_reserve(additional)
    }

    pub fn shrink_to_fit(&mut self) {
        self.owned.shrink_to_fit();
    }

    /// Keeps the first `len` values (a mapped column just narrows its window).
    pub fn truncate(&mut self, len: usize) {
        match &mut self.mapped {
            Some(window) => {
                window.bytes = window.bytes.min(len * std::mem::size_of::<T>());
            }
            None => self.owned.truncate(len),
        }
    }

    /// Moves `at..` into a column of its own, as [`Vec::split_off`].
    pub fn split_off(&mut self, at: usize) -> Self {
        Self::from(self.make_owned().split_off(at))
    }
}

impl<T: Pod> Deref for Column<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.mapped {
            Some(window) => window.values(),
            None => &self.owned,
        }
    }
}

/// Mutable access copies a mapped column onto the heap first (see [`Column::make_owned`]).
impl<T: Pod> DerefMut for Column<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.make_owned()
    }
}

impl<T: Pod> Default for Column<T> {
    fn default() -> Self {
        Self::from(Vec::new())
    }
}

impl<T: Pod> From<Vec<T>> for Column<T> {
    fn from(values: Vec<T>) -> Self {
        Self {
            owned: values,
            mapped: None,
        }
    }
}

impl<T: Pod> FromIterator<T> for Column<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        Self::from(values.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Pod> Extend<T> for Column<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, values: I) {
        self.make_owned().extend(values);
    }
}

impl<'a, T: Pod> IntoIterator for &'a Column<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for Column<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A column holds millions of values: say what it is, not what it holds.
        f.debug_struct("Column")
            .field("len", &self.len())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

impl<T: Pod + PartialEq> PartialEq for Column<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn map_of(bytes: &[u8]) -> SharedMap {
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(bytes).expect("write");
        // SAFETY: a private temporary file nobody else can reach or change.
        Arc::new(unsafe { memmap2::Mmap::map(&file) }.expect("map"))
    }

    #[test]
    fn a_mapped_column_reads_as_the_owned_one_and_copies_on_write() {
        let values: Vec<u64> = (0..100).map(|i| i * 3).collect();
        let mut bytes = vec![0u8; 64];
        bytes.extend_from_slice(bytemuck::cast_slice(&values));
        let map = map_of(&bytes);
        let mut column = Column::<u64>::mapped(map, 64, values.len() * 8).expect("window");
        assert!(column.is_mapped());
        assert_eq!(column.heap_bytes(), 0, "a mapped column costs no heap");
        assert_eq!(&column[..], &values[..]);
        assert_eq!(column, Column::from(values.clone()));
        column[1] = 7;
        assert!(!column.is_mapped(), "writing copies it to the heap");
        assert_eq!(column[1], 7);
        assert_eq!(column[2], 6);
    }

    #[test]
    fn windows_out_of_the_file_ragged_or_misaligned_are_refused() {
        let map = map_of(&[0u8; 128]);
        assert!(matches!(
            Column::<u64>::mapped(map.clone(), 64, 72),
            Err(WindowError::OutOfBounds { .. })
        ));
        assert!(matches!(
            Column::<u64>::mapped(map.clone(), 0, 12),
            Err(WindowError::Ragged { .. })
        ));
        assert!(matches!(
            Column::<u64>::mapped(map.clone(), 4, 8),
            Err(WindowError::Misaligned { .. })
        ));
        assert!(matches!(
            Column::<u64>::mapped(map, usize::MAX, 8),
            Err(WindowError::OutOfBounds { .. })
        ));
    }
}
