//! The fields of a Kubernetes object's `metadata` (`ObjectMeta`): those a
//! client writes and those the API server sets. One list each for the CRD
//! validator (anything else in `metadata` is unknown) and the manifest
//! converter (which drops the server's fields from objects it re-creates).

/// The `metadata` fields a client writes.
pub const CLIENT_FIELDS: [&str; 7] = [
    "name",
    "generateName",
    "namespace",
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
];

/// The `metadata` fields the API server sets; a client's value is ignored or rejected.
pub const SERVER_FIELDS: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Whether `field` is a field of `ObjectMeta`.
pub fn is_field(field: &str) -> bool {
    CLIENT_FIELDS.contains(&field) || SERVER_FIELDS.contains(&field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_lists_are_metadata_fields() {
        for field in CLIENT_FIELDS.iter().chain(&SERVER_FIELDS) {
            assert!(is_field(field), "{field}");
        }
        assert!(!is_field("spec"));
    }
}
