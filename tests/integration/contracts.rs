//! The contracts: the committed OpenAPI document must equal what the code generates (and lists
//! every problem code), the plugin WIT package must not change without a new version, and the
//! lean binaries (the CLI, the edge agent, the host agent) must not grow a dependency on the
//! server's machinery.

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
    let v30 = serde_json::to_string_pretty(&bulkhead::http::openapi_document_v30().unwrap())
        .unwrap()
        + "\n";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/openapi-3.0.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == v30,
        "openapi/openapi-3.0.json is stale; regenerate it with `cargo run -p bulkhead-api -- openapi --openapi-version 3.0 > openapi/openapi-3.0.json`"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    // Every reference resolves.
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for reference in generated
        .split("\"#/components/schemas/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
    {
        assert!(
            schemas.contains_key(reference),
            "{reference} is referenced but not defined"
        );
    }
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            for (status, response) in responses {
                assert!(
                    response["description"]
                        .as_str()
                        .is_some_and(|d| !d.is_empty()),
                    "{method} {path} {status} has no description"
                );
            }
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

crate::db_tests!(the_server_accepts_and_refuses_what_the_schema_says);

/// For a sample of operations, the bounds the OpenAPI document states are the server's: a value
/// at a bound is accepted, one past it refused.
async fn the_server_accepts_and_refuses_what_the_schema_says(s: crate::support::TestServer) {
    use crate::support::ADMIN_TOKEN;
    use serde_json::json;
    let doc: serde_json::Value =
        serde_json::from_str(&bulkhead::http::openapi_document().to_json().unwrap()).unwrap();
    let property =
        |schema: &str, name: &str| doc["components"]["schemas"][schema]["properties"][name].clone();
    let bound = |value: &serde_json::Value, key: &str| {
        value[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key} in {value}")) as usize
    };

    // Project names: 1 to maxLength characters.
    let name = property("ProjectCreate", "name");
    let max = bound(&name, "maxLength");
    assert_eq!(bound(&name, "minLength"), 1);
    s.post(
        "/v1/projects",
        ADMIN_TOKEN,
        json!({ "name": "p".repeat(max) }),
    )
    .await
    .assert_status(201);
    s.post(
        "/v1/projects",
        ADMIN_TOKEN,
        json!({ "name": "p".repeat(max + 1) }),
    )
    .await
    .assert_problem(422, "invalid_request");
    s.post("/v1/projects", ADMIN_TOKEN, json!({ "name": "" }))
        .await
        .assert_problem(422, "invalid_request");

    // Service names (a pattern and a length) and ports (a range).
    let project = s.project_create(ADMIN_TOKEN, "bounds").await;
    let environment = s
        .post(
            &format!("/v1/projects/{project}/environments"),
            ADMIN_TOKEN,
            json!({ "name": "prod" }),
        )
        .await;
    let environment = environment.assert_status(201)["id"].clone();
    let service = |name: String, port: u64| {
        json!({ "environment_id": environment, "name": name, "port": port,
            "source": { "type": "artifact", "image": "shop/web:1" } })
    };
    let services = format!("/v1/projects/{project}/services");
    let name = property("ServiceCreate", "name");
    let max = bound(&name, "maxLength");
    assert!(
        name["pattern"]
            .as_str()
            .is_some_and(|p| p.starts_with("^[a-z]")),
        "{name}"
    );
    let port = property("ServiceCreate", "port");
    let (low, high) = (
        bound(&port, "minimum") as u64,
        bound(&port, "maximum") as u64,
    );
    s.post(
        &services,
        ADMIN_TOKEN,
        service(format!("w{}", "1".repeat(max - 1)), high),
    )
    .await
    .assert_status(201);
    s.post(&services, ADMIN_TOKEN, service("x".repeat(max + 1), low))
        .await
        .assert_problem(422, "invalid_request");
    for outside_the_pattern in ["Web", "9web", "web-", "we_b"] {
        s.post(
            &services,
            ADMIN_TOKEN,
            service(outside_the_pattern.into(), low),
        )
        .await
        .assert_problem(422, "invalid_request");
    }
    s.post(&services, ADMIN_TOKEN, service("low".into(), low - 1))
        .await
        .assert_problem(422, "invalid_request");
    s.post(&services, ADMIN_TOKEN, service("high".into(), high + 1))
        .await
        .assert_problem(422, "invalid_body");

    // List limits.
    let limit = doc["paths"]["/v1/projects"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap()["schema"]
        .clone();
    let (low, high) = (bound(&limit, "minimum"), bound(&limit, "maximum"));
    s.get(&format!("/v1/projects?limit={high}"), ADMIN_TOKEN)
        .await
        .assert_status(200);
    for outside in [low - 1, high + 1] {
        s.get(&format!("/v1/projects?limit={outside}"), ADMIN_TOKEN)
            .await
            .assert_problem(400, "invalid_query");
    }

    // Passwords: at least minLength characters.
    let password = property("UserCreate", "password");
    let min = bound(&password, "minLength");
    let user = |n: usize| json!({ "email": format!("pw{n}@example.com"), "name": "P", "password": "p".repeat(n) });
    s.post("/v1/users", ADMIN_TOKEN, user(min))
        .await
        .assert_status(201);
    s.post("/v1/users", ADMIN_TOKEN, user(min - 1))
        .await
        .assert_problem(422, "invalid_request");
}

/// The packages `package` depends on to run (`cargo tree -e normal`, for this machine), by
/// name.
fn runtime_dependencies(package: &str) -> Vec<String> {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .args([
            "--manifest-path",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"),
        ])
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_lean_binaries_have_no_server_machinery() {
    let server_only = [
        "bulkhead-api",
        "bulkhead-server",
        "wasmtime",
        "cranelift-codegen",
        "sea-orm",
        "sqlx",
        "sqlx-core",
        "libsqlite3-sys",
        "utoipa",
        "progenitor",
    ];
    for package in ["bulkhead-cli", "bulkhead-edge", "bulkhead-agent"] {
        let dependencies = runtime_dependencies(package);
        assert!(dependencies.len() > 20, "{package}: {dependencies:?}");
        let found: Vec<_> = server_only
            .iter()
            .filter(|name| dependencies.iter().any(|dep| dep == *name))
            .collect();
        assert!(found.is_empty(), "{package} depends on {found:?}");
    }
    // The CLI speaks to the server through the generated client, and TLS through rustls.
    let cli = runtime_dependencies("bulkhead-cli");
    for needed in ["bulkhead-client", "rustls", "rustls-platform-verifier"] {
        assert!(
            cli.iter().any(|dep| dep == needed),
            "bulkhead-cli lacks {needed}"
        );
    }
    // The edge agent shares the routing table with the server, and nothing else of it.
    let edge = runtime_dependencies("bulkhead-edge");
    assert!(edge.iter().any(|dep| dep == "bulkhead-routing"));
    assert!(
        !edge
            .iter()
            .any(|dep| dep == "bulkhead-client" || dep == "axum-server")
    );
}
