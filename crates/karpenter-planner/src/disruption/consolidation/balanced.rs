//! Karpenter's Balanced consolidation policy (v1.14): a move of a
//! Balanced pool's nodes goes ahead only when the share of the pool's cost
//! it saves is worth the share of the pool's disruption it causes:
//!
//! ```text
//!   score = (savings / pool cost) / (move's disruption / pool's disruption)
//!   approved when score >= 1 / K   (K = 2)
//! ```
//!
//! A node's disruption is [`reschedule_disruption_cost`]; the pool's sums
//! it over every node of the pool, candidates or not. A move across pools
//! is scored per Balanced pool, each with its share of the savings (by the
//! candidates' prices), and goes ahead only when every one approves; pools
//! of other policies are not scored.

use std::collections::{BTreeMap, HashMap};

use crate::disruption::candidates::{Candidate, node_price, reschedule_disruption_cost};
use crate::model::{Cluster, ConsolidationPolicy};

/// Karpenter's `BalancedK`: a move may cost up to K times more of the
/// pool's disruption than it saves of its cost.
pub const BALANCED_K: f64 = 2.0;

/// What a Balanced pool's scores are normalized by.
#[derive(Clone, Copy, Debug, Default)]
struct PoolTotals {
    cost: f64,
    disruption: f64,
}

/// A move's score in one pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    pub savings_fraction: f64,
    pub disruption_fraction: f64,
}

impl Score {
    fn of(savings: f64, disruption: f64, totals: PoolTotals) -> Self {
        // Nothing to normalize against: the move scores 0.
        if totals.cost <= 0.0 || totals.disruption <= 0.0 {
            return Self {
                savings_fraction: 0.0,
                disruption_fraction: 0.0,
            };
        }
        Self {
            savings_fraction: savings / totals.cost,
            disruption_fraction: disruption / totals.disruption,
        }
    }

    /// Savings per disruption; a move that saves nothing scores 0, one that
    /// disrupts nothing scores infinity.
    pub fn value(&self) -> f64 {
        if self.savings_fraction <= 0.0 {
            0.0
        } else if self.disruption_fraction == 0.0 {
            f64::INFINITY
        } else {
            self.savings_fraction / self.disruption_fraction
        }
    }

    pub fn approved(&self) -> bool {
        self.value() >= 1.0 / BALANCED_K
    }
}

/// The totals of a round's Balanced pools, by pool index.
#[derive(Debug, Default)]
pub(super) struct Balanced {
    totals: HashMap<usize, PoolTotals>,
}

impl Balanced {
    /// The totals of the Balanced pools among `candidates`' pools. A pool's
    /// cost is that of all its nodes (its candidates' when no node has a
    /// price).
    pub(super) fn new(cluster: &Cluster, candidates: &[&Candidate]) -> Self {
        let mut totals: HashMap<usize, PoolTotals> = HashMap::new();
        for candidate in candidates {
            if cluster.node_pools[candidate.pool].consolidation == ConsolidationPolicy::Balanced {
                totals.entry(candidate.pool).or_default();
            }
        }
        if totals.is_empty() {
            return Self { totals };
        }
        // One pass over the nodes for every Balanced pool.
        let pool_of: HashMap<&str, usize> = totals
            .keys()
            .map(|&pool| (cluster.node_pools[pool].name.as_str(), pool))
            .collect();
        for node in cluster.nodes.iter().filter(|n| !n.planned) {
            if let Some(total) = pool_of
                .get(node.node_pool.as_str())
                .and_then(|pool| totals.get_mut(pool))
            {
                total.cost += node_price(cluster, node);
                total.disruption += reschedule_disruption_cost(node);
            }
        }
        for (&pool, total) in &mut totals {
            if total.cost <= 0.0 {
                total.cost = candidates
                    .iter()
                    .filter(|c| c.pool == pool)
                    .map(|c| c.price)
                    .sum();
            }
        }
        Self { totals }
    }

