//! Resource quantities as integers: CPU in millicores, everything else in its
//! base unit. The four resources every pod and node has are fields, so the
//! hot path (does this pod fit?) never touches a map.
//!
//! Arithmetic saturates: quantities come from requests and manifests, and a
//! sum that wrapped around could make a huge pod "fit" anywhere; a saturated
//! one fits nowhere.

use std::collections::BTreeMap;
use std::fmt;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// The resources every node reports and [`Resources`] keeps as its own
/// fields; any other is an extended resource (a device, hugepages).
pub const CORE: [&str; 4] = [CPU, MEMORY, EPHEMERAL_STORAGE, PODS];

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu: i64,
    pub memory: i64,
    pub pods: i64,
    pub ephemeral_storage: i64,
    /// Every other resource (GPUs, hugepages, ...), sorted by name, no zeros.
    pub extended: Vec<(String, i64)>,
}

impl Resources {
    pub fn from_map<'a>(quantities: impl IntoIterator<Item = (&'a String, &'a i64)>) -> Self {
        let mut resources = Resources::default();
        for (name, quantity) in quantities {
            resources.set(name, *quantity);
        }
        resources
    }

    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu,
            MEMORY => self.memory,
            PODS => self.pods,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            _ => self
                .extended
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .map(|i| self.extended[i].1)
                .unwrap_or(0),
        }
    }

    pub fn set(&mut self, name: &str, quantity: i64) {
        match name {
            CPU => self.cpu = quantity,
            MEMORY => self.memory = quantity,
            PODS => self.pods = quantity,
            EPHEMERAL_STORAGE => self.ephemeral_storage = quantity,
            _ => match self
                .extended
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
            {
                Ok(i) if quantity == 0 => {
                    self.extended.remove(i);
                }
                Ok(i) => self.extended[i].1 = quantity,
                Err(_) if quantity == 0 => {}
                Err(i) => self.extended.insert(i, (name.to_owned(), quantity)),
            },
        }
    }

    /// Names of every resource with a non-zero quantity.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        [
            (CPU, self.cpu),
            (MEMORY, self.memory),
            (PODS, self.pods),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
        ]
        .into_iter()
        .filter(|(_, q)| *q != 0)
        .map(|(n, _)| n)
        .chain(self.extended.iter().map(|(n, _)| n.as_str()))
    }

    /// Combines `other` into `self` resource by resource with `op`; a resource only `other`
    /// has meets zero. The one walk behind [`add`](Self::add), [`subtract`](Self::subtract)
    /// and [`max_with`](Self::max_with).
    fn combine(&mut self, other: &Resources, op: impl Fn(i64, i64) -> i64) {
        self.cpu = op(self.cpu, other.cpu);
        self.memory = op(self.memory, other.memory);
        self.pods = op(self.pods, other.pods);
        self.ephemeral_storage = op(self.ephemeral_storage, other.ephemeral_storage);
        for (name, quantity) in &other.extended {
            let current = self.get(name);
            self.set(name, op(current, *quantity));
        }
    }

    /// [`combine`](Self::combine) into a copy of `self`.
    fn combined(&self, other: &Resources, op: impl Fn(i64, i64) -> i64) -> Resources {
        let mut out = self.clone();
        out.combine(other, op);
        out
    }

    pub fn add(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_add);
    }

    pub fn plus(&self, other: &Resources) -> Resources {
        self.combined(other, i64::saturating_add)
    }

    pub fn subtract(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_sub);
    }

    pub fn minus(&self, other: &Resources) -> Resources {
        self.combined(other, i64::saturating_sub)
    }

    /// Element-wise maximum.
    pub fn max_with(&mut self, other: &Resources) {
        self.combine(other, i64::max);
    }

    /// Element-wise minimum; a resource only one side has is zero.
    pub fn min_with(&mut self, other: &Resources) {
        self.cpu = self.cpu.min(other.cpu);
        self.memory = self.memory.min(other.memory);
        self.pods = self.pods.min(other.pods);
        self.ephemeral_storage = self.ephemeral_storage.min(other.ephemeral_storage);
        let names: Vec<String> = self.extended.iter().map(|(n, _)| n.clone()).collect();
        for name in names {
            let current = self.get(&name);
            self.set(&name, current.min(other.get(&name)));
        }
    }

    /// True when every requested quantity is within `available` (Karpenter's
    /// `resources.Fits`): a resource the node does not have fits only a zero
    /// request.
    pub fn fits(&self, available: &Resources) -> bool {
        self.cpu <= available.cpu
            && self.memory <= available.memory
            && self.pods <= available.pods
            && self.ephemeral_storage <= available.ephemeral_storage
            && self
                .extended
                .iter()
                .all(|(name, quantity)| *quantity <= available.get(name))
    }

    /// Like [`fits`](Self::fits), but only over resources that `limits` names
    /// (for node pool limits, where an absent resource is unlimited).
    pub fn within_limits(&self, limits: &BTreeMap<String, i64>) -> bool {
        limits.iter().all(|(name, limit)| self.get(name) <= *limit)
    }

    /// The first resource that does not fit, for error messages.
    pub fn first_exceeding(&self, available: &Resources) -> Option<&str> {
        self.names()
            .find(|name| self.get(name) > available.get(name))
    }

    pub fn is_zero(&self) -> bool {
        self.cpu == 0
            && self.memory == 0
            && self.pods == 0
            && self.ephemeral_storage == 0
            && self.extended.is_empty()
    }

    pub fn to_map(&self) -> BTreeMap<String, i64> {
        self.names()
            .map(|name| (name.to_owned(), self.get(name)))
            .collect()
    }
}

