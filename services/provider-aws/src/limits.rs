//! What EC2's API does not say about an instance type but Karpenter's labels
//! and resources need: the network bandwidth AWS documents (the API's
//! per-card figures differ from it for multi-card types, and it publishes
//! only "Up to ..." for small ones), and the branch network interfaces a
//! trunking-compatible type gives pods (`vpc.amazonaws.com/pod-eni`).
//!
//! The table is `data/instance-type-limits.tsv`, generated from Karpenter's
//! published instance-type reference by `scripts/gen-instance-type-data`.
//! A type it does not list (newer than the table) gets no bandwidth label
//! and no pod ENIs, as upstream treats a type missing from its tables.

use std::collections::HashMap;
use std::sync::LazyLock;

const TABLE_TEXT: &str = include_str!("../data/instance-type-limits.tsv");

/// The table's facts about one instance type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Baseline network bandwidth in Mbit/s, when AWS documents a figure.
    pub network_mbps: Option<i64>,
    /// Branch interfaces for pods with security groups; 0 when the type
    /// cannot trunk.
    pub pod_eni: i64,
}

static TABLE: LazyLock<HashMap<&'static str, Limits>> = LazyLock::new(|| parse(TABLE_TEXT));

/// What the table says of `instance_type` (nothing for an unknown type).
pub fn of(instance_type: &str) -> Limits {
    TABLE.get(instance_type).copied().unwrap_or_default()
}

/// Lines of `name<TAB>bandwidth or -<TAB>pod ENIs`; comments start with `#`.
/// A malformed line is skipped (the file is generated and tested whole).
fn parse(text: &str) -> HashMap<&str, Limits> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let name = fields.next()?;
            let bandwidth = fields.next()?;
            let pod_eni = fields.next()?.trim().parse().ok()?;
            let network_mbps = match bandwidth {
                "-" => None,
                mbps => Some(mbps.parse().ok()?),
            };
            Some((
                name,
                Limits {
                    network_mbps,
                    pod_eni,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_table_parses() {
        let lines = TABLE_TEXT
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .count();
        assert!(lines > 1000, "{lines} types");
        assert_eq!(TABLE.len(), lines, "a line did not parse");
    }

    #[test]
    fn documented_figures_and_unknown_types() {
        assert_eq!(
            of("m5.large"),
            Limits {
                network_mbps: Some(750),
                pod_eni: 9
            }
        );
        assert_eq!(of("t3.micro").pod_eni, 0, "t3 cannot trunk");
        assert_eq!(of("no-such.type"), Limits::default());
    }
}
