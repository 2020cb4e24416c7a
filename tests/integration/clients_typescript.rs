//! The dashboard's TypeScript client (`openapi/typescript`): its committed `src/schema.d.ts` is
//! what openapi-typescript makes of the committed OpenAPI document, the client and its test
//! program type-check (`tsc`) against it, and the program, using only the client, logs in to a
//! real server and deploys a service on the local platform until it is healthy — which is then
//! checked from here, through the API.
//!
//! Needs Node.js (18.17 or later) and npm on the PATH, and the npm registry the first time (or
//! whenever `package-lock.json` changes): `npm ci` runs only when `node_modules` is missing or
//! older than the lock file.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::node::{CLIENT_PACKAGE as PACKAGE, Node, run, texts};
use crate::support::{ADMIN_TOKEN, Backend, PASSWORD, TestServer, platform};

/// The generated schema, relative to [`PACKAGE`], as the `generate` script writes it.
const SCHEMA: &str = "src/schema.d.ts";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_type_checks_and_drives_a_deployment_to_healthy() {
    let started = Instant::now();
    let node = tokio::task::spawn_blocking(|| {
        let tools = Node::find();
        tools.install(PACKAGE);
        schema_is_current(&tools);
        tools.npm_run(PACKAGE, "check");
        tools.npm_run(PACKAGE, "build");
        tools.node
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    eprintln!(
        "clients_typescript: npm ci (when needed), schema check, tsc and build took {:?}",
        started.elapsed()
    );

    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    let (_platform, _dir) = platform(&s).await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let email = format!("dashboard-{}@example.com", &suffix[..12]);
    let user_id = s.user_create(&email).await;
    let project_name = format!("ts-client-{}", &suffix[..8]);

    let drive = tokio::process::Command::new(&node)
        .arg("dist/test/drive.js")
        .current_dir(PACKAGE)
        .env("BULKHEAD_URL", &s.base)
        .env("BULKHEAD_EMAIL", &email)
        .env("BULKHEAD_PASSWORD", PASSWORD)
        .env("BULKHEAD_PROJECT_NAME", &project_name)
        .env("BULKHEAD_PROVIDERS", "gcp,aws,metal")
        .env("BULKHEAD_TIMEOUT_SECS", "60")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), drive)
        .await
        .expect("node dist/test/drive.js did not finish within 180 s")
        .unwrap_or_else(|err| panic!("node dist/test/drive.js does not start: {err}"));
    let (stdout, stderr) = texts(&output);
    println!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "node dist/test/drive.js failed ({}):\n{stdout}{stderr}",
        output.status
    );

    // What the program says it made exists, was made by the user, and is healthy.
    let done = stdout
        .lines()
        .find_map(|line| line.strip_prefix("drive: done "))
        .unwrap_or_else(|| panic!("drive.js did not say what it made:\n{stdout}"));
    let made: Value = serde_json::from_str(done).unwrap();
    let (project, service, deployment) = (
        made["project_id"].as_str().unwrap(),
        made["service_id"].as_str().unwrap(),
        made["deployment_id"].as_str().unwrap(),
    );
    let view = s.get(&format!("/v1/projects/{project}"), ADMIN_TOKEN).await;
    assert_eq!(view.assert_status(200)["name"], project_name.as_str());
    let members = s
        .get(&format!("/v1/projects/{project}/members"), ADMIN_TOKEN)
        .await;
    let members = members.assert_status(200)["items"].as_array().unwrap();
    assert!(
        members
            .iter()
            .any(|m| m["user_id"] == user_id.as_str() && m["role"] == "owner"),
        "the user does not own the project: {members:?}"
    );
    let path = format!("/v1/projects/{project}/services/{service}/deployments/{deployment}");
    let view = s.get(&path, ADMIN_TOKEN).await;
    let view = view.assert_status(200);
    assert_eq!(view["state"], "healthy", "{view:#}");
    let instances = view["instances"].as_array().unwrap();
    let providers: BTreeSet<&str> = instances
        .iter()
        .map(|i| i["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, BTreeSet::from(["aws", "gcp", "metal"]));
    assert!(
        instances
            .iter()
            .all(|i| i["state"] == "running" && i["health"] == "healthy"),
        "{view:#}"
    );
    let events = s.get(&format!("{path}/events"), ADMIN_TOKEN).await;
    let kinds: Vec<&str> = events.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"deployment.healthy"), "{kinds:?}");
    eprintln!("clients_typescript: took {:?} in all", started.elapsed());
}

/// The committed schema equals what the `generate` script makes of `openapi/openapi.json` now:
/// the same command line, writing to a temporary file.
fn schema_is_current(tools: &Node) {
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(PACKAGE).join("package.json")).unwrap(),
    )
    .unwrap();
    let script = manifest["scripts"]["generate"]
        .as_str()
        .expect("package.json has a `generate` script");
    let mut words: Vec<String> = script.split_whitespace().map(str::to_owned).collect();
    let output = words
        .iter()
        .position(|word| word == "--output" || word == "-o")
        .map(|at| at + 1)
        .filter(|&at| words.get(at).map(String::as_str) == Some(SCHEMA))
        .unwrap_or_else(|| {
            panic!("the `generate` script no longer writes `--output {SCHEMA}`: {script}")
        });
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("schema.d.ts");
    words[output] = fresh.display().to_string();
    let program = Path::new(PACKAGE).join("node_modules/.bin").join(&words[0]);
    let mut command = Command::new(&tools.node);
    command.arg(&program).args(&words[1..]).current_dir(PACKAGE);
    run(
        &mut command,
        &format!("openapi-typescript (the `generate` script: {script})"),
    );
    let generated = std::fs::read_to_string(&fresh).unwrap();
    let committed = std::fs::read_to_string(Path::new(PACKAGE).join(SCHEMA)).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "openapi/typescript/{SCHEMA} is stale: it is not what openapi-typescript makes of openapi/openapi.json (first difference at line {}); regenerate it with `cd openapi/typescript && npm run generate` (or `openapi/regenerate`, which regenerates openapi/openapi.json first)",
            line + 1
        );
    }
}
