//! Compiles the fleetrl.v1 protos with the vendored protoc, so no system protoc is needed, and
//! keeps their descriptors (`fleetrl.bin` in `OUT_DIR`) so tests can enumerate every RPC.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let files = [
        "proto/fleetrl/v1/common.proto",
        "proto/fleetrl/v1/replay.proto",
        "proto/fleetrl/v1/learner.proto",
        "proto/fleetrl/v1/demos.proto",
        "proto/fleetrl/v1/serve.proto",
    ];
    let descriptors = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("fleetrl.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(descriptors)
        .bytes(".fleetrl.v1.Tensor.data")
        .bytes(".fleetrl.v1.Weights.chunk")
        .codec_path("crate::codec::SizedCodec")
        .compile_protos(&files, &["proto"])?;
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    Ok(())
}
