//! The kinds the server knows: the built-in ones the project touches, and
//! every kind a `CustomResourceDefinition` registers.
//!
//! A resource is addressed by group + plural; its versions share one
//! storage (built-ins here have one version each).

use std::sync::Arc;

use crd_validation::CrdValidator;
use serde_json::{Value, json};

/// One REST resource (`pods`, `nodepools.karpenter.sh`).
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Subresources (`status`, `binding`, `eviction`, `scale`).
    pub subresources: Vec<String>,
    /// `metadata.generation` is kept and bumped on spec changes.
    pub has_generation: bool,
    /// The CRD that registered this resource, with its validator.
    pub crd: Option<Arc<CrdResource>>,
}

/// What a CRD brings: its validator and printer columns per version.
#[derive(Debug)]
pub struct CrdResource {
    pub validator: CrdValidator,
    /// The CRD object as stored.
    pub definition: Value,
}

impl CrdResource {
    /// The CRD's entry for version `name` (its schema, printer columns).
    pub fn version(&self, name: &str) -> Option<&Value> {
        self.definition["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
    }
}

/// The verbs of a built-in resource, as discovery lists them.
const BUILTIN_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A custom resource's verbs, in the CRD discovery controller's order.
const CRD_VERBS: [&str; 8] = [
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];

impl ResourceInfo {
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// `pods` or `nodepools.karpenter.sh`, as error messages name it.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The `APIResource` entries for discovery (the resource and its
    /// subresources).
    pub fn discovery(&self) -> Vec<Value> {
        let verbs = if self.crd.is_some() {
            CRD_VERBS
        } else {
            BUILTIN_VERBS
        };
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
            "categories": self.categories,
        })];
        for sub in &self.subresources {
            let (kind, group, version, verbs) = match sub.as_str() {
                "binding" => ("Binding", "", "v1", json!(["create"])),
                "eviction" => ("Eviction", "policy", "v1", json!(["create"])),
                "scale" => (
                    "Scale",
                    "autoscaling",
                    "v1",
                    json!(["get", "patch", "update"]),
                ),
                _ => (
                    self.kind.as_str(),
                    "",
                    "",
                    json!(["get", "patch", "update"]),
                ),
            };
            let mut entry = json!({
                "name": format!("{}/{sub}", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if !group.is_empty() {
                entry["group"] = json!(group);
                entry["version"] = json!(version);
            }
            out.push(entry);
        }
        out
    }
}

/// The built-in resources, in the order discovery lists them.
pub fn builtins() -> Vec<ResourceInfo> {
    let mut all = core_builtins();
    all.extend(workload_builtins());
    all.extend(cluster_builtins());
    all
}

/// The core (`v1`) group's resources.
fn core_builtins() -> Vec<ResourceInfo> {
    vec![
        builtin("", "namespaces", "Namespace")
            .with_short_names(&["ns"])
            .with_subresources(&["status"]),
        builtin("", "pods", "Pod")
            .namespace_scoped()
            .with_short_names(&["po"])
            .with_subresources(&["status", "binding", "eviction"]),
        builtin("", "nodes", "Node")
            .with_short_names(&["no"])
            .with_subresources(&["status"]),
        builtin("", "events", "Event")
            .namespace_scoped()
            .with_short_names(&["ev"]),
        builtin("", "configmaps", "ConfigMap")
            .namespace_scoped()
            .with_short_names(&["cm"]),
        builtin("", "secrets", "Secret").namespace_scoped(),
        builtin("", "serviceaccounts", "ServiceAccount")
            .namespace_scoped()
            .with_short_names(&["sa"]),
        builtin("", "persistentvolumes", "PersistentVolume")
            .with_short_names(&["pv"])
            .with_subresources(&["status"]),
        builtin("", "persistentvolumeclaims", "PersistentVolumeClaim")
            .namespace_scoped()
            .with_short_names(&["pvc"])
            .with_subresources(&["status"]),
        builtin("", "podtemplates", "PodTemplate")
            .namespace_scoped()
            .with_generation(),
        builtin("", "services", "Service")
            .namespace_scoped()
            .with_short_names(&["svc"])
            .with_subresources(&["status"]),
        builtin("", "replicationcontrollers", "ReplicationController")
            .namespace_scoped()
            .with_short_names(&["rc"])
            .with_subresources(&["status", "scale"])
            .with_generation(),
    ]
}

/// Workload, disruption, lease, event and priority resources.
fn workload_builtins() -> Vec<ResourceInfo> {
    vec![
        builtin("apps", "deployments", "Deployment")
            .namespace_scoped()
            .with_short_names(&["deploy"])
            .with_subresources(&["status", "scale"])
            .with_generation(),
        builtin("apps", "replicasets", "ReplicaSet")
            .namespace_scoped()
            .with_short_names(&["rs"])
            .with_subresources(&["status", "scale"])
            .with_generation(),
        builtin("apps", "statefulsets", "StatefulSet")
            .namespace_scoped()
            .with_short_names(&["sts"])
            .with_subresources(&["status", "scale"])
            .with_generation(),
        builtin("apps", "daemonsets", "DaemonSet")
            .namespace_scoped()
            .with_short_names(&["ds"])
            .with_subresources(&["status"])
            .with_generation(),
        builtin("batch", "jobs", "Job")
            .namespace_scoped()
            .with_subresources(&["status"])
            .with_generation(),
        builtin("policy", "poddisruptionbudgets", "PodDisruptionBudget")
            .namespace_scoped()
            .with_short_names(&["pdb"])
            .with_subresources(&["status"])
            .with_generation(),
        builtin("coordination.k8s.io", "leases", "Lease").namespace_scoped(),
        builtin("events.k8s.io", "events", "Event")
            .namespace_scoped()
            .with_short_names(&["ev"]),
        builtin("scheduling.k8s.io", "priorityclasses", "PriorityClass").with_short_names(&["pc"]),
    ]
}

/// Storage, RBAC and CRD resources.
fn cluster_builtins() -> Vec<ResourceInfo> {
    vec![
        builtin("storage.k8s.io", "storageclasses", "StorageClass").with_short_names(&["sc"]),
        builtin("storage.k8s.io", "csinodes", "CSINode"),
        builtin("storage.k8s.io", "volumeattachments", "VolumeAttachment")
            .with_subresources(&["status"]),
        builtin("rbac.authorization.k8s.io", "clusterroles", "ClusterRole"),
        builtin(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
        ),
        builtin("rbac.authorization.k8s.io", "roles", "Role").namespace_scoped(),
        builtin("rbac.authorization.k8s.io", "rolebindings", "RoleBinding").namespace_scoped(),
        builtin("networking.k8s.io", "networkpolicies", "NetworkPolicy")
            .namespace_scoped()
            .with_short_names(&["netpol"])
            .with_generation(),
        builtin(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
        )
        .with_short_names(&["crd", "crds"])
        .with_subresources(&["status"])
        .with_generation(),
    ]
}

/// A built-in resource of `group`, served at `v1` (as every built-in one
/// here is), cluster-scoped, without short names, subresources or
/// `metadata.generation` unless the `with_*` calls below add them; the
/// workload kinds are in the `all` category, as kubectl's `get all` expects.
fn builtin(group: &str, plural: &str, kind: &str) -> ResourceInfo {
    let workload = matches!(
        plural,
        "pods"
            | "deployments"
            | "replicasets"
            | "statefulsets"
            | "daemonsets"
            | "jobs"
            | "services"
    );
    ResourceInfo {
        group: group.to_string(),
        versions: vec!["v1".to_string()],
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        kind: kind.to_string(),
        namespaced: false,
        short_names: Vec::new(),
        categories: if workload {
            vec!["all".to_string()]
        } else {
            Vec::new()
        },
        subresources: Vec::new(),
        has_generation: false,
        crd: None,
    }
}

/// How [`builtin`]'s resources differ from its defaults.
impl ResourceInfo {
    fn namespace_scoped(mut self) -> Self {
        self.namespaced = true;
        self
    }

    fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn with_subresources(mut self, subresources: &[&str]) -> Self {
        self.subresources = subresources.iter().map(|s| s.to_string()).collect();
        self
    }

    fn with_generation(mut self) -> Self {
        self.has_generation = true;
        self
    }
}

/// The resource a CRD registers (served versions only).
pub fn from_crd(validator: CrdValidator, definition: Value) -> ResourceInfo {
    let names = validator.names().clone();
    let versions: Vec<String> = validator
        .versions()
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.clone())
        .collect();
    let has_status = definition["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| v["subresources"].get("status").is_some());
    let has_scale = definition["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| v["subresources"].get("scale").is_some());
    let mut subresources = Vec::new();
    if has_status {
        subresources.push("status".to_string());
    }
    if has_scale {
        subresources.push("scale".to_string());
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let names_json = &definition["spec"]["names"];
    ResourceInfo {
        group: validator.group().to_string(),
        versions,
        plural: names.plural.clone(),
        singular: names_json["singular"]
            .as_str()
            .map_or_else(|| validator.kind().to_lowercase(), str::to_string),
        kind: validator.kind().to_string(),
        namespaced: definition["spec"]["scope"].as_str() == Some("Namespaced"),
        short_names: strings(&names_json["shortNames"]),
        categories: strings(&names_json["categories"]),
        subresources,
        has_generation: true,
        crd: Some(Arc::new(CrdResource {
            validator,
            definition,
        })),
    }
}
