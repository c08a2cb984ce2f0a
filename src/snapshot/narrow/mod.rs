//! Trace columns narrower than their values. A long trace repeats a handful of streams, almost
//! never carries `compile_context` or `user_metadata`, asks for less than 4 GiB per block,
//! records times microseconds apart and addresses 512-byte aligned within a terabyte of each
//! other, and names a few thousand stacks; storing a `u64` stream, two `u32` text ids, a `u64`
//! size, an `i64` time, a `u64` address and a `u32` stack per event (40 of the 45 bytes an
//! event took) paid for little. These columns keep
//! every value exact and fall back to the wide form where a file needs it.
//!
//! One file per codec. What every column has alike (`is_empty`, `at`, `iter`, building one from
//! values) follows from the codec's own `get`, `len` and `push`, and is written once, by
//! `event_column!` below.

/// The part of a narrow column's API that follows from its codec's `get`, `len` and `push`,
/// written here once rather than in each codec. A macro rather than a trait with default
/// methods so that the crate's many readers of trace columns keep calling them as inherent
/// methods, with no trait to import.
macro_rules! event_column {
    ($column:ty, $value:ty) => {
        impl $column {
            /// Whether the column has no events.
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }

            /// The value of event `event`, if there is one.
            pub fn at(&self, event: usize) -> Option<$value> {
                (event < self.len()).then(|| self.get(event))
            }

            /// Every value, in event order.
            pub fn iter(&self) -> impl Iterator<Item = $value> + '_ {
                (0..self.len()).map(|event| self.get(event))
            }
        }

        impl FromIterator<$value> for $column {
            fn from_iter<I: IntoIterator<Item = $value>>(values: I) -> Self {
                let mut column = Self::default();
                for value in values {
                    column.push(value);
                }
                column
            }
        }

        impl From<Vec<$value>> for $column {
            fn from(values: Vec<$value>) -> Self {
                values.into_iter().collect()
            }
        }
    };
}

mod addr;
mod exceptions;
mod size;
mod sparse;
mod stack;
mod stream;
mod time;

