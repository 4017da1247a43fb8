//! Notes: everything the converter could not carry over unchanged, and why.

use std::fmt;

/// Identifies the input document a note or an error is about.
///
/// Every part is optional because the converter may be called on a bare
/// value (no file, no position) or on a whole file (no kind yet, e.g. for a
/// note about the file's indentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocumentId {
    /// The file (or other source name) the document was read from.
    pub file: Option<String>,
    /// Position of the document in its input, counting from 0, after
    /// multi-document YAML and `kind: List` items have been flattened.
    pub index: Option<usize>,
    /// `kind` of the input document.
    pub kind: Option<String>,
    /// `metadata.name` of the input document.
    pub name: Option<String>,
}

impl DocumentId {
    /// A document known only by kind and name.
    pub fn new(kind: impl Into<String>, name: Option<String>) -> Self {
        Self {
            kind: Some(kind.into()),
            name,
            ..Self::default()
        }
    }
}

impl fmt::Display for DocumentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut wrote = false;
        if let Some(file) = &self.file {
            f.write_str(file)?;
            wrote = true;
        }
        if let Some(index) = self.index {
            write!(f, "[{index}]")?;
            wrote = true;
        }
        if let Some(kind) = &self.kind {
            if wrote {
                f.write_str(" ")?;
            }
            f.write_str(kind)?;
            match &self.name {
                Some(name) => write!(f, " {name:?}")?,
                None => f.write_str(" (unnamed)")?,
            }
            wrote = true;
        }
        if !wrote {
            f.write_str("<input>")?;
        }
        Ok(())
    }
}

/// What a note tells the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoteKind {
    /// A value from the input is not in the output.
    Dropped,
    /// A value was carried over, but in a different place, form or meaning.
    Changed,
    /// The output contains a value the input did not spell out (an old
    /// implicit default made explicit, or a new v1 requirement filled in).
    Defaulted,
    /// The output needs a human before it can be applied: a placeholder to
    /// substitute, a field v1 requires that the input does not have, a manual
    /// migration step.
    ActionRequired,
    /// Worth knowing; nothing was lost.
    Info,
}

impl fmt::Display for NoteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoteKind::Dropped => "dropped",
            NoteKind::Changed => "changed",
            NoteKind::Defaulted => "defaulted",
            NoteKind::ActionRequired => "action required",
            NoteKind::Info => "info",
        })
    }
}

/// One thing the converter wants a human to know about a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The input document the note is about.
    pub document: DocumentId,
    /// Field path in the input document (`spec.provider.launchTemplate`),
    /// or empty when the note is about the document as a whole.
    pub path: String,
    /// What kind of note this is.
    pub kind: NoteKind,
    /// What happened and why.
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.document)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}: {}", self.kind, self.message)
    }
}
