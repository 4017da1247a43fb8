//! Resource quantities as integers: CPU in millicores, everything else in its
//! base unit. The four resources every pod and node has are fields, so the
//! hot path (does this pod fit?) never touches a map.

use std::collections::BTreeMap;
use std::fmt;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

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

    pub fn add(&mut self, other: &Resources) {
        self.cpu += other.cpu;
        self.memory += other.memory;
        self.pods += other.pods;
        self.ephemeral_storage += other.ephemeral_storage;
        for (name, quantity) in &other.extended {
            let current = self.get(name);
            self.set(name, current + quantity);
        }
    }

    pub fn plus(&self, other: &Resources) -> Resources {
        let mut sum = self.clone();
        sum.add(other);
        sum
    }

    pub fn subtract(&mut self, other: &Resources) {
        self.cpu -= other.cpu;
        self.memory -= other.memory;
        self.pods -= other.pods;
        self.ephemeral_storage -= other.ephemeral_storage;
        for (name, quantity) in &other.extended {
            let current = self.get(name);
            self.set(name, current - quantity);
        }
    }

    pub fn minus(&self, other: &Resources) -> Resources {
        let mut difference = self.clone();
        difference.subtract(other);
        difference
    }

    /// Element-wise maximum.
    pub fn max_with(&mut self, other: &Resources) {
        self.cpu = self.cpu.max(other.cpu);
        self.memory = self.memory.max(other.memory);
        self.pods = self.pods.max(other.pods);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (name, quantity) in &other.extended {
            let current = self.get(name);
            if *quantity > current {
                self.set(name, *quantity);
            }
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
            write!(f, "{:?}:{:?}", name, format_quantity(name, self.get(name)))?;
        }
        write!(f, "}}")
    }
}

/// Formats a quantity the way `kubectl` shows it.
pub fn format_quantity(name: &str, quantity: i64) -> String {
    if name == CPU {
        if quantity % 1000 == 0 {
            return (quantity / 1000).to_string();
        }
        return format!("{quantity}m");
    }
    const UNITS: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    if quantity != 0
        && (name == MEMORY || name == EPHEMERAL_STORAGE || name.starts_with("hugepages-"))
    {
        for (suffix, unit) in UNITS {
            if quantity % unit == 0 {
                return format!("{}{suffix}", quantity / unit);
            }
        }
    }
    quantity.to_string()
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
