//! `karpctl crds`: the generated CustomResourceDefinitions.

use std::path::Path;

/// Every CRD as one YAML stream, `---` separated.
pub fn all_yaml() -> String {
    let files = karpenter_api::crd_files();
    let mut out = String::new();
    for (i, (_, text)) in files.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// Files under `repo_root` that differ from the generated CRDs.
pub fn stale(repo_root: &Path) -> Vec<String> {
    karpenter_api::stale_crd_files(repo_root)
        .into_iter()
        .map(|p| p.display().to_string())
        .collect()
}
