//! Reading and writing Kubernetes YAML: multi-document streams, `kind: List`
//! wrappers, and indentation pasted with non-breaking spaces.

use serde::Deserialize;
use serde_json::Value;

use crate::error::ConvertError;
use crate::note::{DocumentId, Note, NoteKind};

/// One input document and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// File, position, kind and name of the document.
    pub id: DocumentId,
    /// The document.
    pub value: Value,
}

impl Input {
    /// An input document known by position only; kind and name are read
    /// from the value.
    pub fn new(file: Option<&str>, index: usize, value: Value) -> Self {
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_string);
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        Self {
            id: DocumentId {
                file: file.map(str::to_string),
                index: Some(index),
                kind,
                name,
            },
            value,
        }
    }
}

/// The documents of a YAML text, and notes about the text itself.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedYaml {
    /// Documents in order; `kind: List` items are flattened in place and
    /// empty documents skipped.
    pub inputs: Vec<Input>,
    /// Notes about the text (indentation that had to be repaired).
    pub notes: Vec<Note>,
}

/// Parses a multi-document YAML text (`---` separated, `kind: List`
/// wrappers flattened). Lines indented with non-breaking spaces, as pasted
/// from web pages, are repaired and reported.
pub fn parse_yaml(source_name: &str, text: &str) -> Result<ParsedYaml, ConvertError> {
    let (text, repaired) = repair_indentation(text);
    let mut parsed = ParsedYaml::default();
    if !repaired.is_empty() {
        parsed.notes.push(Note {
            document: DocumentId {
                file: Some(source_name.to_string()),
                ..DocumentId::default()
            },
            path: String::new(),
            kind: NoteKind::Changed,
            message: format!(
                "indentation used non-breaking spaces (U+00A0) on {} line(s) (first: line {}); read as plain spaces",
                repaired.len(),
                repaired[0]
            ),
        });
    }
    let mut index = 0;
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = Value::deserialize(document).map_err(|e| ConvertError::Yaml {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })?;
        for value in flatten(value) {
            parsed
                .inputs
                .push(Input::new(Some(source_name), index, value));
            index += 1;
        }
    }
    Ok(parsed)
}

/// The documents of a multi-document YAML text, `kind: List` items
/// flattened, empty documents skipped.
pub fn read_documents(text: &str) -> Result<Vec<Value>, ConvertError> {
    Ok(parse_yaml("<input>", text)?
        .inputs
        .into_iter()
        .map(|i| i.value)
        .collect())
}

/// Writes documents as one multi-document YAML stream.
pub fn to_yaml(documents: &[Value]) -> Result<String, ConvertError> {
    let mut out = String::new();
    for (i, doc) in documents.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let text = serde_yaml::to_string(doc).map_err(|e| ConvertError::Write(e.to_string()))?;
        out.push_str(&text);
    }
    Ok(out)
}

fn flatten(value: Value) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        Value::Object(map)
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && map.get("items").is_some_and(Value::is_array) =>
        {
            match map.into_iter().find(|(k, _)| k == "items") {
                Some((_, Value::Array(items))) => items.into_iter().flat_map(flatten).collect(),
                _ => Vec::new(),
            }
        }
        other => vec![other],
    }
}

/// Replaces non-breaking spaces in leading indentation by spaces. Returns
/// the text and the (1-based) numbers of the lines changed.
fn repair_indentation(text: &str) -> (String, Vec<usize>) {
    if !text.contains('\u{a0}') {
        return (text.to_string(), Vec::new());
    }
    let mut out = String::with_capacity(text.len());
    let mut repaired = Vec::new();
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let indent_len = line
            .char_indices()
            .find(|(_, c)| *c != ' ' && *c != '\u{a0}')
            .map_or(line.len(), |(i, _)| i);
        let (indent, rest) = line.split_at(indent_len);
        if indent.contains('\u{a0}') {
            repaired.push(n + 1);
            out.extend(indent.chars().map(|c| if c == '\u{a0}' { ' ' } else { c }));
        } else {
            out.push_str(indent);
        }
        out.push_str(rest);
    }
    (out, repaired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_and_lists() {
        let text = "a: 1\n---\n---\napiVersion: v1\nkind: List\nitems:\n  - kind: A\n  - kind: B\n";
        let docs = read_documents(text).expect("parses");
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[2]["kind"], "B");
    }

    #[test]
    fn nbsp_indentation_is_repaired() {
        let text = "spec:\n\u{a0}\u{a0}name: x\n";
        let parsed = parse_yaml("f.yaml", text).expect("parses");
        assert_eq!(parsed.inputs[0].value["spec"]["name"], "x");
        assert_eq!(parsed.notes.len(), 1);
        assert!(parsed.notes[0].message.contains("line 2"));
    }

    #[test]
    fn invalid_yaml_names_the_source() {
        let err = read_documents("a: [1,\n").expect_err("invalid");
        assert!(err.to_string().starts_with("<input>: invalid YAML"));
    }

    #[test]
    fn writes_multi_document_yaml() {
        let docs = vec![serde_json::json!({"a": 1}), serde_json::json!({"b": "2"})];
        assert_eq!(to_yaml(&docs).expect("writes"), "a: 1\n---\nb: '2'\n");
    }
}
