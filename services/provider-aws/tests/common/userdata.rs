//! Reads the user data the provider writes with the parsers nodes use:
//! MIME with Python's `email` package (what cloud-init parses user data
//! with), nodeadm's NodeConfig checked against its API's fields, and
//! Bottlerocket TOML with a parser that refuses duplicate keys.

use std::io::Write as _;
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde_yaml::Value;

/// One part of a MIME archive as cloud-init sees it.
#[derive(Debug, Clone)]
pub struct MimePart {
    /// The media type, lower-cased (`text/x-shellscript`).
    pub content_type: String,
    pub payload: String,
}

const READ_MIME: &str = r#"
import email, json, sys
message = email.message_from_string(sys.stdin.read())
problems = [str(d) for d in message.defects]
if not message.is_multipart():
    problems.append("not multipart: " + message.get_content_type())
parts = []
for part in (message.get_payload() if message.is_multipart() else []):
    problems += [str(d) for d in part.defects]
    parts.append({"type": part.get_content_type(),
                  "payload": part.get_payload(decode=True).decode("utf-8")})
print(json.dumps({"problems": problems, "parts": parts}))
"#;

/// The parts of a MIME archive, as Python's `email` reads them; panics on
/// any defect it reports.
pub fn mime_parts(user_data: &str) -> Vec<MimePart> {
    let mut child = Command::new("python3")
        .args(["-c", READ_MIME])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(user_data.as_bytes())
        .expect("write user data");
    let out = child.wait_with_output().expect("python3 ran");
    assert!(
        out.status.success(),
        "python's email could not read:\n{user_data}"
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        read["problems"].as_array().map(Vec::len),
        Some(0),
        "MIME defects {}:\n{user_data}",
        read["problems"]
    );
    read["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|p| MimePart {
            content_type: p["type"].as_str().unwrap_or_default().to_string(),
            payload: p["payload"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// nodeadm's NodeConfig v1alpha1 (awslabs/amazon-eks-ami
/// `nodeadm/api/v1alpha1/nodeconfig_types.go`): the fields of each object,
/// `*` where any key is allowed (maps, raw documents). nodeadm drops
/// unknown fields silently, so a misspelt one would simply not apply.
fn node_config_fields(path: &str) -> Option<&'static [&'static str]> {
    Some(match path {
        "" => &["apiVersion", "kind", "metadata", "spec"],
        "metadata"
        | "spec.instance.environment"
        | "spec.featureGates"
        | "spec.containerd.baseRuntimeSpec" => &["*"],
        "spec" => &[
            "cluster",
            "containerd",
            "instance",
            "kubelet",
            "featureGates",
        ],
        "spec.cluster" => &[
            "name",
            "apiServerEndpoint",
            "certificateAuthority",
            "cidr",
            "enableOutpost",
            "id",
        ],
        "spec.containerd" => &["config", "baseRuntimeSpec"],
        "spec.instance" => &["localStorage", "environment", "network"],
        "spec.instance.localStorage" => &["strategy", "mountPath", "disabledMounts"],
        "spec.instance.network" => &["nameservers", "domains"],
        "spec.kubelet" => &["config", "flags", "maxPodsExpression"],
        _ => return None,
    })
}

fn check_fields(value: &Value, path: &str) {
    let Value::Mapping(map) = value else {
        return;
    };
    let Some(allowed) = node_config_fields(path) else {
        return;
    };
    if allowed == ["*"] {
        return;
    }
    for (key, child) in map {
        let key = key.as_str().unwrap_or_default();
        assert!(
            allowed.contains(&key),
            "{path}.{key} is not a NodeConfig field"
        );
        let child_path = if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        };
        check_fields(child, &child_path);
    }
}

/// A NodeConfig part read as nodeadm reads it: YAML, of its API version and
/// kind, every field one nodeadm knows.
pub fn node_config(text: &str) -> Value {
    let value: Value =
        serde_yaml::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"));
    assert_eq!(
        value["apiVersion"].as_str(),
        Some("node.eks.aws/v1alpha1"),
        "{text}"
    );
    assert_eq!(value["kind"].as_str(), Some("NodeConfig"), "{text}");
    check_fields(&value, "");
    value
}

/// A Bottlerocket settings document (duplicate keys refused).
pub fn bottlerocket(text: &str) -> toml_edit::DocumentMut {
    text.parse::<toml_edit::DocumentMut>()
        .unwrap_or_else(|e| panic!("not valid TOML ({e}):\n{text}"))
}

/// The user data of a launch template as moto stores it.
pub async fn of_template(setup: &super::Setup, name: &str) -> String {
    let versions = setup
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .send()
        .await
        .expect("the launch template's versions");
    let data = versions
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .and_then(|d| d.user_data())
        .expect("user data");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64"),
    )
    .expect("utf-8")
}
