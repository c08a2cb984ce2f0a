//! Statistics of a group of snapshots (one per rank of a job): the median peak, which members
//! stray from it, and the typical, highest and lowest member. Ranks of one data-parallel job
//! should peak alike, so one that does not is worth a look.

/// What the statistics need of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberPeak {
    pub peak_allocated_bytes: u64,
    pub oom_events: u64,
}

/// A peak more than this share away from the median makes a member an outlier.
pub const OUTLIER_DISTANCE: f64 = 0.1;

#[derive(Debug, Clone, PartialEq)]
pub struct GroupStats {
    /// The median member's peak (the upper median for an even count).
    pub median_peak_bytes: u64,
    /// Per member, in the order given: whether it stands out.
    pub outliers: Vec<bool>,
    /// The member nearest the median among those that are not outliers (else nearest overall).
    pub typical: usize,
    pub highest: usize,
    pub lowest: usize,
}

/// The statistics of `members`; `None` for an empty group.
pub fn group_stats(members: &[MemberPeak]) -> Option<GroupStats> {
    let mut peaks: Vec<u64> = members.iter().map(|m| m.peak_allocated_bytes).collect();
    peaks.sort_unstable();
    let median = *peaks.get(peaks.len() / 2)?;
    // With two members there is no majority to stray from; an OOM always stands out.
    let has_majority = members.len() > 2;
    let outliers: Vec<bool> = members
        .iter()
        .map(|m| {
            let distance = m.peak_allocated_bytes.abs_diff(median) as f64;
            (has_majority && distance > median as f64 * OUTLIER_DISTANCE) || m.oom_events > 0
        })
        .collect();
    let index_by = |key: &dyn Fn(usize) -> (bool, u64)| (0..members.len()).min_by_key(|&i| key(i));
    let typical = index_by(&|i| {
        (
            outliers[i],
            members[i].peak_allocated_bytes.abs_diff(median),
        )
    })?;
    let highest = (0..members.len()).max_by_key(|&i| members[i].peak_allocated_bytes)?;
    let lowest = index_by(&|i| (false, members[i].peak_allocated_bytes))?;
    Some(GroupStats {
        median_peak_bytes: median,
        outliers,
        typical,
        highest,
        lowest,
    })
}

/// How far `value` is from `median`, in percent of the median; `None` when the median is 0.
pub fn percent_from_median(value: u64, median: u64) -> Option<f64> {
    (median != 0).then(|| (value as f64 - median as f64) * 100.0 / median as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peaks(values: &[u64]) -> Vec<MemberPeak> {
        values
            .iter()
            .map(|&p| MemberPeak {
                peak_allocated_bytes: p,
                oom_events: 0,
            })
            .collect()
    }

    #[test]
    fn a_rank_far_from_the_median_is_an_outlier() {
        let members = peaks(&[100, 104, 98, 150]);
        let stats = group_stats(&members).expect("members");
        assert_eq!(stats.median_peak_bytes, 104);
        assert_eq!(stats.outliers, vec![false, false, false, true]);
        assert_eq!(stats.typical, 1);
        assert_eq!((stats.highest, stats.lowest), (3, 2));
    }

    #[test]
    fn two_members_have_no_majority_but_an_oom_always_stands_out() {
        let mut members = peaks(&[100, 300]);
        let stats = group_stats(&members).expect("members");
        assert_eq!(stats.outliers, vec![false, false]);
        members[0].oom_events = 1;
        let stats = group_stats(&members).expect("members");
        assert_eq!(stats.outliers, vec![true, false]);
        // The typical member is not an outlier when one that is not exists.
        assert_eq!(stats.typical, 1);
    }

    #[test]
    fn an_empty_group_has_no_statistics_and_a_zero_median_no_percent() {
        assert_eq!(group_stats(&[]), None);
        assert_eq!(percent_from_median(5, 0), None);
        assert_eq!(percent_from_median(110, 100), Some(10.0));
    }
}
