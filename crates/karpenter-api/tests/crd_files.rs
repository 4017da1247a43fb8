//! The CRD YAML files in the repository must match what the Rust types generate.
//!
//! Regenerate them with `cargo run -p karpctl -- crds --write`, or with
//! `UPDATE_CRDS=1 cargo test -p karpenter-api --test crd_files`.

use std::path::PathBuf;

use karpenter_api::{
    CRD_OUTPUT_DIRS, REGENERATE_COMMAND, crd_files, stale_crd_files, write_crd_files,
};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn crd_files_on_disk_are_up_to_date() {
    let root = repo_root();
    if std::env::var("UPDATE_CRDS").is_ok_and(|v| v == "1") {
        match write_crd_files(&root) {
            Ok(written) => eprintln!("UPDATE_CRDS=1: wrote {} CRD files", written.len()),
            Err(e) => panic!("UPDATE_CRDS=1: {e}"),
        }
    }
    let stale = stale_crd_files(&root);
    assert!(
        stale.is_empty(),
        "these CRD files are missing or out of date with the Rust types in crates/karpenter-api:\n  {}\n\
         Regenerate them with:\n  {REGENERATE_COMMAND}\n\
         or:\n  UPDATE_CRDS=1 cargo test -p karpenter-api --test crd_files\n\
         and commit the result.",
        stale
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

#[test]
fn crd_file_names_follow_karpenter() {
    let names: Vec<String> = crd_files().into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "karpenter.sh_nodepools.yaml",
            "karpenter.sh_nodeclaims.yaml",
            "karpenter.sh_nodeoverlays.yaml",
            "autoscaling.x-k8s.io_capacitybuffers.yaml",
            "karpenter.k8s.aws_ec2nodeclasses.yaml"
        ]
    );
    assert_eq!(CRD_OUTPUT_DIRS, ["deploy/crds", "charts/karpenter/crds"]);
}

#[test]
fn rendered_yaml_parses_back_into_the_same_crd() {
    for (name, yaml) in crd_files() {
        let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{name} does not parse back: {e}"));
        let original = karpenter_api::crds()
            .into_iter()
            .find(|c| karpenter_api::crd_file_name(c) == name)
            .unwrap_or_else(|| panic!("no CRD for {name}"));
        assert_eq!(parsed, original, "{name} changes when parsed back");
        assert!(
            !yaml.contains(".0\n"),
            "{name}: bounds should be written as integers"
        );
    }
}
