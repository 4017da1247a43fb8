//! `karpctl convert`: v1alpha5/v1alpha1/v1beta1 manifests to the v1 API,
//! with karpenter-convert.

use karpenter_convert::{Input, Options, convert_inputs, parse_yaml, to_yaml};

use crate::input::{InputError, Source};

/// The converted YAML stream and the notes.
pub fn convert(sources: &[Source], options: &Options) -> Result<(String, Vec<String>), InputError> {
    let mut inputs: Vec<Input> = Vec::new();
    let mut notes = Vec::new();
    for source in sources {
        let mut parsed =
            parse_yaml(&source.name, &source.text).map_err(|e| to_input_error(&source.name, &e))?;
        inputs.append(&mut parsed.inputs);
        notes.extend(parsed.notes.iter().map(ToString::to_string));
    }
    if inputs.is_empty() {
        return Err(InputError::file(
            sources.first().map(|s| s.name.as_str()).unwrap_or("-"),
            "no documents to convert",
        ));
    }
    let conversion = convert_inputs(&inputs, options).map_err(|e| to_input_error("", &e))?;
    notes.extend(conversion.notes.iter().map(ToString::to_string));
    let yaml = to_yaml(&conversion.documents).map_err(|e| to_input_error("", &e))?;
    Ok((yaml, notes))
}

fn to_input_error(source: &str, e: &karpenter_convert::ConvertError) -> InputError {
    match e.as_field() {
        Some(f) => InputError {
            location: f.document.to_string(),
            field: f.path.clone(),
            message: f.message.clone(),
        },
        None if source.is_empty() => InputError::file("convert", e.to_string()),
        None => InputError::file(source, e.to_string()),
    }
}