    /// Whether deleting `candidate` outright (the best any move of it can
    /// do) would pass; candidates that cannot are not tried.
    pub(super) fn can_pass(&self, candidate: &Candidate) -> bool {
        self.totals.get(&candidate.pool).is_none_or(|&totals| {
            totals.cost <= 0.0
                || Score::of(candidate.price, candidate.reschedule_cost, totals).approved()
        })
    }

    /// The scores of the Balanced pools among `candidates`' for a move
    /// saving `savings` per hour, by pool name: `Ok` when every one
    /// approves, `Err` with all of them when one scores it below the
    /// threshold.
    pub(super) fn scores(
        &self,
        cluster: &Cluster,
        candidates: &[&Candidate],
        savings: f64,
    ) -> Result<BTreeMap<String, Score>, BTreeMap<String, Score>> {
        let mut scores = BTreeMap::new();
        let mut approved = true;
        let source_cost: f64 = candidates.iter().map(|c| c.price).sum();
        let mut pools: Vec<usize> = candidates.iter().map(|c| c.pool).collect();
        pools.sort_unstable();
        pools.dedup();
        for pool in &pools {
            let Some(&totals) = self.totals.get(pool) else {
                continue;
            };
            let of_pool = candidates.iter().filter(|c| c.pool == *pool);
            let pool_cost: f64 = of_pool.clone().map(|c| c.price).sum();
            let disruption: f64 = of_pool.map(|c| c.reschedule_cost).sum();
            let pool_savings = if pools.len() > 1 && source_cost > 0.0 {
                savings * pool_cost / source_cost
            } else {
                savings
            };
            let score = Score::of(pool_savings, disruption, totals);
            approved &= score.approved();
            scores.insert(cluster.node_pools[*pool].name.clone(), score);
        }
        if approved { Ok(scores) } else { Err(scores) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's example pool: ten nodes costing 58.08 a day, 80 pods,
    /// a disruption cost of 90.
    const RFC_POOL: PoolTotals = PoolTotals {
        cost: 58.08,
        disruption: 90.0,
    };

    fn score(savings: f64, disruption: f64) -> Score {
        Score::of(savings, disruption, RFC_POOL)
    }

    /// Ports of upstream's ScoreMove cases (`balanced_test.go`).
    #[test]
    fn scores_follow_upstream() {
        let oversized = score(7.26, 4.0);
        assert!(oversized.approved());
        assert!((oversized.value() - (7.26 / 58.08) / (4.0 / 90.0)).abs() < 0.02);
        assert!(score(4.84, 5.0).approved(), "spare capacity delete");
        let marginal = score(2.42, 9.0);
        assert!(!marginal.approved(), "marginal move: {}", marginal.value());
        assert_eq!(score(0.0, 11.0).value(), 0.0, "well packed, nothing saved");
        let uniform = Score::of(
            2.42,
            9.0,
            PoolTotals {
                cost: 48.40,
                disruption: 90.0,
            },
        );
        assert!(uniform.approved(), "a replace in a uniform pool");
        let scaled = Score::of(
            7.26,
            4.0,
            PoolTotals {
                cost: 580.80,
                disruption: 900.0,
            },
        );
        assert!(
            (scaled.value() - oversized.value()).abs() < 0.01,
            "scale invariant"
        );
        let free = score(4.84, 0.0);
        assert!(free.value().is_infinite() && free.approved());
        assert!(!score(0.0, 0.0).approved());
        let no_cost = Score::of(
            4.84,
            5.0,
            PoolTotals {
                cost: 0.0,
                disruption: 90.0,
            },
        );
        assert!(!no_cost.approved(), "a pool without cost scores 0");
        let at_threshold = Score::of(
            1.0,
            2.0,
            PoolTotals {
                cost: 10.0,
                disruption: 10.0,
            },
        );
        assert!(at_threshold.approved(), "exactly 1/K passes");
    }
}
