//! Reading manifests: files, directories (recursively, `*.yaml`, `*.yml`,
//! `*.json`), standard input (`-`), multi-document YAML and `kind: List`.
//!
//! Every document remembers where it came from ([`Origin`]) so that any
//! later error can name the file, the document and the field.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// Where a document came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    /// 1-based position of the document in its file.
    pub document: usize,
    /// 0-based position inside a `kind: List` document.
    pub item: Option<usize>,
    pub kind: String,
    pub name: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file, self.document)?;
        let kind = if self.kind.is_empty() {
            "document"
        } else {
            self.kind.as_str()
        };
        match self.item {
            Some(item) => write!(f, " (List item {item}: {kind} {:?})", self.name),
            None if self.name.is_empty() => write!(f, " ({kind})"),
            None => write!(f, " ({kind} {:?})", self.name),
        }
    }
}

/// A parsed manifest and its origin.
#[derive(Debug, Clone)]
pub struct Document {
    pub origin: Origin,
    pub value: Value,
}

impl Document {
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    pub fn api_version(&self) -> &str {
        self.value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The API group (`""` for core).
    pub fn group(&self) -> &str {
        self.api_version()
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }

    pub fn version(&self) -> &str {
        let api_version = self.api_version();
        api_version
            .rsplit_once('/')
            .map(|(_, v)| v)
            .unwrap_or(api_version)
    }

    pub fn error(&self, field: impl Into<String>, message: impl Into<String>) -> InputError {
        InputError {
            location: self.origin.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Input the command cannot use: exit status 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct InputError {
    /// `file: document N (Kind "name")`, or just the file.
    pub location: String,
    /// The field path in the document, empty when the whole document is meant.
    pub field: String,
    pub message: String,
}

impl InputError {
    pub fn file(file: impl Into<String>, message: impl Into<String>) -> Self {
        InputError {
            location: file.into(),
            field: String::new(),
            message: message.into(),
        }
    }
}

/// One text to parse, with the name errors use for it.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// Reads every `-f` argument: files, directories (sorted, recursive) and `-`.
pub fn read_sources(paths: &[PathBuf]) -> Result<Vec<Source>, InputError> {
    let mut sources = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| InputError::file("-", format!("reading standard input: {e}")))?;
            sources.push(Source {
                name: "-".to_string(),
                text,
            });
            continue;
        }
        let meta = std::fs::metadata(path)
            .map_err(|e| InputError::file(path.display().to_string(), e.to_string()))?;
        if meta.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files)?;
            files.sort();
            if files.is_empty() {
                return Err(InputError::file(
                    path.display().to_string(),
                    "directory has no *.yaml, *.yml or *.json files",
                ));
            }
            for file in files {
                sources.push(read_file(&file)?);
            }
        } else {
            sources.push(read_file(path)?);
        }
    }
    Ok(sources)
}

