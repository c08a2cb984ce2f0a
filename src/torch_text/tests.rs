//! The reports' tests that need no corpus: torch's number formatting, CPython's hashes and set
//! orders, and the edge cases of the segment compare.

use super::py_set::{self, PySet};
use super::*;

/// A hostile file can hold two segments with one address and size: Python's set (and so
/// the list torch prints) has the key once, while torch writes the blocks of both.
#[test]
fn segment_compare_lists_a_repeated_segment_once_and_counts_all_its_lines() {
    let block = |size, requested_size, state| Block {
        address: 0,
        size,
        requested_size,
        state,
        stack: 0,
    };
    let segment = |address, blocks| Segment {
        address,
        total_size: 100,
        stream: 7,
        blocks,
        ..Segment::default()
    };
    let before = Snapshot {
        segments: vec![
            segment(
                1,
                vec![
                    block(60, 50, BlockState::ActiveAllocated),
                    block(40, 40, BlockState::Inactive),
                ],
            ),
            segment(1, vec![block(100, 100, BlockState::ActivePendingFree)]),
            segment(2, vec![block(100, 100, BlockState::ActiveAllocated)]),
        ],
        ..Snapshot::default()
    };
    let after = Snapshot {
        segments: vec![segment(2, Vec::new())],
        ..Snapshot::default()
    };
    let only = segment_compare(&before, &after);
    assert_eq!(
        only.only_before,
        vec![OnlySegment {
            address: 1,
            total_size: 100,
            stream: 7,
            blocks: 2,
            live_bytes: 60,
        }]
    );
    assert!(only.only_after.is_empty());
    // Three blocks and the first one's `<gaps>` line, as torch's text has them.
    assert_eq!(only.folded_lines, 4);
    let text = compare(&before, &after);
    assert!(
        text.starts_with("only_before = [1]\nonly_after = []\n"),
        "{text}"
    );
    assert_eq!(text.lines().count() - 2, 4, "{text}");
}

/// Cases and expected strings from Python's own `_format_size`.
#[test]
fn format_size_matches_python() {
    let cases: [(u64, &str); 17] = [
        (0, "0.0B"),
        (1, "1.0B"),
        (512, "512.0B"),
        (1023, "1023.0B"),
        (1024, "1.0KiB"),
        (1075, "1.0KiB"),
        (1076, "1.1KiB"),
        (1280, "1.2KiB"), // 1.25 exactly: Python rounds half to even
        (1536, "1.5KiB"),
        (104_857, "102.4KiB"),
        (1_048_524, "1023.9KiB"),
        (PAGE_SIZE, "20.0MiB"),
        (1_073_741_823, "1024.0MiB"),
        (2_684_354_560, "2.5GiB"),
        (1 << 63, "8.0EiB"),
        (u64::MAX, "16.0EiB"),
        (2816, "2.8KiB"),
    ];
    for (bytes, expected) in cases {
        assert_eq!(format_size(bytes), expected, "{bytes}");
    }
    assert_eq!(bytes_repr(3 * (1i128 << 80)), "3.0YiB");
}

#[test]
fn report_free_matches_python() {
    assert_eq!(report_free(0, 0), "0.0B");
    assert_eq!(report_free(7, 1), "8.0B (12.5% internal)");
    // 0.25% exactly: half to even, as Python prints it.
    assert_eq!(report_free(399, 1), "400.0B (0.2% internal)");
    assert_eq!(report_free(397, 3), "400.0B (0.8% internal)");
    assert_eq!(report_free(2, 1), "3.0B (33.3% internal)");
}

/// Hashes printed by Python 3.11's `hash(...)`, as unsigned bits.
#[test]
fn tuple_hash_matches_python() {
    for (key, expected) in [
        (
            (139_732_499_562_496, 2_097_152),
            -7_379_835_831_677_852_320i64,
        ),
        ((0, 0), -8_458_139_203_682_520_985),
        ((1, 2), -3_550_055_125_485_641_917),
    ] {
        assert_eq!(py_set::hash(key), expected as u64, "{key:?}");
    }
}