pub use addr::AddrColumn;
pub use size::SizeColumn;
pub use sparse::SparseIds;
pub use stack::StackColumn;
pub use stream::StreamColumn;
pub use time::TimeColumn;
pub(crate) use time::{blocked_times, narrow_times};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_4_gib_and_more_are_kept_exactly() {
        let mut sizes = SizeColumn::default();
        let values = [
            0,
            512,
            u64::from(u32::MAX) - 1,
            u64::from(u32::MAX),
            5 << 30,
            7,
            1 << 40,
        ];
        for &v in &values {
            sizes.push(v);
        }
        let read: Vec<u64> = (0..values.len()).map(|e| sizes.get(e)).collect();
        assert_eq!(read, values);
        sizes.set(1, 9 << 30);
        sizes.set(4, 3);
        assert_eq!((sizes.get(1), sizes.get(4)), (9 << 30, 3));
        let tail = sizes.split_off(3);
        assert_eq!((tail.get(0), tail.get(3)), (u64::from(u32::MAX), 1 << 40));
        assert_eq!(sizes.len(), 3);
    }

    #[test]
    fn times_are_exact_narrow_blocked_or_wide() {
        let first = 1_700_000_000_000_000i64;
        // Microseconds apart, with a pause every 1,000 events that no u16 offset reaches.
        let values: Vec<i64> = (0..200_000i64)
            .map(|e| first + e * 37 - (e % 5) + (e / 1000) * 100_000)
            .collect();
        let times: TimeColumn = values.clone().into();
        let Some(aside) = times.times_aside() else {
            panic!("dense times stay narrow");
        };
        assert!(
            !aside.is_empty() && aside.len() < values.len() / 16,
            "{}",
            aside.len()
        );
        assert!((0..values.len()).all(|e| times.get(e) == values[e]));
        assert_eq!(times.partition_point(10..1000, |t| t < values[500]), 490);
        let mut times = times;
        let tail = times.split_off(70_000);
        assert_eq!(
            (tail.get(0), tail.len(), times.len()),
            (values[70_000], 130_000, 70_000)
        );
        assert!(matches!(tail, TimeColumn::Narrow { .. }));

        // 100 ms apart: nearly every time would be aside, so the column turns blocked.
        let sparse: Vec<i64> = (0..5_000i64).map(|e| first + e * 100_000).collect();
        let times: TimeColumn = sparse.clone().into();
        assert!(matches!(times, TimeColumn::Blocked { .. }));
        assert!((0..sparse.len()).all(|e| times.get(e) == sparse[e]));

        // A jump of more than an hour inside a block: the column widens, values unchanged.
        let mut times = times;
        times.push(first + 3 * 3_600_000_000);
        assert!(matches!(times, TimeColumn::Wide(_)));
        assert_eq!(times.get(4_999), sparse[4_999]);
        assert_eq!(times.get(5_000), first + 3 * 3_600_000_000);
    }

    #[test]
    fn a_narrow_time_column_takes_its_first_sparse_times_aside() {
        // A slow warm-up (events far apart) before a busy loop stays narrow.
        let first = 1_700_000_000_000_000i64;
        let values: Vec<i64> = (0..20_000i64)
            .map(|e| match e {
                0..500 => first + e * 1_000_000,
                _ => first + 500 * 1_000_000 + e * 11,
            })
            .collect();
        let times: TimeColumn = values.clone().into();
        assert!(matches!(times, TimeColumn::Narrow { .. }));
        assert!((0..values.len()).all(|e| times.get(e) == values[e]));
        // From a stored index's parts: exceptions must be in order, marked and inside.
        let aside = times.times_aside().expect("narrow");
        let TimeColumn::Narrow { bases, offsets, .. } = times else {
            panic!("narrow");
        };
        assert!(narrow_times(bases.clone(), offsets.clone(), aside.clone()).is_some());
        let mut unordered = aside.clone();
        unordered.swap(0, 1);
        assert!(narrow_times(bases.clone(), offsets.clone(), unordered).is_none());
        let mut unmarked = aside.clone();
        unmarked.push((values.len() - 1, 0));
        assert!(narrow_times(bases.clone(), offsets.clone(), unmarked).is_none());
        assert!(narrow_times(bases.clone(), offsets.clone(), vec![(values.len(), 0)]).is_none());
        let short: crate::snapshot::Column<i64> =
            bases.iter().skip(1).copied().collect::<Vec<_>>().into();
        assert!(narrow_times(short, offsets, aside).is_none());
    }

    #[test]
    fn streams_are_coded_until_there_are_too_many() {
        let mut column = StreamColumn::default();
        for event in 0..300u64 {
            column.push(event % 3 * 1000);
        }
        assert!(matches!(column, StreamColumn::Coded { .. }));
        assert_eq!(column.get(4), 1000);
        for stream in 0..300u64 {
            column.push(stream + 7);
        }
        assert!(matches!(column, StreamColumn::Raw(_)));
        assert_eq!(column.len(), 600);
        assert_eq!(column.get(4), 1000);
        assert_eq!(column.get(599), 306);
        let tail = column.split_off(598);
        assert_eq!((column.len(), tail.get(0), tail.get(1)), (598, 305, 306));
    }

    #[test]
    fn sparse_ids_cost_nothing_until_one_is_set() {
        let mut ids = SparseIds::default();
        for event in 0..1000 {
            ids.set(event, 0);
        }
        assert_eq!(ids.heap_bytes(), 0);
        ids.set(10, 7);
        ids.set(12, 0);
        assert_eq!((ids.get(9), ids.get(10), ids.get(500)), (0, 7, 0));
        let tail = ids.split_off(5);
        assert_eq!((ids.get(10), tail.get(5)), (0, 7));
    }

    #[test]
    fn addresses_round_trip_near_far_unaligned_and_across_blocks() {
        let base = 0x7fb1_1400_0000u64;
        let mut made = vec![
            base,
            base + 512,
            base - (1 << 30),
            base + 3,
            0,
            u64::MAX,
            base + (1 << 41),
            base - (1 << 39),
        ];
        // A second block starting far away.
        made.extend((0..(1 << 16) + 10).map(|i| base + (i % 7) * 4096));
        made.push(0x1000);
        let column: AddrColumn = made.iter().copied().collect();
        assert_eq!(column.iter().collect::<Vec<_>>(), made);
        let (bases, offsets, exceptions) = column.parts();
        assert_eq!(bases.len(), 2);
        assert!(
            exceptions.iter().any(|&(_, a)| a == base + 3),
            "unaligned: an exception"
        );
        assert!(
            exceptions.iter().any(|&(_, a)| a == base + (1 << 41)),
            "2 TiB away: an exception"
        );
        let rebuilt = AddrColumn::from_parts(bases.to_vec(), offsets.clone(), exceptions.to_vec())
            .expect("valid parts");
        assert_eq!(rebuilt, column);
        let mut tail = column.clone();
        let split = tail.split_off(5);
        assert_eq!(tail.iter().collect::<Vec<_>>(), made[..5]);
        assert_eq!(split.iter().collect::<Vec<_>>(), made[5..]);
        assert!(AddrColumn::from_parts(vec![], offsets.clone(), exceptions.to_vec()).is_none());
    }

    #[test]
    fn stacks_stay_narrow_until_an_id_needs_more() {
        let mut column = StackColumn::from(vec![0, 7, u32::from(u16::MAX)]);
        assert!(matches!(column, StackColumn::Narrow(_)));
        column.push(1 << 20);
        column.push(3);
        assert!(matches!(column, StackColumn::Wide(_)));
        assert_eq!(
            column.iter().collect::<Vec<_>>(),
            [0, 7, 65_535, 1 << 20, 3]
        );
        assert_eq!((column.at(4), column.at(5)), (Some(3), None));
        let tail = column.split_off(3);
        assert_eq!(tail.iter().collect::<Vec<_>>(), [1 << 20, 3]);
        assert_eq!(column.len(), 3);
    }
}
