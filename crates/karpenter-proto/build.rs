//! Compiles the `.proto` contracts with protox (a pure-Rust protobuf
//! compiler), so no system `protoc` is needed, and keeps the file descriptor
//! set for gRPC reflection.

use std::path::PathBuf;

const PROTO_ROOT: &str = "../../proto";

const PROTOS: &[&str] = &[
    "karpenter/types/v1/types.proto",
    "karpenter/scheduler/v1/cluster.proto",
    "karpenter/scheduler/v1/scheduler.proto",
    "karpenter/provider/v1/provider.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The contracts live at the repository's top (proto/), where clients in
    // other languages find them.
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={PROTO_ROOT}/{proto}");
    }
    let descriptors = protox::compile(PROTOS, [PROTO_ROOT])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("karpenter_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    // Type names (`prost::Name`): the codec looks a message's shape up by
    // its full name to bound what decoding it costs.
    let mut config = prost_build::Config::new();
    config.enable_type_names();
    tonic_prost_build::configure()
        // Ordered maps: the same message always encodes and prints the same.
        .btree_map(".")
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::BoundedCodec")
        .compile_fds_with_config(descriptors, config)?;
    Ok(())
}