fn addresses(set: &PySet) -> Vec<u64> {
    set.keys().map(|(a, _)| a).collect()
}

/// Orders printed by Python 3.11 for `[a for a, _ in (set(before) - set(after))]`.
#[test]
fn set_difference_order_matches_python() {
    const BASE: u64 = 139_732_499_562_496;
    let before: Vec<py_set::Key> = (0..30).map(|i| (BASE + i * 2_097_152, 2_097_152)).collect();
    let mut after: Vec<py_set::Key> = before[..5].to_vec();
    after.extend((0..10).map(|i| (BASE + (100 + i) * 20_971_520, 20_971_520)));
    let (b, a) = (PySet::from_keys(&before), PySet::from_keys(&after));
    let expected: Vec<u64> = vec![
        139732533116928,
        139732558282752,
        139732547796992,
        139732543602688,
        139732526825472,
        139732522631168,
        139732512145408,
        139732537311232,
        139732516339712,
        139732551991296,
        139732545699840,
        139732541505536,
        139732531019776,
        139732556185600,
        139732520534016,
        139732510048256,
        139732535214080,
        139732560379904,
        139732539408384,
        139732524728320,
        139732554088448,
        139732549894144,
        139732518436864,
        139732514242560,
        139732528922624,
    ];
    assert_eq!(addresses(&b.difference(&a)), expected);
    let expected: Vec<u64> = vec![
        139734743515136,
        139734680600576,
        139734617686016,
        139734785458176,
        139734701572096,
        139734722543616,
        139734638657536,
        139734659629056,
        139734596714496,
        139734764486656,
    ];
    assert_eq!(addresses(&a.difference(&b)), expected);
}

/// The copy-then-discard path, taken when the left set is over 4x the right one.
#[test]
fn set_copy_and_difference_order_matches_python() {
    const BASE: u64 = 139_732_499_562_496;
    let before: Vec<py_set::Key> = (0..40)
        .map(|i| (BASE + i * 2_097_152 * 3, 2_097_152 * (1 + i % 3)))
        .collect();
    let after = vec![before[3], before[17], (BASE - 2_097_152, 2_097_152)];
    let (b, a) = (PySet::from_keys(&before), PySet::from_keys(&after));
    let expected: Vec<u64> = vec![
        139732675723264,
        139732524728320,
        139732682014720,
        139732531019776,
        139732612808704,
        139732600225792,
        139732688306176,
        139732537311232,
        139732619100160,
        139732625391616,
        139732694597632,
        139732543602688,
        139732700889088,
        139732549894144,
        139732631683072,
        139732707180544,
        139732562477056,
        139732556185600,
        139732719763456,
        139732568768512,
        139732637974528,
        139732644265984,
        139732726054912,
        139732713472000,
        139732575059968,
        139732650557440,
        139732499562496,
        139732732346368,
        139732512145408,
        139732581351424,
        139732738637824,
        139732587642880,
        139732669431808,
        139732656848896,
        139732663140352,
        139732744929280,
        139732505853952,
        139732593934336,
    ];
    assert_eq!(addresses(&b.difference(&a)), expected);
    assert_eq!(addresses(&a.difference(&b)), vec![139732497465344]);
}

#[test]
fn empty_snapshot_prints_torch_skeleton() {
    let text = stats(&Snapshot::default()).expect("an empty snapshot has no page maps");
    assert!(text.starts_with("Summary of segments >= 20.0MiB in size\nsegments: 0\n"));
    assert!(text.contains("total_free: 0.0B\n\nLegend:\n"));
    assert_eq!(
        folded(&Snapshot::default(), FoldedKind::Segments).expect("nothing to print"),
        ""
    );
    assert_eq!(
        compare(&Snapshot::default(), &Snapshot::default()),
        "only_before = []\nonly_after = []\n"
    );
}
