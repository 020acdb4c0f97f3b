//! Fails when the committed generated code no longer matches `proto/`: the same check as
//! `cargo xtask codegen --check`, sharing its code.

#[path = "../../../../xtask/src/codegen.rs"]
#[allow(dead_code)]
mod xtask_codegen;

use std::path::Path;

#[test]
fn committed_code_matches_the_protos() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let expected = xtask_codegen::generate(&root).expect("protos compile");
    assert!(!expected.is_empty(), "codegen produced files");
    let stale = xtask_codegen::stale_files(&root, &expected).expect("committed files are readable");
    assert!(
        stale.is_empty(),
        "stale generated code: {stale:?}; run `cargo xtask codegen` and commit"
    );
}

#[test]
fn the_exported_descriptor_set_describes_the_agent_service() {
    use prost::Message;
    let set = prost_types::FileDescriptorSet::decode(ctxsync_protocol::FILE_DESCRIPTOR_SET)
        .expect("the committed descriptor set decodes");
    let file = set
        .file
        .iter()
        .find(|f| f.package() == "ctxsync.agent.v1")
        .expect("the agent package is described");
    let service = file
        .service
        .iter()
        .find(|s| s.name() == "Agent")
        .expect("the Agent service is described");
    let methods: Vec<&str> = service.method.iter().map(|m| m.name()).collect();
    assert!(methods.contains(&"PushContextState"), "{methods:?}");
    assert!(
        file.source_code_info.is_some(),
        "comments travel with the descriptor, for reflection clients"
    );
}
