//! `torch_text` prints what torch's own `_memory_viz.py` printed for every corpus file
//! (`tests/fixtures/oracle/`, written by torch 2.11 right after each dump).

use crate::common;

use snapview::snapshot::{LoadOptions, Snapshot, load_path};
use snapview::torch_text::{FoldedKind, compare, folded, segment_compare, stats};

/// Panics with the first differing line of two texts, so a failure reads without a diff tool.
fn assert_same_text(name: &str, actual: &str, expected: &str) {
    if actual == expected {
        return;
    }
    let (a, e): (Vec<&str>, Vec<&str>) = (actual.lines().collect(), expected.lines().collect());
    let at = a
        .iter()
        .zip(&e)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(e.len()));
    panic!(
        "{name}: output differs from torch's at line {}\n  ours:  {:?}\n  torch: {:?}\n\
         ({} lines vs {}; trailing newline ours {} torch {})",
        at + 1,
        a.get(at),
        e.get(at),
        a.len(),
        e.len(),
        actual.ends_with('\n'),
        expected.ends_with('\n'),
    );
}

/// Compares the lines of two folded-stack texts as multisets (flamegraph.pl ignores order),
/// reporting the first line each side has that the other lacks.
fn assert_same_lines(name: &str, actual: &str, expected: &str) {
    let mut a: Vec<&str> = actual.lines().collect();
    let mut e: Vec<&str> = expected.lines().collect();
    a.sort_unstable();
    e.sort_unstable();
    if a == e {
        return;
    }
    let only_ours = a.iter().find(|line| !e.contains(line));
    let only_torch = e.iter().find(|line| !a.contains(line));
    panic!(
        "{name}: folded lines differ ({} ours vs {} torch)\n  only ours:  {only_ours:?}\n  \
         only torch: {only_torch:?}",
        a.len(),
        e.len(),
    );
}

fn oracle(file: &str) -> String {
    common::oracle(file).unwrap_or_else(|| panic!("oracle file {file} exists"))
}

fn check(name: &str, snapshot: &Snapshot) {
    assert_same_text(
        &format!("{name}.segsum"),
        &stats(snapshot).expect("a real snapshot's page maps are small"),
        &oracle(&format!("{name}.segsum.txt")),
    );
    for (kind, suffix) in [
        (FoldedKind::Segments, "segments"),
        (FoldedKind::Memory, "memory"),
    ] {
        assert_same_lines(
            &format!("{name}.{suffix}"),
            &folded(snapshot, kind).expect("a real snapshot's stacks are small"),
            &oracle(&format!("{name}.{suffix}.txt")),
        );
    }
}

/// Small fixtures torch's oracle covers; `ddp_rank_rank1` (the second rank's file) has none.
fn small_names_with_oracle() -> Vec<String> {
    common::small_names()
        .into_iter()
        .filter(|name| common::oracle(&format!("{name}.segsum.txt")).is_some())
        .collect()
}

#[test]
fn every_small_corpus_file_matches_torch() {
    let names = small_names_with_oracle();
    assert!(
        names.len() >= 18,
        "the corpus fixtures and their oracle are present"
    );
    for name in names {
        check(&name, &common::load(&name));
    }
}

/// torch writes blocks segment by segment in file order; we keep that order exactly.
#[test]
fn folded_keeps_torch_order() {
    for name in small_names_with_oracle() {
        let snapshot = common::load(&name);
        for (kind, suffix) in [
            (FoldedKind::Segments, "segments"),
            (FoldedKind::Memory, "memory"),
        ] {
            assert_same_text(
                &format!("{name}.{suffix} (order)"),
                &folded(&snapshot, kind).expect("a real snapshot's stacks are small"),
                &oracle(&format!("{name}.{suffix}.txt")),
            );
        }
    }
}

