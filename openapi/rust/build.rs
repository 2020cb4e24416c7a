//! Generates the client from the committed OpenAPI 3.0 document (progenitor reads only 3.0;
//! `bulkhead openapi --openapi-version 3.0` writes it from the same source as the 3.1 one, and
//! a test fails when either committed copy is stale).
//!
//! Two limits of progenitor 0.15 are met here, on the generator's input only (the committed
//! document stays exactly what the server does):
//! - it types only `application/json` bodies: problem details (`application/problem+json`,
//!   JSON too) are shown to it as `application/json`, so that errors come out typed;
//! - it takes one media type per request body: of several, the one it can send is kept
//!   (`application/octet-stream` for the plugin upload, which also accepts `application/wasm`).

use progenitor::{GenerationSettings, Generator, InterfaceStyle};
use serde_json::Value;

/// The request body media types progenitor can send, in order of preference.
const SENDABLE: &[&str] = &["application/json", "application/octet-stream"];

fn main() {
    let src = "../openapi-3.0.json";
    println!("cargo:rerun-if-changed={src}");
    let text = std::fs::read_to_string(src).expect("openapi/openapi-3.0.json exists");
    let mut doc: Value = serde_json::from_str(&text).expect("openapi/openapi-3.0.json is JSON");
    adapt_for_progenitor(&mut doc);
    let spec: openapiv3::OpenAPI =
        serde_json::from_value(doc).expect("openapi/openapi-3.0.json is an OpenAPI 3.0 document");
    let mut settings = GenerationSettings::default();
    settings
        .with_interface(InterfaceStyle::Builder)
        .with_inner_type(quote_path("crate::Observer"));
    let tokens = Generator::new(&settings)
        .generate_tokens(&spec)
        .expect("progenitor generates a client from the document");
    let ast = syn::parse2(tokens).expect("the generated code parses");
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("codegen.rs");
    std::fs::write(out, prettyplease::unparse(&ast)).expect("the generated code is written");
}

fn quote_path(path: &str) -> proc_macro2::TokenStream {
    path.parse().expect("a Rust path")
}

fn adapt_for_progenitor(doc: &mut Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for operation in paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
    {
        if let Some(content) = operation
            .get_mut("requestBody")
            .and_then(|body| body.get_mut("content"))
            .and_then(Value::as_object_mut)
            && content.len() > 1
            && let Some(kept) = SENDABLE.iter().find(|m| content.contains_key(**m))
        {
            content.retain(|media_type, _| media_type == kept);
        }
        for response in operation
            .get_mut("responses")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|responses| responses.values_mut())
        {
            if let Some(content) = response.get_mut("content").and_then(Value::as_object_mut)
                && let Some(problem) = content.remove("application/problem+json")
            {
                content.insert("application/json".into(), problem);
            }
        }
    }
}
