//! Attachable-volume limits: how many volumes of each CSI driver a node's
//! pods attach (a claim two pods share counts once), against the node's
//! limit per driver (Karpenter's `VolumeUsage`). A driver without a limit
//! is unlimited.

use std::collections::{BTreeMap, BTreeSet};

/// A volume of a pod that counts against its node's limit: its CSI driver
/// and its claim (`namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeRef {
    pub driver: String,
    pub claim: String,
}

/// Driver → how many volumes a node can attach.
pub type VolumeLimits = BTreeMap<String, i64>;

/// The volumes a node's pods attach, by driver.
#[derive(Clone, Debug, Default)]
pub struct VolumeUsage {
    claims: BTreeMap<String, BTreeSet<String>>,
}

impl VolumeUsage {
    pub fn add(&mut self, volumes: &[VolumeRef]) {
        for v in volumes {
            self.claims
                .entry(v.driver.clone())
                .or_default()
                .insert(v.claim.clone());
        }
    }

    /// The first driver `volumes` would take past its limit in `limits`:
    /// (driver, volumes then attached, limit).
    pub fn exceeds(
        &self,
        volumes: &[VolumeRef],
        limits: &VolumeLimits,
    ) -> Option<(String, usize, i64)> {
        if volumes.is_empty() || limits.is_empty() {
            return None;
        }
        first_over(&self.attached_with(volumes), limits)
    }

    /// How many volumes each driver of `volumes` would then have attached
    /// (worked out once, to weigh against several limits).
    pub fn attached_with<'v>(&self, volumes: &'v [VolumeRef]) -> BTreeMap<&'v str, usize> {
        let mut attached: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for v in volumes {
            attached
                .entry(v.driver.as_str())
                .or_insert_with(|| {
                    let held = self.claims.get(&v.driver).into_iter().flatten();
                    held.map(String::as_str).collect()
                })
                .insert(v.claim.as_str());
        }
        attached
            .into_iter()
            .map(|(d, claims)| (d, claims.len()))
            .collect()
    }
}

/// The first driver whose `attached` count passes its limit in `limits`:
/// (driver, volumes attached, limit).
pub fn first_over(
    attached: &BTreeMap<&str, usize>,
    limits: &VolumeLimits,
) -> Option<(String, usize, i64)> {
    attached.iter().find_map(|(driver, count)| {
        let limit = *limits.get(*driver)?;
        (i64::try_from(*count).unwrap_or(i64::MAX) > limit)
            .then(|| ((*driver).to_owned(), *count, limit))
    })
}

/// Karpenter's message for a volume limit a pod would pass.
pub fn exceeded_message((driver, count, limit): &(String, usize, i64)) -> String {
    format!(
        "would exceed volume limit (provisioner={driver}, volume-count={count}, volume-limit={limit})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(driver: &str, claim: &str) -> VolumeRef {
        VolumeRef {
            driver: driver.into(),
            claim: claim.into(),
        }
    }

    #[test]
    fn shared_claims_count_once_and_unlimited_drivers_never_exceed() {
        let limits = VolumeLimits::from([("ebs.csi.aws.com".to_owned(), 2)]);
        let mut usage = VolumeUsage::default();
        usage.add(&[volume("ebs.csi.aws.com", "default/a")]);
        assert_eq!(
            usage.exceeds(&[volume("ebs.csi.aws.com", "default/a")], &limits),
            None
        );
        assert_eq!(
            usage.exceeds(&[volume("ebs.csi.aws.com", "default/b")], &limits),
            None
        );
        usage.add(&[volume("ebs.csi.aws.com", "default/b")]);
        assert_eq!(
            usage.exceeds(&[volume("ebs.csi.aws.com", "default/c")], &limits),
            Some(("ebs.csi.aws.com".to_owned(), 3, 2))
        );
        assert_eq!(
            usage.exceeds(&[volume("efs.csi.aws.com", "default/c")], &limits),
            None
        );
    }
}