fn read_file(path: &Path) -> Result<Source, InputError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError::file(path.display().to_string(), e.to_string()))?;
    Ok(Source {
        name: path.display().to_string(),
        text,
    })
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| InputError::file(dir.display().to_string(), e.to_string()))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| InputError::file(dir.display().to_string(), e.to_string()))?;
        let path = entry.path();
        let file_type = entry
            .file_type()
            .map_err(|e| InputError::file(path.display().to_string(), e.to_string()))?;
        if file_type.is_dir() {
            walk(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

/// Splits a source into documents. Empty documents are skipped (but still
/// counted, so numbers match what an editor shows); `kind: List` documents
/// are replaced by their items.
pub fn parse_source(source: &Source) -> Result<Vec<Document>, InputError> {
    let mut documents = Vec::new();
    // As kubectl's decoder: text that opens with `{` is a stream of JSON
    // documents, read straight into JSON values; anything else is YAML.
    if source.text.trim_start().starts_with('{') {
        let stream = serde_json::Deserializer::from_str(&source.text).into_iter::<Value>();
        for (index, value) in stream.enumerate() {
            let number = index + 1;
            let value = value.map_err(|e| {
                InputError::file(
                    format!("{}: document {number}", source.name),
                    format!("not valid JSON: {e}"),
                )
            })?;
            push_document(&mut documents, &source.name, number, value)?;
        }
        return Ok(documents);
    }
    for (index, de) in serde_yaml::Deserializer::from_str(&source.text).enumerate() {
        let number = index + 1;
        let yaml = serde_yaml::Value::deserialize(de).map_err(|e| {
            InputError::file(
                format!("{}: document {number}", source.name),
                format!("not valid YAML: {e}"),
            )
        })?;
        if yaml.is_null() {
            continue;
        }
        let value: Value = serde_json::to_value(&yaml).map_err(|e| {
            InputError::file(
                format!("{}: document {number}", source.name),
                format!("cannot be read as JSON (non-string keys?): {e}"),
            )
        })?;
        push_document(&mut documents, &source.name, number, value)?;
    }
    Ok(documents)
}

/// Adds document `number` of `file`, or each item of a `kind: List`.
fn push_document(
    documents: &mut Vec<Document>,
    file: &str,
    number: usize,
    mut value: Value,
) -> Result<(), InputError> {
    let origin = origin_of(file, number, None, &value);
    if !value.is_object() {
        return Err(InputError {
            location: origin.to_string(),
            field: String::new(),
            message: "is not an object".to_string(),
        });
    }
    if value.get("kind").and_then(Value::as_str) == Some("List") && value.get("items").is_some() {
        let Value::Array(items) = value["items"].take() else {
            return Err(InputError {
                location: origin.to_string(),
                field: "items".to_string(),
                message: "must be a list".to_string(),
            });
        };
        for (i, item) in items.into_iter().enumerate() {
            if !item.is_object() {
                return Err(InputError {
                    location: origin.to_string(),
                    field: format!("items[{i}]"),
                    message: "is not an object".to_string(),
                });
            }
            documents.push(Document {
                origin: origin_of(file, number, Some(i), &item),
                value: item,
            });
        }
        return Ok(());
    }
    documents.push(Document { origin, value });
    Ok(())
}

fn origin_of(file: &str, document: usize, item: Option<usize>, value: &Value) -> Origin {
    Origin {
        file: file.to_string(),
        document,
        item,
        kind: value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        name: value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    }
}

/// Reads and parses every `-f` argument.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Document>, InputError> {
    let mut documents = Vec::new();
    for source in read_sources(paths)? {
        documents.extend(parse_source(&source)?);
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_and_lists() {
        let source = Source {
            name: "a.yaml".into(),
            text: "kind: Pod\nmetadata: {name: p}\n---\n---\nkind: List\nitems:\n- kind: Node\n  metadata: {name: n}\n"
                .into(),
        };
        let docs = parse_source(&source).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].origin.to_string(), "a.yaml: document 1 (Pod \"p\")");
        assert_eq!(
            docs[1].origin.to_string(),
            "a.yaml: document 3 (List item 0: Node \"n\")"
        );
    }

    /// JSON is read as JSON (prices exactly as written), documents and
    /// lists alike, and a syntax error names the document.
    #[test]
    fn json_streams_and_lists() {
        let source = Source {
            name: "a.json".into(),
            text: r#" {"kind": "Pod", "metadata": {"name": "p"}, "price": 1.8000000000000003}
{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}}]}"#
                .into(),
        };
        let docs = parse_source(&source).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].value["price"].as_f64(), Some(1.8000000000000003));
        assert_eq!(
            docs[1].origin.to_string(),
            "a.json: document 2 (List item 0: Node \"n\")"
        );
        let broken = Source {
            name: "b.json".into(),
            text: r#"{"kind": "Pod"} {"kind": "#.into(),
        };
        let error = parse_source(&broken).unwrap_err();
        assert!(error.to_string().contains("b.json: document 2"), "{error}");
        assert!(error.to_string().contains("not valid JSON"), "{error}");
    }
}
