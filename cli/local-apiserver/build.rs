//! Compiles Kubernetes' protobuf schemas (see `proto/README.md`) into a
//! descriptor set with protox, so protobuf request bodies can be decoded
//! without generated code or a system `protoc`.

use std::path::PathBuf;

fn protos(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            protos(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "proto")
            && let Ok(relative) = path.strip_prefix(root)
        {
            out.push(relative.to_string_lossy().into_owned());
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from("proto");
    println!("cargo:rerun-if-changed=proto");
    let mut files = Vec::new();
    protos(&root, &root, &mut files);
    files.sort();
    let descriptors = protox::compile(&files, [&root])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("kubernetes_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    Ok(())
}
