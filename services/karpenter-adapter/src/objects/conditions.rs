//! Status conditions with Karpenter's semantics (operatorpkg's condition
//! set): a root `Ready` over dependents, reason = type when True, the
//! transition time kept while the status does not change, and the
//! generation observed on every write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use karpenter_api::{Condition, ConditionStatus};

pub const READY: &str = "Ready";

/// The reason and message a condition is created with before anything
/// decided it.
pub const AWAITING: (&str, &str) = (
    "AwaitingReconciliation",
    "object is awaiting reconciliation",
);

/// The conditions of one object, edited in memory and written back once.
pub struct Conditions<'a> {
    list: &'a mut Vec<Condition>,
    generation: i64,
    now: Timestamp,
    /// The dependents of the root `Ready` condition.
    dependents: &'a [&'a str],
}

impl<'a> Conditions<'a> {
    /// Materializes the root and its dependents as Unknown (transition time:
    /// the object's creation) when absent, as operatorpkg does.
    pub fn new(
        list: &'a mut Vec<Condition>,
        generation: i64,
        created: Option<Timestamp>,
        dependents: &'a [&'a str],
    ) -> Self {
        let now = Timestamp::now();
        let created = created.unwrap_or(now);
        for type_ in std::iter::once(READY).chain(dependents.iter().copied()) {
            if !list.iter().any(|c| c.type_ == type_) {
                list.push(Condition {
                    type_: type_.to_owned(),
                    status: ConditionStatus::Unknown,
                    observed_generation: Some(generation),
                    last_transition_time: Time(created),
                    reason: AWAITING.0.to_owned(),
                    message: AWAITING.1.to_owned(),
                });
            }
        }
        Self {
            list,
            generation,
            now,
            dependents,
        }
    }

    /// Conditions of a kind without Karpenter's root `Ready` (Kubernetes'
    /// `SetStatusCondition` on a plain list, as CapacityBuffer's).
    pub fn without_root(list: &'a mut Vec<Condition>, generation: i64) -> Self {
        Self {
            list,
            generation,
            now: Timestamp::now(),
            dependents: &[],
        }
    }

    pub fn get(&self, type_: &str) -> Option<&Condition> {
        self.list.iter().find(|c| c.type_ == type_)
    }

    pub fn is_true(&self, type_: &str) -> bool {
        self.get(type_)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// Absent counts as Unknown.
    pub fn is_unknown(&self, type_: &str) -> bool {
        self.get(type_)
            .is_none_or(|c| c.status == ConditionStatus::Unknown)
    }

    /// Keeps a decided condition as it is, but observed at the current
    /// generation (Karpenter rewrites every condition on each pass).
    pub fn refresh(&mut self, type_: &str) {
        let generation = self.generation;
        let Some(c) = self.list.iter_mut().find(|c| c.type_ == type_) else {
            return;
        };
        if c.observed_generation == Some(generation) {
            return;
        }
        c.observed_generation = Some(generation);
        if type_ != READY && self.dependents.contains(&type_) {
            self.recompute_root();
        }
    }

    /// Removes a condition Karpenter clears rather than sets False
    /// (`Consolidatable`, `Drifted`); the root and its dependents stay.
    pub fn clear(&mut self, type_: &str) {
        if type_ != READY && !self.dependents.contains(&type_) {
            self.list.retain(|c| c.type_ != type_);
        }
    }

    pub fn set_true(&mut self, type_: &str) {
        self.set(type_, ConditionStatus::True, type_, "");
    }

    pub fn set_false(&mut self, type_: &str, reason: &str, message: &str) {
        self.set(type_, ConditionStatus::False, reason, message);
    }

    pub fn set_unknown(&mut self, type_: &str, reason: &str, message: &str) {
        self.set(type_, ConditionStatus::Unknown, reason, message);
    }

    /// Writes a condition: the transition time moves only when the status
    /// does; then the root is recomputed.
    pub fn set(&mut self, type_: &str, status: ConditionStatus, reason: &str, message: &str) {
        self.write(type_, status, reason, message);
        if type_ != READY && self.dependents.contains(&type_) {
            self.recompute_root();
        }
    }

    fn write(&mut self, type_: &str, status: ConditionStatus, reason: &str, message: &str) {
        let generation = self.generation;
        let now = self.now;
        match self.list.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = Time(now);
                }
                c.status = status;
                c.reason = reason.to_owned();
                c.message = message.to_owned();
                c.observed_generation = Some(generation);
            }
            None => self.list.push(Condition {
                type_: type_.to_owned(),
                status,
                observed_generation: Some(generation),
                last_transition_time: Time(now),
                reason: reason.to_owned(),
                message: message.to_owned(),
            }),
        }
        // Root last, the rest by transition time.
        self.list.sort_by(|a, b| {
            (a.type_ == READY)
                .cmp(&(b.type_ == READY))
                .then(a.last_transition_time.0.cmp(&b.last_transition_time.0))
        });
    }

    fn recompute_root(&mut self) {
        let generation = self.generation;
        let dependents: Vec<&Condition> = self
            .dependents
            .iter()
            .filter_map(|d| self.list.iter().find(|c| c.type_ == *d))
            .collect();
        let healthy = |c: &Condition| {
            c.status == ConditionStatus::True && c.observed_generation == Some(generation)
        };
        if dependents.len() == self.dependents.len() && dependents.iter().all(|c| healthy(c)) {
            self.write(READY, ConditionStatus::True, READY, "");
            return;
        }
        let mut unhealthy: Vec<&Condition> =
            dependents.into_iter().filter(|c| !healthy(c)).collect();
        unhealthy.sort_by_key(|c| std::cmp::Reverse(c.last_transition_time.0));
        let message = unhealthy
            .iter()
            .map(|c| format!("{}={}", c.type_, status_text(c.status)))
            .collect::<Vec<_>>()
            .join(", ");
        let any_false = unhealthy.iter().any(|c| {
            c.status == ConditionStatus::False && c.observed_generation == Some(generation)
        });
        if any_false {
            self.write(
                READY,
                ConditionStatus::False,
                "UnhealthyDependents",
                &message,
            );
        } else {
            self.write(
                READY,
                ConditionStatus::Unknown,
                "ReconcilingDependents",
                &message,
            );
        }
    }
}

