//! Relaxing a pod that fits nowhere: its soft constraints removed one at a
//! time, in Karpenter's order, or all at once when preferences are ignored.

use crate::model::{Pod, WhenUnsatisfiable};
use crate::taints::{Effect, Toleration};

fn remove_heaviest<T>(list: &mut Vec<(i32, T)>) -> bool {
    let Some(index) = list
        .iter()
        .enumerate()
        .fold(None::<(usize, i32)>, |best, (i, (w, _))| match best {
            Some((_, bw)) if bw >= *w => best,
            _ => Some((i, *w)),
        })
        .map(|(i, _)| i)
    else {
        return false;
    };
    list.remove(index);
    true
}

/// Removes one soft constraint, in Karpenter's order. False when none is left.
pub(super) fn relax(pod: &mut Pod, tolerate_prefer_no_schedule: bool) -> bool {
    if pod.required_terms.len() > 1 {
        pod.required_terms.remove(0);
        return true;
    }
    if remove_heaviest(&mut pod.preferred_pod_affinity) {
        return true;
    }
    if remove_heaviest(&mut pod.preferred_pod_anti_affinity) {
        return true;
    }
    if remove_heaviest(&mut pod.preferred_terms) {
        return true;
    }
    if let Some(index) = pod
        .spread
        .iter()
        .position(|c| c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
    {
        pod.spread.swap_remove(index);
        return true;
    }
    if tolerate_prefer_no_schedule {
        let toleration = Toleration {
            key: String::new(),
            exists: true,
            value: String::new(),
            effect: Some(Effect::PreferNoSchedule),
        };
        if !pod.tolerations.contains(&toleration) {
            pod.tolerations.push(toleration);
            return true;
        }
    }
    false
}

pub(super) fn strip_preferences(pod: &mut Pod) {
    pod.preferred_terms.clear();
    pod.preferred_pod_affinity.clear();
    pod.preferred_pod_anti_affinity.clear();
    pod.spread
        .retain(|c| c.when_unsatisfiable != WhenUnsatisfiable::ScheduleAnyway);
}
