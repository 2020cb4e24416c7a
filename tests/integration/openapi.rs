//! The committed OpenAPI document is the contract: it must equal what the code generates.

#[test]
fn committed_openapi_document_is_current() {
    let generated = bulkhead::http::openapi_document().to_pretty_json().unwrap() + "\n";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/openapi.json is stale; regenerate it with `cargo run -p bulkhead-api -- openapi > openapi/openapi.json`"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            assert!(
                responses.contains_key("400") && responses.contains_key("500"),
                "{method} {path} documents no errors"
            );
            if operation.get("security").is_some() {
                assert!(
                    responses.contains_key("401") && responses.contains_key("403"),
                    "{method} {path}"
                );
            }
        }
    }
}
