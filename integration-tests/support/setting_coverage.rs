// The settings check shared by each service's `setting_coverage` test,
// included by them (`include!`) after they define `SERVICE` (the name the
// coverage page uses) and `BINARY` (the path of their binary): the
// settings rows of `docs/drop-in-coverage.md` (section `## Settings`)
// against the environment variables the binary takes, as its `--help`
// lists them.

use std::collections::BTreeSet;
use std::path::Path;

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The environment variables the binary reads (`[env: NAME=...]`).
fn taken() -> BTreeSet<String> {
    let out = std::process::Command::new(BINARY)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{SERVICE} --help: {e}"));
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    help.split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_settings_table_says_which_settings_this_service_takes() {
    let upstream: BTreeSet<String> = repo_file("testdata/upstream-v1.14/settings.txt")
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(str::to_owned)
        .collect();
    let page = repo_file("docs/drop-in-coverage.md");
    let rows: Vec<(String, String)> = page
        .lines()
        .skip_while(|line| *line != "## Settings")
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` | "))
        .map(|(name, rest)| {
            (
                name.to_owned(),
                rest.split(" |").next().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let named: BTreeSet<String> = rows.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(named, upstream, "one row per upstream setting");
    let taken = taken();
    for (name, read_by) in &rows {
        let says = read_by.split(", ").any(|s| s == SERVICE);
        assert_eq!(
            says,
            taken.contains(name),
            "{name}: the page says it is read by {read_by:?}; {SERVICE} takes {taken:?}"
        );
    }
}
