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