pub fn status_text(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAIM: &[&str] = &["Launched", "Registered", "Initialized"];

    #[test]
    fn the_root_follows_its_dependents() {
        let mut list = Vec::new();
        let mut conditions = Conditions::new(&mut list, 1, None, CLAIM);
        assert!(conditions.is_unknown(READY));
        conditions.set_true("Launched");
        let ready = conditions.get(READY).cloned().expect("root");
        assert_eq!(ready.reason, "ReconcilingDependents");
        assert!(
            ready.message.contains("Registered=Unknown"),
            "{}",
            ready.message
        );
        conditions.set_true("Registered");
        conditions.set_true("Initialized");
        assert!(conditions.is_true(READY));
        conditions.set_false("Initialized", "NodeNotReady", "Node status is NotReady");
        let ready = conditions.get(READY).cloned().expect("root");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "UnhealthyDependents");
        assert_eq!(
            list.last().map(|c| c.type_.as_str()),
            Some(READY),
            "root last"
        );
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let mut list = Vec::new();
        let created = Timestamp::from_second(1_000).expect("time");
        let mut conditions = Conditions::new(&mut list, 1, Some(created), CLAIM);
        conditions.set_unknown(
            "Registered",
            "NodeNotFound",
            "Node not registered with cluster",
        );
        assert_eq!(
            conditions
                .get("Registered")
                .map(|c| c.last_transition_time.0),
            Some(created),
            "Unknown stayed Unknown: the creation time stands (liveness counts from it)"
        );
        conditions.set_true("Registered");
        assert_ne!(
            conditions
                .get("Registered")
                .map(|c| c.last_transition_time.0),
            Some(created)
        );
    }
}
