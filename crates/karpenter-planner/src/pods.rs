//! What a pod asks of a node, as requirements: its node selector, its first
//! required node affinity term and, when preferences count, its heaviest
//! preferred term.
//!
//! Its own module because both the solver and the daemon overhead groups
//! (`daemons`) read a pod this way, and neither should import the other.

use crate::model::Pod;
use crate::requirements::Requirements;

/// The requirements `pod` puts on a node; with `include_preferred`, its
/// heaviest preferred node affinity term too.
pub(crate) fn pod_requirements(pod: &Pod, include_preferred: bool) -> Requirements {
    let mut requirements = Requirements::from_labels(&pod.node_selector);
    if include_preferred && let Some((_, heaviest)) = heaviest(&pod.preferred_terms) {
        requirements.add_all(heaviest);
    }
    if let Some(first) = pod.required_terms.first() {
        requirements.add_all(first);
    }
    requirements
}

/// The heaviest weighted entry; the first among equals.
fn heaviest<T>(list: &[(i32, T)]) -> Option<&(i32, T)> {
    let mut best: Option<&(i32, T)> = None;
    for entry in list {
        if best.is_none_or(|b| entry.0 > b.0) {
            best = Some(entry);
        }
    }
    best
}
