//! Conversion errors: input the converter cannot interpret at all.

use crate::note::DocumentId;

/// A field of an input document that cannot be interpreted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{document}: {}{message}", path_prefix(.path))]
pub struct FieldError {
    /// The document the field belongs to.
    pub document: DocumentId,
    /// Path of the field (`spec.ttlSecondsAfterEmpty`); empty for the
    /// document as a whole.
    pub path: String,
    /// What is wrong (`expected an integer, got "30s"`).
    pub message: String,
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input is not valid YAML.
    #[error("{source_name}: invalid YAML: {message}")]
    Yaml {
        /// File or other source name the text came from.
        source_name: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A document or one of its fields has a value the converter cannot
    /// interpret (wrong type, invalid value, contradictory fields).
    #[error(transparent)]
    Field(Box<FieldError>),
    /// Serializing the output as YAML failed.
    #[error("writing YAML: {0}")]
    Write(String),
}

impl ConvertError {
    pub(crate) fn field(
        document: &DocumentId,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConvertError::Field(Box::new(FieldError {
            document: document.clone(),
            path: path.into(),
            message: message.into(),
        }))
    }

    /// The field error inside, if this is one.
    pub fn as_field(&self) -> Option<&FieldError> {
        match self {
            ConvertError::Field(field) => Some(field),
            _ => None,
        }
    }
}
