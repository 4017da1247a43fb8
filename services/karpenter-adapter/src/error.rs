//! Why a reconcile did not finish. Every error is retried by the
//! controller that hit it (with backoff), so none is fatal; the kind only
//! decides how loudly it is logged and how soon the retry comes.

use std::time::Duration;

/// A failed reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API refused or failed a call.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The scheduler or the cloud provider failed a call.
    #[error("{call}: {status}", status = status_text(.status))]
    Peer {
        call: &'static str,
        status: tonic::Status,
    },
    /// An object in the cluster cannot be acted on as it is.
    #[error("{0}")]
    Invalid(String),
    /// The reconcile panicked (a bug); retried with backoff like a failure.
    #[error("the reconcile panicked: {0}")]
    Panicked(String),
}

fn status_text(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

impl Error {
    pub fn peer(call: &'static str) -> impl FnOnce(tonic::Status) -> Error {
        move |status| Error::Peer { call, status }
    }

    /// Another writer changed the object since it was read: read it again
    /// and retry soon, which is routine, not a failure.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(e)) if e.code == 409)
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube(error) if is_not_found(error))
    }

    /// How long to wait before retrying after this error the `failures`-th
    /// time in a row: a conflict at once, anything else with exponential
    /// backoff from one second to five minutes.
    pub fn backoff(&self, failures: u32) -> Duration {
        if self.is_conflict() {
            return Duration::from_millis(200);
        }
        let exponent = failures.saturating_sub(1).min(9);
        Duration::from_secs(1 << exponent).min(Duration::from_secs(300))
    }
}

/// Whether a Kubernetes error is "not found" (the object is already gone).
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 404)
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        Error::Kube(kube::Error::Api(
            kube::core::Status::failure("x", "Conflict")
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn conflicts_retry_at_once_and_failures_back_off() {
        assert!(api(409).is_conflict());
        assert!(api(409).backoff(5) < Duration::from_secs(1));
        let failed = api(500);
        assert!(!failed.is_conflict());
        assert_eq!(failed.backoff(1), Duration::from_secs(1));
        assert_eq!(failed.backoff(3), Duration::from_secs(4));
        assert_eq!(failed.backoff(40), Duration::from_secs(300));
    }
}
