//! Errors of the provider and how they travel as gRPC statuses.

use karpenter_proto::provider::v1 as pv;
use prost::Message as _;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// Type URL of the `InsufficientCapacity` detail inside the `google.rpc.Status` of a
/// RESOURCE_EXHAUSTED answer.
pub const INSUFFICIENT_CAPACITY_TYPE_URL: &str =
    "type.googleapis.com/karpenter.provider.v1.InsufficientCapacity";

/// Everything an RPC can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is missing or malformed; `field` is its path.
    #[error("{field}: {message}")]
    InvalidArgument { field: String, message: String },
    /// The node class is not resolved (or not ready) yet.
    #[error("node class is not ready: {0}")]
    NotReady(String),
    /// The instance (or other resource) does not exist any more.
    #[error("{0}")]
    NotFound(String),
    /// No offering had capacity.
    #[error("insufficient capacity: {message}")]
    InsufficientCapacity {
        message: String,
        offerings: Vec<pv::FailedOffering>,
    },
    /// No instance type satisfies the node claim.
    #[error("no instance type satisfies the node claim: {0}")]
    NoCompatibleInstanceTypes(String),
    /// An AWS call failed (after the SDK's retries).
    #[error("AWS {action} failed: {message}")]
    Aws {
        action: &'static str,
        message: String,
    },
    /// Anything else that is our fault.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn aws<E>(action: &'static str, error: &aws_sdk_ec2::error::SdkError<E>) -> Self
    where
        E: std::error::Error + aws_sdk_ec2::error::ProvideErrorMetadata + 'static,
    {
        Self::Aws {
            action,
            message: describe_sdk_error(error),
        }
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// `code: message` of an SDK error, or its display chain when AWS said nothing.
pub fn describe_sdk_error<E>(error: &aws_sdk_ec2::error::SdkError<E>) -> String
where
    E: std::error::Error + aws_sdk_ec2::error::ProvideErrorMetadata + 'static,
{
    use aws_sdk_ec2::error::ProvideErrorMetadata as _;
    match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_string(),
        _ => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(inner) = source {
                text.push_str(": ");
                text.push_str(&inner.to_string());
                source = inner.source();
            }
            text
        }
    }
}

/// The AWS error code of an SDK error, if the service answered with one.
pub fn error_code<E>(error: &aws_sdk_ec2::error::SdkError<E>) -> Option<String>
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata,
{
    use aws_sdk_ec2::error::ProvideErrorMetadata as _;
    error.code().map(str::to_string)
}

impl From<Error> for Status {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::InvalidArgument {
                field,
                message: why,
            } => {
                let details = ErrorDetails::with_bad_request_violation(field, why);
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            Error::NotReady(_) => Status::failed_precondition(message),
            Error::NotFound(_) => Status::not_found(message),
            Error::InsufficientCapacity { offerings, .. } => {
                let detail = pv::InsufficientCapacity { offerings };
                let status = tonic_types::pb::Status {
                    code: Code::ResourceExhausted as i32,
                    message: message.clone(),
                    details: vec![prost_types::Any {
                        type_url: INSUFFICIENT_CAPACITY_TYPE_URL.to_string(),
                        value: detail.encode_to_vec(),
                    }],
                };
                Status::with_details(
                    Code::ResourceExhausted,
                    message,
                    status.encode_to_vec().into(),
                )
            }
            Error::NoCompatibleInstanceTypes(_) => Status::failed_precondition(message),
            Error::Aws { .. } => Status::unavailable(message),
            Error::Internal(_) => Status::internal(message),
        }
    }
}
