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
        let drivers: BTreeSet<&str> = volumes.iter().map(|v| v.driver.as_str()).collect();
        drivers.into_iter().find_map(|driver| {
            let limit = *limits.get(driver)?;
            let mut attached: BTreeSet<&str> = self
                .claims
                .get(driver)
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect();
            attached.extend(
                volumes
                    .iter()
                    .filter(|v| v.driver == driver)
                    .map(|v| v.claim.as_str()),
            );
            let count = attached.len();
            (i64::try_from(count).unwrap_or(i64::MAX) > limit)
                .then(|| (driver.to_owned(), count, limit))
        })
    }
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
