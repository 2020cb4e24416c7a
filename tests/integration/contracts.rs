//! The contracts: the committed OpenAPI document must equal what the code generates (and lists
//! every problem code), and the plugin WIT package must not change without a new version.

#[test]
fn problem_codes_are_one_documented_enum() {
    let doc: serde_json::Value =
        serde_json::from_str(&bulkhead::http::openapi_document().to_json().unwrap()).unwrap();
    let code = &doc["components"]["schemas"]["Problem"]["properties"]["code"];
    let schema = match code.get("$ref").and_then(|r| r.as_str()) {
        Some(reference) => &doc["components"]["schemas"][reference.rsplit('/').next().unwrap()],
        None => code,
    };
    let listed: Vec<&str> = schema["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("`code` is not an enum: {schema}"))
        .iter()
        .map(|value| value.as_str().unwrap())
        .collect();
    let known: Vec<&str> = bulkhead::error::ErrorCode::ALL
        .iter()
        .map(|code| code.as_str())
        .collect();
    assert_eq!(listed, known);
    assert!(known.contains(&"routing_history_gone") && known.contains(&"name_taken"));
}

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

#[test]
fn plugin_contract_changes_bump_its_version() {
    use sha2::{Digest, Sha256};
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/wit");
    let wit = std::fs::read(format!("{root}/provider.wit")).unwrap();
    let text = String::from_utf8_lossy(&wit);
    let package = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("package ")?.strip_suffix(';'))
        .expect("a package line");
    let digest = hex::encode(Sha256::digest(&wit));
    let lock = std::fs::read_to_string(format!("{root}/versions.lock")).unwrap();
    let recorded = lock.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, hash) = l.split_once(' ')?;
        (name == package).then(|| hash.trim().to_owned())
    });
    match recorded {
        None => panic!(
            "{package} is not in sdk/wit/versions.lock: add `{package} {digest}` when publishing it"
        ),
        Some(hash) => assert_eq!(
            hash, digest,
            "sdk/wit/provider.wit changed but is still {package}: bump the package version (and the SDK's CONTRACT_VERSION and the host's supported versions), then record it in versions.lock"
        ),
    }
    let version = package.split('@').nth(1).unwrap();
    assert_eq!(
        bulkhead_sdk::CONTRACT_VERSION,
        version,
        "the SDK builds for another version than the WIT"
    );
    assert!(
        bulkhead::plugins::SUPPORTED_CONTRACT_VERSIONS.contains(&version),
        "the host does not load {version}"
    );
    // Every older version the host supports is kept exactly as published, for the host's
    // bindings and for plugins built against it.
    for supported in bulkhead::plugins::SUPPORTED_CONTRACT_VERSIONS {
        if *supported == version {
            continue;
        }
        let published = std::fs::read(format!("{root}/{supported}/provider.wit"))
            .unwrap_or_else(|err| panic!("sdk/wit/{supported}/provider.wit: {err}"));
        let recorded = lock.lines().find_map(|l| {
            let (name, hash) = l.split_once(' ')?;
            (name == format!("bulkhead:provider@{supported}")).then(|| hash.trim().to_owned())
        });
        assert_eq!(
            recorded,
            Some(hex::encode(Sha256::digest(&published))),
            "sdk/wit/{supported}/provider.wit differs from {supported} as published"
        );
    }
}
