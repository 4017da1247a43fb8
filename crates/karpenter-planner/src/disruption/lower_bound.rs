//! The cost no plan can beat: the managed nodes' pods packed fractionally
//! into the cheapest instance types (a linear relaxation of bin packing),
//! reported next to a plan's cost.

use std::collections::BTreeSet;

use crate::model::{Cluster, OfferingFilter};
use crate::resources::Resources;

/// The cheapest any set of nodes from the pools could hold the managed
/// nodes' pods for, if pods could be split across nodes: the optimum of the
/// linear relaxation of bin packing over CPU, memory and pod count. No real
/// plan can beat it.
pub fn lower_bound(cluster: &Cluster) -> f64 {
    let mut demand = Resources::default();
    for node in cluster
        .nodes
        .iter()
        .filter(|n| n.is_managed() && !n.marked_for_deletion)
    {
        for pod in node.pods.iter().filter(|p| p.is_active() && !p.is_daemon()) {
            demand.add(&pod.requests);
        }
    }
    if demand.is_zero() {
        return 0.0;
    }
    let demand = [demand.cpu as f64, demand.memory as f64, demand.pods as f64];
    let mut columns: Vec<([f64; 3], f64)> = Vec::new();
    let mut seen = BTreeSet::new();
    for pool in cluster.node_pools.iter().filter(|p| p.ready) {
        let Some(catalog) = cluster.catalogs.get(pool.catalog) else {
            continue;
        };
        let filter = OfferingFilter::new(&pool.requirements, &cluster.offering_space);
        for it in catalog {
            if it.requirements.intersects(&pool.requirements).is_err()
                || !seen.insert(it.name.clone())
            {
                continue;
            }
            let Some(offering) = it.cheapest_allowed(&filter) else {
                continue;
            };
            let a = &it.allocatable;
            columns.push((
                [
                    a.cpu.max(0) as f64,
                    a.memory.max(0) as f64,
                    a.pods.max(0) as f64,
                ],
                offering.price,
            ));
        }
    }
    covering_lp(&demand, &columns).unwrap_or(0.0)
}

/// min Σ price_j x_j subject to Σ a_j x_j ≥ demand, x ≥ 0, solved through
/// its dual (max demand·y subject to a_j·y ≤ price_j, y ≥ 0) with a dense
/// simplex: three variables, one constraint per instance type.
fn covering_lp(demand: &[f64; 3], columns: &[([f64; 3], f64)]) -> Option<f64> {
    // Scale each resource so the numbers stay near 1.
    let scale: Vec<f64> = (0..3)
        .map(|r| {
            let max = columns.iter().map(|(a, _)| a[r]).fold(0.0_f64, f64::max);
            if max > 0.0 { max } else { 1.0 }
        })
        .collect();
    let m = columns.len();
    if m == 0 {
        return None;
    }
    // Tableau rows: constraints a_j·y + s_j = price_j; objective row last.
    let width = 3 + m + 1;
    let mut tableau = vec![vec![0.0; width]; m + 1];
    for (j, (a, price)) in columns.iter().enumerate() {
        for r in 0..3 {
            tableau[j][r] = a[r] / scale[r];
        }
        tableau[j][3 + j] = 1.0;
        tableau[j][width - 1] = *price;
    }
    for r in 0..3 {
        tableau[m][r] = -demand[r] / scale[r];
    }
    for _ in 0..(10 * (m + 3)) {
        // Entering: most negative reduced cost.
        let (entering, value) = (0..width - 1)
            .map(|c| (c, tableau[m][c]))
            .min_by(|a, b| a.1.total_cmp(&b.1))?;
        if value >= -1e-12 {
            return Some(tableau[m][width - 1]);
        }
        let leaving = (0..m)
            .filter(|row| tableau[*row][entering] > 1e-12)
            .min_by(|a, b| {
                (tableau[*a][width - 1] / tableau[*a][entering])
                    .total_cmp(&(tableau[*b][width - 1] / tableau[*b][entering]))
            })?;
        let pivot = tableau[leaving][entering];
        for value in tableau[leaving].iter_mut() {
            *value /= pivot;
        }
        let pivot_row = tableau[leaving].clone();
        for (row, values) in tableau.iter_mut().enumerate() {
            if row == leaving {
                continue;
            }
            let factor = values[entering];
            if factor != 0.0 {
                for (value, p) in values.iter_mut().zip(&pivot_row) {
                    *value -= factor * p;
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covering_lp_mixes_types_fractionally() {
        // Need 8 CPU and 8 GiB: a CPU-heavy type (4 CPU, 1 GiB, $1) and a
        // memory-heavy one (1 CPU, 4 GiB, $1): 1.6 of each = $3.2.
        let columns = [([4.0, 1.0, 100.0], 1.0), ([1.0, 4.0, 100.0], 1.0)];
        let cost = covering_lp(&[8.0, 8.0, 1.0], &columns).unwrap();
        assert!((cost - 3.2).abs() < 1e-9, "{cost}");
    }
}