/// Kubernetes-style rendering, e.g. `{"cpu":"1500m","memory":"2Gi","pods":"3"}`.
impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{")?;
        let mut first = true;
        for name in self.names() {
            if !first {
                write!(f, ",")?;
            }
            first = false;
            write!(
                f,
                "{:?}:{:?}",
                name,
                crate::quantity::format(name, self.get(name))
            )?;
        }
        write!(f, "}}")
    }
}

/// A resource list keyed by name, in wire units (see [`crate::quantity`]).
pub type ResourceMap = BTreeMap<String, i64>;

/// What a node of an instance type offers pods: its capacity minus each
/// overhead (kube-reserved, system-reserved, eviction threshold), as the
/// kubelet computes allocatable. Only resources the capacity has are
/// reduced, and never below zero.
pub fn allocatable<'a>(
    capacity: &ResourceMap,
    overheads: impl IntoIterator<Item = &'a ResourceMap>,
) -> ResourceMap {
    let mut allocatable = capacity.clone();
    for overhead in overheads {
        for (name, reserved) in overhead {
            if let Some(quantity) = allocatable.get_mut(name) {
                *quantity = quantity.saturating_sub(*reserved).max(0);
            }
        }
    }
    allocatable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resources_must_exist_on_the_node_to_fit() {
        let mut gpu_pod = Resources {
            cpu: 100,
            ..Default::default()
        };
        gpu_pod.set("nvidia.com/gpu", 1);
        let cpu_node = Resources {
            cpu: 4000,
            memory: 1 << 34,
            pods: 110,
            ..Default::default()
        };
        assert!(!gpu_pod.fits(&cpu_node));
        assert_eq!(gpu_pod.first_exceeding(&cpu_node), Some("nvidia.com/gpu"));
        let mut gpu_node = cpu_node.clone();
        gpu_node.set("nvidia.com/gpu", 4);
        assert!(gpu_pod.fits(&gpu_node));
    }

    #[test]
    fn minimum_drops_a_resource_one_side_lacks() {
        let mut a = Resources {
            cpu: 2000,
            memory: 1 << 30,
            ..Default::default()
        };
        a.set("nvidia.com/gpu", 1);
        let b = Resources {
            cpu: 1000,
            memory: 2 << 30,
            ..Default::default()
        };
        a.min_with(&b);
        assert_eq!((a.cpu, a.memory), (1000, 1 << 30));
        assert_eq!(a.get("nvidia.com/gpu"), 0);
        assert!(a.extended.is_empty());
    }

    #[test]
    fn sums_saturate_instead_of_wrapping() {
        let huge = Resources {
            cpu: i64::MAX,
            ..Default::default()
        };
        let mut total = huge.plus(&huge);
        assert_eq!(total.cpu, i64::MAX);
        let node = Resources {
            cpu: 4000,
            memory: 1 << 34,
            pods: 110,
            ..Default::default()
        };
        assert!(!total.fits(&node), "a saturated request fits nowhere");
        total.subtract(&Resources {
            cpu: i64::MIN,
            ..Default::default()
        });
        assert_eq!(total.cpu, i64::MAX);
    }

    #[test]
    fn allocatable_is_capacity_minus_overhead_never_negative() {
        let capacity: ResourceMap = [("cpu".to_owned(), 2000), ("memory".to_owned(), 1 << 30)]
            .into_iter()
            .collect();
        let kube_reserved: ResourceMap = [("cpu".to_owned(), 80), ("memory".to_owned(), 2 << 30)]
            .into_iter()
            .collect();
        let eviction: ResourceMap = [("cpu".to_owned(), 20), ("nvidia.com/gpu".to_owned(), 1)]
            .into_iter()
            .collect();
        let allocatable = allocatable(&capacity, [&kube_reserved, &eviction]);
        assert_eq!(allocatable.get("cpu"), Some(&1900));
        assert_eq!(allocatable.get("memory"), Some(&0));
        assert_eq!(allocatable.get("nvidia.com/gpu"), None);
    }

    #[test]
    fn renders_like_kubectl() {
        let resources = Resources {
            cpu: 1500,
            memory: 2 << 30,
            pods: 3,
            ..Default::default()
        };
        assert_eq!(
            resources.to_string(),
            r#"{"cpu":"1500m","memory":"2Gi","pods":"3"}"#
        );
    }
}
