//! MIME multipart user data, as cloud-init and nodeadm read it: the user's
//! archive taken apart into its parts (every header kept), and parts put
//! back together into one `multipart/mixed` archive.

use std::fmt::Write as _;

/// One part of an archive: its headers (name, value) and its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub headers: Vec<(String, String)>,
    pub content: String,
}

impl Part {
    /// A part with only a `Content-Type` header.
    pub fn new(content_type: &str, content: impl Into<String>) -> Self {
        Self {
            headers: vec![("Content-Type".into(), content_type.into())],
            content: content.into(),
        }
    }

    /// The media type without parameters, lower-cased (`text/x-shellscript`).
    pub fn media_type(&self) -> String {
        header(&self.headers, "content-type")
            .map(|v| media_type(v).0)
            .unwrap_or_default()
    }
}

/// Why user data that says it is MIME cannot be read as MIME.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("user data is not a valid MIME multipart archive: {0}")]
pub struct MimeError(String);

/// Whether `text` is a MIME document (its first line is a MIME header, as
/// Karpenter decides).
pub fn is_mime(text: &str) -> bool {
    let start = text.trim_start();
    ["mime-version:", "content-type:"].iter().any(|prefix| {
        start.len() >= prefix.len() && start[..prefix.len()].eq_ignore_ascii_case(prefix)
    })
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `(media type, parameters)` of a Content-Type value.
fn media_type(value: &str) -> (String, Vec<(String, String)>) {
    let mut fields = value.split(';');
    let media = fields
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let params = fields
        .filter_map(|field| {
            let (name, value) = field.split_once('=')?;
            Some((
                name.trim().to_ascii_lowercase(),
                value.trim().trim_matches('"').to_string(),
            ))
        })
        .collect();
    (media, params)
}

/// A header block: (name, value) in order.
type Headers = Vec<(String, String)>;

/// Headers up to the first empty line, unfolding continuation lines; the
/// rest is the body.
fn split_headers(text: &str) -> Result<(Headers, &str), MimeError> {
    let mut headers: Headers = Vec::new();
    let mut rest = text;
    loop {
        let (line, after) = match rest.find('\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        rest = after;
        if line.is_empty() {
            return Ok((headers, rest));
        }
        if line.starts_with([' ', '\t']) {
            let (_, value) = headers.last_mut().ok_or_else(|| {
                MimeError(format!("a continuation line before any header: {line:?}"))
            })?;
            value.push(' ');
            value.push_str(line.trim());
        } else {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| MimeError(format!("not a header line: {line:?}")))?;
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
        if rest.is_empty() {
            return Ok((headers, rest));
        }
    }
}

/// The parts of a multipart archive, in order.
pub fn parse(text: &str) -> Result<Vec<Part>, MimeError> {
    let (headers, body) = split_headers(text.trim_start())?;
    let content_type = header(&headers, "content-type")
        .ok_or_else(|| MimeError("no Content-Type header".into()))?;
    let (media, params) = media_type(content_type);
    if !media.starts_with("multipart/") {
        return Err(MimeError(format!(
            "Content-Type is {media}, not multipart/*"
        )));
    }
    let boundary = params
        .iter()
        .find(|(name, _)| name == "boundary")
        .map(|(_, value)| value.as_str())
        .filter(|b| !b.is_empty())
        .ok_or_else(|| MimeError("the multipart Content-Type has no boundary".into()))?;
    let delimiter = format!("--{boundary}");
    let closing = format!("{delimiter}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    let mut closed = false;
    for line in body.split('\n') {
        let bare = line.strip_suffix('\r').unwrap_or(line).trim_end();
        if bare == delimiter || bare == closing {
            if let Some(lines) = current.take() {
                parts.push(part(&lines.join("\n"))?);
            }
            if bare == closing {
                closed = true;
                break;
            }
            current = Some(Vec::new());
        } else if let Some(lines) = current.as_mut() {
            lines.push(line.strip_suffix('\r').unwrap_or(line));
        }
    }
    if !closed {
        return Err(MimeError(format!("no closing boundary {delimiter}--")));
    }
    Ok(parts)
}

fn part(text: &str) -> Result<Part, MimeError> {
    let (headers, content) = split_headers(text)?;
    Ok(Part {
        headers,
        content: content.to_string(),
    })
}

/// One `multipart/mixed` archive of `parts`, with a boundary none of them
/// contains.
pub fn serialize(parts: &[Part]) -> String {
    let mut boundary = "//".to_string();
    let mut n = 0;
    while parts
        .iter()
        .any(|p| p.content.contains(&format!("--{boundary}")))
    {
        n += 1;
        boundary = format!("//karpenter-{n}");
    }
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\n\n");
    for part in parts {
        let _ = writeln!(out, "--{boundary}");
        for (name, value) in &part.headers {
            let _ = writeln!(out, "{name}: {value}");
        }
        out.push('\n');
        out.push_str(part.content.trim_end_matches('\n'));
        out.push_str("\n\n");
    }
    let _ = writeln!(out, "--{boundary}--");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_come_back_with_their_headers_whichever_header_comes_first() {
        for archive in [
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: application/node.eks.aws\n\nkind: NodeConfig\n--BOUNDARY\nContent-Type: text/x-shellscript\nContent-Transfer-Encoding: 7bit\n\n#!/bin/bash\necho hi\n--BOUNDARY--\n",
            "Content-Type: multipart/mixed; boundary=BOUNDARY\r\nMIME-Version: 1.0\r\n\r\n--BOUNDARY\r\nContent-Type: application/node.eks.aws\r\n\r\nkind: NodeConfig\r\n--BOUNDARY\r\nContent-Type: text/x-shellscript\r\nContent-Transfer-Encoding: 7bit\r\n\r\n#!/bin/bash\r\necho hi\r\n--BOUNDARY--\r\n",
        ] {
            assert!(is_mime(archive));
            let parts = parse(archive).expect("parses");
            assert_eq!(parts.len(), 2, "{parts:?}");
            assert_eq!(parts[0].media_type(), "application/node.eks.aws");
            assert_eq!(parts[0].content.trim(), "kind: NodeConfig");
            assert_eq!(parts[1].media_type(), "text/x-shellscript");
            assert_eq!(parts[1].headers[1].0, "Content-Transfer-Encoding");
            assert_eq!(parts[1].content.trim(), "#!/bin/bash\necho hi");
            let again = parse(&serialize(&parts)).expect("round trip");
            assert_eq!(again.len(), 2);
            assert_eq!(again[1].content.trim(), "#!/bin/bash\necho hi");
        }
    }

    #[test]
    fn a_broken_archive_is_an_error_not_one_part() {
        for broken in [
            "MIME-Version: 1.0\nContent-Type: text/plain\n\nhello\n",
            "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--x\n\nhi\n--x--\n",
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=x\n\n--x\nContent-Type: text/plain\n\nno end\n",
            "MIME-Version: 1.0\nthis is not a header\n\n",
        ] {
            assert!(parse(broken).is_err(), "{broken:?}");
        }
        assert!(!is_mime("#!/bin/bash\necho MIME-Version: 1.0"));
    }

    #[test]
    fn the_boundary_avoids_what_the_parts_contain() {
        let parts = vec![Part::new("text/x-shellscript", "#!/bin/sh\necho --//\n")];
        let archive = serialize(&parts);
        assert!(archive.contains("boundary=\"//karpenter-1\""), "{archive}");
        assert_eq!(
            parse(&archive).expect("parses")[0].content.trim(),
            "#!/bin/sh\necho --//"
        );
    }
}
