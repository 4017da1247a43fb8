//! Taints and tolerations, as kube-scheduler matches them.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: Effect,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty with `exists` tolerates every key.
    pub key: String,
    pub exists: bool,
    pub value: String,
    /// None tolerates every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect
            && effect != taint.effect
        {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        if self.exists {
            return true;
        }
        // Equal with an empty key is invalid in Kubernetes; it tolerates nothing.
        !self.key.is_empty() && self.value == taint.value
    }
}

/// Taints a node carries only while it starts (not ready, unreachable,
/// not yet initialized by the cloud controller, not yet registered by
/// Karpenter, or gated by a readiness controller): Karpenter waits for them
/// to go before it calls a node initialized, and ignores them when it plans
/// pods onto a node that is still starting.
pub fn is_known_ephemeral(key: &str, effect: Effect) -> bool {
    matches!(
        (key, effect),
        (
            "node.kubernetes.io/not-ready",
            Effect::NoSchedule | Effect::NoExecute
        ) | ("node.kubernetes.io/unreachable", Effect::NoSchedule)
            | (
                "node.cloudprovider.kubernetes.io/uninitialized",
                Effect::NoSchedule
            )
            | (crate::labels::UNREGISTERED_TAINT_KEY, Effect::NoExecute)
    ) || key.starts_with("readiness.k8s.io/")
}

/// Karpenter checks every taint, PreferNoSchedule included: a pod that does
/// not tolerate a soft taint is first tried elsewhere, and tolerates it only
/// once its preferences are relaxed.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| t.tolerates(taint)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_taints_are_known_by_key_and_effect() {
        assert!(is_known_ephemeral(
            "node.kubernetes.io/not-ready",
            Effect::NoExecute
        ));
        assert!(is_known_ephemeral(
            "karpenter.sh/unregistered",
            Effect::NoExecute
        ));
        assert!(!is_known_ephemeral(
            "karpenter.sh/unregistered",
            Effect::NoSchedule
        ));
        assert!(!is_known_ephemeral(
            "node.kubernetes.io/unreachable",
            Effect::NoExecute
        ));
        assert!(is_known_ephemeral(
            "readiness.k8s.io/network",
            Effect::NoSchedule
        ));
        assert!(!is_known_ephemeral("dedicated", Effect::NoSchedule));
    }

    fn taint(key: &str, value: &str, effect: Effect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn tolerations_match_like_kube_scheduler() {
        let t = taint("dedicated", "gpu", Effect::NoSchedule);
        let equal = Toleration {
            key: "dedicated".into(),
            exists: false,
            value: "gpu".into(),
            effect: Some(Effect::NoSchedule),
        };
        assert!(equal.tolerates(&t));
        let wrong_value = Toleration {
            value: "cpu".into(),
            ..equal.clone()
        };
        assert!(!wrong_value.tolerates(&t));
        let wrong_effect = Toleration {
            effect: Some(Effect::NoExecute),
            ..equal.clone()
        };
        assert!(!wrong_effect.tolerates(&t));
        let everything = Toleration {
            key: String::new(),
            exists: true,
            value: String::new(),
            effect: None,
        };
        assert!(everything.tolerates(&t));
        assert_eq!(
            first_untolerated(std::slice::from_ref(&t), &[wrong_value]).map(ToString::to_string),
            Some("dedicated=gpu:NoSchedule".to_owned())
        );
    }
}