/// The large files, when decompressed into `SNAPVIEW_LARGE_DIR` (skipped otherwise).
#[test]
fn large_corpus_files_match_torch() {
    for (name, path) in common::large_names() {
        let snapshot =
            load_path(&path, LoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        check(&name, &snapshot);
        eprintln!("{name}: matches torch");
    }
}

#[test]
fn compare_matches_torch() {
    let text = compare(&common::load("infer_grad"), &common::load("infer_nograd"));
    let (header, body) = {
        let mut lines = text.splitn(3, '\n');
        let before = lines.next().expect("only_before line");
        let after = lines.next().expect("only_after line");
        ([before, after], lines.next().unwrap_or(""))
    };
    // torch returns the folded stacks (the oracle file) and prints the two lists to stdout.
    assert_same_lines("compare", body, &oracle("infer_grad_vs_nograd.compare.txt"));
    assert_same_text(
        "compare (order)",
        body,
        &oracle("infer_grad_vs_nograd.compare.txt"),
    );
    // What Python printed for torch's two `print` calls on these files, in its set order.
    assert_eq!(header[0], ONLY_BEFORE);
    assert_eq!(header[1], ONLY_AFTER);
}

/// The structure the compare page draws lists the segments torch printed, in its set order, and
/// counts the folded lines torch returned.
#[test]
fn segment_compare_is_torchs_compare_as_data() {
    let (grad, nograd) = (common::load("infer_grad"), common::load("infer_nograd"));
    let segments = segment_compare(&grad, &nograd);
    let printed = |side: &str, only: &[snapview::torch_text::OnlySegment]| {
        let addresses: Vec<String> = only.iter().map(|s| s.address.to_string()).collect();
        format!("{side} = [{}]", addresses.join(", "))
    };
    assert_eq!(printed("only_before", &segments.only_before), ONLY_BEFORE);
    assert_eq!(printed("only_after", &segments.only_after), ONLY_AFTER);
    let oracle = oracle("infer_grad_vs_nograd.compare.txt");
    assert_eq!(segments.folded_lines, oracle.lines().count() as u64);
    // Every listed segment is one of the snapshot's, with its size and stream.
    for only in &segments.only_before {
        let segment = grad
            .segments
            .iter()
            .find(|s| s.address == only.address)
            .expect("a segment of the before snapshot");
        assert_eq!(
            (only.total_size, only.stream),
            (segment.total_size, segment.stream)
        );
        assert!(only.live_bytes <= only.total_size);
    }
    // The same snapshot on both sides: nothing in only one.
    let same = segment_compare(&grad, &grad);
    assert!(same.only_before.is_empty() && same.only_after.is_empty());
    assert_eq!(same.folded_lines, 0);
}

/// `print(f'only_before = {[a for a,_ in (before_segs - after_segs)]}')` from torch's
/// `compare`, run by CPython on `infer_grad` vs `infer_nograd`.
const ONLY_BEFORE: &str = "only_before = [139735821451264, 139735217471488, 139740686843904, \
139740116418560, 139746693087232, 139738841350144, 139747901046784, 139737230737408, \
139737499172864, 139738237370368, 139744948256768, 139749297750016, 139749712986112, \
139744914702336, 139743606079488, 139744344276992, 139736526094336, 139740250636288, \
139740519071744, 139743706742784, 139747968155648, 139742857396224, 139737633390592, \
139746625978368, 139747364175872, 139749845106688, 139739545993216, 139746726641664, \
139747733274624, 139743639633920, 139744478494720, 139745485127680, 139749645877248, \
139732499562496, 139740586180608, 139749746540544, 139740451962880, 139743773851648, \
139736358322176, 139737096519680, 139735653679104, 139737364955136, 139744780484608, \
139746089107456, 139746659532800, 139740552626176, 139748505026560, 139736458985472, \
139737465618432, 139743203426304, 139744210059264, 139746793750528, 139739378221056, \
139747800383488, 139738673577984, 139740384854016, 139739478884352, 139740485517312, \
139746223325184, 139747229958144, 139749276778496, 139758974009344, 139749679431680, \
139745887780864, 139742901436416, 139737532727296, 139736391876608, 139737398509568, \
139739244003328, 139744713375744, 139745921335296, 139739411775488, 139740418408448, \
139737432064000, 139735620124672, 139743069208576, 139743471861760, 139749310332928, \
139736962301952, 139748370808832, 139738640023552, 139749444550656, 139736660312064, \
139744646266880, 139735083253760, 139746491760640, 139736089886720, 139739982200832, \
139744746930176, 139747666165760, 139738103152640, 139739109785600, 139742867881984, \
139742855299072, 139747766829056, 139738472251392, 139736224104448, 139745216692224, \
139739680210944, 139738707132416, 139749943672832, 139735519461376, 139744679821312, \
139736828084224, 139748236591104, 139740753952768, 139745350909952, 139734949036032, \
139742934990848, 139738539360256, 139747699720192, 139739847983104, 139749410996224, \
139744612712448, 139745720008704, 139735418798080, 139737968934912, 139745954889728, \
139746961522688, 139749241126912, 139747632611328, 139736626757632, 139749343887360, \
139744075841536, 139745082474496, 139735452352512, 139749478105088, 139739646656512, \
139745787117568, 139735687233536, 139745652899840, 139736693866496, 139747095740416, \
139748102373376, 139745753563136, 139749922701312, 139734814818304, 139748672798720, \
139739713765376, 139749239029760, 139743874514944, 139744881147904, 139738371588096, \
139749780094976, 139745686454272, 139735385243648, 139735485906944, 139746894413824, \
139736492539904, 139743941623808, 139742853201920, 139738405142528, 139758994980864, \
139737834717184, 139734613491712, 139743337644032, 139738505805824, 139739512438784, \
139735955668992, 139743908069376, 139745619345408, 139746357542912, 139736425431040, \
139738975567872, 139743740297216, 139746927968256, 139748639244288, 139747934601216, \
139734680600576, 139738438696960, 139739445329920, 139735351689216, 139746760196096, \
139734647046144, 139749243224064, 139737700499456, 139737666945024, 139747498393600, \
139743673188352]";

/// The matching `only_after` line.
const ONLY_AFTER: &str = "only_after = [140515156688896, 140514183610368, 140514317828096, \
140515458678784, 140515089580032, 140515590799360, 140511331483648, 140513713848320, \
140515056025600, 140514988916736, 140515190243328, 140515223797760, 140513445412864, \
140515492233216, 140524686147584, 140515391569920, 140515668393984, 140515689365504, \
140514049392640, 140515425124352, 140524707119104, 140513848066048, 140515525787648, \
140509184000000, 140515022471168, 140513579630592, 140515043442688]";
