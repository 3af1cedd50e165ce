//! Compiles the fleetrl.v1 protos with the vendored protoc, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let files = [
        "proto/fleetrl/v1/common.proto",
        "proto/fleetrl/v1/replay.proto",
        "proto/fleetrl/v1/learner.proto",
        "proto/fleetrl/v1/demos.proto",
    ];
    tonic_prost_build::configure()
        .bytes(".fleetrl.v1.Tensor.data")
        .bytes(".fleetrl.v1.Weights.chunk")
        .codec_path("crate::codec::SizedCodec")
        .compile_protos(&files, &["proto"])?;
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    Ok(())
}
