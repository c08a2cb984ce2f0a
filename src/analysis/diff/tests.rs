use super::align::*;

fn live(stacks: &[(&[&str], u64)]) -> LiveByStack {
    stacks
        .iter()
        .map(|(frames, bytes)| {
            (
                frames.iter().map(|f| (*f).to_owned()).collect(),
                (*bytes, 1),
            )
        })
        .collect()
}

#[test]
fn dropping_outer_frames_keeps_the_leaf_and_merges_what_is_left_equal() {
    let stacks = live(&[
        (&["a", "x", "leaf"], 1),
        (&["b", "x", "leaf"], 2),
        (&["leaf"], 4),
    ]);
    let merged = drop_outer(stacks, 5);
    assert_eq!(merged.len(), 1);
    assert_eq!(merged.get(&vec!["leaf".to_owned()]), Some(&(7, 3)));
}

#[test]
fn a_function_is_itself_at_any_line() {
    assert_eq!(without_line("gen.py:140 w_train"), "gen.py w_train");
    assert_eq!(without_line("gen.py w_train"), "gen.py w_train");
    assert_eq!(without_line("<non-python>"), "<non-python>");
}

#[test]
fn one_look_alike_stack_pairs_nothing() {
    // Two programs that both end in torch's linear: one stack alike is no pattern.
    let before = live(&[
        (&["main", "resnet", "fc", "linear"], 10),
        (&["main", "resnet", "conv"], 90),
    ]);
    let after = live(&[
        (&["main", "gpt", "head", "linear"], 10),
        (&["main", "gpt", "attn"], 90),
    ]);
    assert_eq!(find_alignment(&before, &after, None), None);
}

#[test]
fn renamed_callers_pair_when_many_stacks_continue_alike() {
    let before = live(&[
        (&["main", "grad", "model", "a"], 10),
        (&["main", "grad", "model", "b"], 10),
        (&["main", "grad", "model", "c"], 10),
        (&["main", "grad", "model", "kept"], 50),
    ]);
    let after = live(&[
        (&["main", "nograd", "model", "a"], 10),
        (&["main", "nograd", "model", "b"], 10),
        (&["main", "nograd", "model", "c"], 10),
    ]);
    let found = find_alignment(&before, &after, None).expect("paired");
    assert_eq!(found.shared_frames, 1);
    assert_eq!(found.matched_stacks, 3);
    let (b, a) = apply_alignment(&found, before, after);
    let key = |leaf: &str| {
        vec![
            "main".to_owned(),
            "grad ⇄ nograd".to_owned(),
            "model".to_owned(),
            leaf.to_owned(),
        ]
    };
    assert_eq!(b.get(&key("a")), a.get(&key("a")));
    assert!(b.contains_key(&key("kept")));
}
