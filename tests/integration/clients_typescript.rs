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
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::support::{ADMIN_TOKEN, Backend, PASSWORD, TestServer, platform};

const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/typescript");
/// The generated schema, relative to [`PACKAGE`], as the `generate` script writes it.
const SCHEMA: &str = "src/schema.d.ts";
const INSTALL_HINT: &str = "install Node.js 18.17 or later and npm: `apt-get install nodejs npm` on Debian or Ubuntu, or see https://nodejs.org";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_type_checks_and_drives_a_deployment_to_healthy() {
    let started = Instant::now();
    let node = tokio::task::spawn_blocking(|| {
        let tools = Tools::find();
        tools.install();
        tools.schema_is_current();
        tools.npm_run("check");
        tools.npm_run("build");
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

/// `node` and `npm`, found on the PATH.
struct Tools {
    node: PathBuf,
    npm: PathBuf,
}

impl Tools {
    fn find() -> Self {
        let node = program_find("node").unwrap_or_else(|| {
            panic!("this test needs `node`, which is not on the PATH: {INSTALL_HINT}")
        });
        let npm = program_find("npm").unwrap_or_else(|| {
            panic!("this test needs `npm`, which is not on the PATH: {INSTALL_HINT}")
        });
        let version = run(Command::new(&node).arg("--version"), "node --version");
        let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        let major: u32 = version
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|major| major.parse().ok())
            .unwrap_or(0);
        assert!(
            major >= 18,
            "this test needs Node.js 18.17 or later, and `node` is {version}: {INSTALL_HINT}"
        );
        Self { node, npm }
    }

    fn npm(&self) -> Command {
        let mut command = Command::new(&self.npm);
        command
            .current_dir(PACKAGE)
            .env("npm_config_update_notifier", "false")
            .env("npm_config_fund", "false")
            .env("npm_config_audit", "false");
        command
    }

    /// `npm ci`, when `node_modules` is missing or older than the lock file (npm writes
    /// `node_modules/.package-lock.json` at each install).
    fn install(&self) {
        let package = Path::new(PACKAGE);
        let lock = modified(&package.join("package-lock.json"))
            .expect("openapi/typescript/package-lock.json is committed");
        let installed = modified(&package.join("node_modules/.package-lock.json"));
        if installed.is_some_and(|installed| installed >= lock) {
            return;
        }
        eprintln!("clients_typescript: npm ci in openapi/typescript");
        run(self.npm().arg("ci"), "npm ci (in openapi/typescript)");
    }

    /// The committed schema equals what the `generate` script makes of `openapi/openapi.json`
    /// now: the same command line, writing to a temporary file.
    fn schema_is_current(&self) {
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
        let mut command = Command::new(&self.node);
        command.arg(&program).args(&words[1..]).current_dir(PACKAGE);
        run(
            &mut command,
            &format!("openapi-typescript (the `generate` script: {script})"),
        );
        let generated = std::fs::read_to_string(&fresh).unwrap();
        let committed =
            std::fs::read_to_string(Path::new(PACKAGE).join(SCHEMA)).unwrap_or_default();
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

    fn npm_run(&self, script: &str) {
        run(
            self.npm().args(["run", script]),
            &format!("npm run {script} (in openapi/typescript)"),
        );
    }
}

/// Runs `command` to its end; fails, showing its output, unless it succeeds.
fn run(command: &mut Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{what} does not start: {err}"));
    if !output.status.success() {
        let (stdout, stderr) = texts(&output);
        panic!("{what} failed ({}):\n{stdout}{stderr}", output.status);
    }
    output
}

fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The first executable file `name` in the directories of the PATH.
fn program_find(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}
