//! Generates the gRPC server stubs from `proto/` with protox (no system `protoc`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["taskbroker/v1/broker.proto", "taskbroker/v1/admin.proto"];
    let fds = protox::compile(files, ["../proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=../proto");
    Ok(())
}
