//! The drop-in coverage table of Karpenter's metrics
//! (`docs/drop-in-coverage.md`) against the upstream list stored as test
//! data and against what the adapter's registry exposes.

use std::collections::BTreeSet;
use std::path::Path;

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The names the adapter exposes, as a scrape shows them: its own
/// metrics, and the service registry's (`karpenter_build_info`), whose
/// page shows them before any sample.
fn exposed() -> BTreeSet<String> {
    let registry = karpenter_runtime::Metrics::new("karpenter");
    let page = registry.encode().unwrap_or_else(|e| panic!("{e}"));
    let service = page
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| match kind {
            "counter" => format!("{name}_total"),
            _ => name.to_owned(),
        });
    karpenter_adapter::metrics::AdapterMetrics::exposed_names()
        .into_iter()
        .chain(service)
        .collect()
}

/// The lines of the section `heading` (`## Metrics`) of the coverage page.
pub fn section(heading: &str) -> Vec<String> {
    repo_file("docs/drop-in-coverage.md")
        .lines()
        .skip_while(|line| *line != heading)
        .skip(1)
        .take_while(|line| !line.starts_with("## "))
        .map(str::to_owned)
        .collect()
}

/// `(name, state)` of each row of the metrics table.
fn table() -> Vec<(String, String)> {
    section("## Metrics")
        .iter()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` | "))
        .map(|(name, state)| (name.to_owned(), state.trim_end_matches(" |").to_owned()))
        .collect()
}

#[test]
fn the_coverage_table_says_what_the_adapter_exposes() {
    let upstream: Vec<String> = repo_file("testdata/upstream-v1.14/metrics.txt")
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(str::to_owned)
        .collect();
    let rows = table();
    let named: Vec<&String> = rows.iter().map(|(name, _)| name).collect();
    assert_eq!(
        named,
        upstream.iter().collect::<Vec<_>>(),
        "one row per upstream metric, in upstream's order"
    );
    let exposed = exposed();
    for (name, state) in &rows {
        assert_eq!(
            state == "yes",
            exposed.contains(name),
            "{name}: the table says {state:?}; exposed: {exposed:?}"
        );
    }
    let karpenter: Vec<_> = rows
        .iter()
        .filter(|(n, _)| n.starts_with("karpenter_"))
        .collect();
    let karpenter_yes = karpenter.iter().filter(|(_, s)| s == "yes").count();
    let all_yes = rows.iter().filter(|(_, s)| s == "yes").count();
    let summary = format!(
        "Coverage: **{karpenter_yes} of {}** `karpenter_*` names, **{all_yes} of {}** names in all.",
        karpenter.len(),
        rows.len()
    );
    assert!(
        repo_file("docs/drop-in-coverage.md").contains(&summary),
        "the summary line reads: {summary}"
    );
    println!("{summary}");
}
