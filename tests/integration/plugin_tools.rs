//! The plugin author's tools and guide: `sdk/README.md` followed from an empty directory
//! (scaffold, unit tests, build, inspect, call, upload), `bulkhead plugin call` reaching the
//! endpoints of its configuration with JSON output and no colour codes, and the Python example
//! built with componentize-py (installed from PyPI into the target directory when missing).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bulkhead::plugins::{
    HealthStatus, InstanceSize, InstanceSpec, LogRequest, LogStream, PluginEnv, PluginError,
    PluginHost, PluginLimits, ProviderError,
};

use crate::support::{ADMIN_TOKEN, Backend, TestServer, plugins_dir};

const BIN: &str = env!("CARGO_BIN_EXE_bulkhead");
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The target directory this test binary was built in (`…/target`): caches live under it.
fn target_dir() -> PathBuf {
    Path::new(BIN)
        .parent()
        .and_then(Path::parent)
        .expect("the binary is in target/<profile>/")
        .to_path_buf()
}

/// The code blocks of `markdown` whose info string is `info`, in order.
fn code_blocks(markdown: &str, info: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, fence) if fence == format!("```{info}") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), text) => {
                block.push_str(text);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// A shell command with the environment of a plugin author: `bulkhead` on the `PATH`, no
/// build settings of this test's own cargo (its target directory above all).
fn author_shell(dir: &Path, script: &str) -> Command {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("RUST_LOG", "warn");
    for name in [
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MANIFEST_DIR",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        command.env_remove(name);
    }
    command
}

/// `sdk/README.md`'s walkthrough, run as written from an empty directory against a running
/// server: scaffold, unit tests, build, inspect, call, upload. Its provider snippet is the
/// scaffold's `src/lib.rs`, so the build proves that the snippet compiles and its test passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_readme_takes_a_new_author_from_nothing_to_an_uploaded_plugin() {
    let readme = std::fs::read_to_string(format!("{REPO}/sdk/README.md")).unwrap();
    let [walkthrough] = code_blocks(&readme, "sh tutorial")
        .try_into()
        .expect("one walkthrough");
    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let output = author_shell(dir.path(), &walkthrough)
        .env("A", format!("Authorization: Bearer {ADMIN_TOKEN}"))
        .env("B", &s.base)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the README's walkthrough failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("verdict:  accepted"), "{stdout}");
    assert!(stdout.contains("config:   endpoint (required)"), "{stdout}");
    assert!(
        stdout.contains(r#""provider_id": "my-provider-web-1""#),
        "{stdout}"
    );
    let uploaded: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .expect("the upload's answer");
    assert_eq!(uploaded["name"], "my-provider", "{uploaded}");
    assert_eq!(uploaded["contract_version"], "0.7.0");
    assert_eq!(uploaded["config"][0]["name"], "endpoint");
    assert_eq!(uploaded["config"][0]["required"], true);

    let scaffolded = std::fs::read_to_string(dir.path().join("my-provider/src/lib.rs")).unwrap();
    let snippets = code_blocks(&readme, "rust");
    assert!(
        snippets.contains(&scaffolded),
        "sdk/README.md's provider must be exactly what `bulkhead plugin new my-provider` writes"
    );
    let cargo_toml = std::fs::read_to_string(dir.path().join("my-provider/Cargo.toml")).unwrap();
    for expected in [
        "opt-level = \"s\"",
        "lto = true",
        "strip = true",
        "serde = ",
    ] {
        assert!(cargo_toml.contains(expected), "{expected}: {cargo_toml}");
    }
}

/// `plugin call` reaches the endpoints in `--config` (as the server does) without
/// `--allow-host`, prints JSON with `--output json`, and writes no colour codes to a stderr
/// that is not a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_call_reaches_its_configured_endpoints_and_prints_json() {
    let app = axum::Router::new().route("/up", axum::routing::get(|| async { "up" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    fn call(args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(["plugin", "call"])
            .arg(plugins_dir().join("bulkhead_plugin_example.wasm"))
            .args(args)
            .env("RUST_LOG", "info");
        command
    }
    let health_url = format!("health_url=http://127.0.0.1:{port}/up");
    let output = tokio::task::spawn_blocking(move || {
        call(&["health", "--config", &health_url, "--output", "json"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        answer["message"],
        format!("http://127.0.0.1:{port}/up answered 200")
    );

    let output = tokio::task::spawn_blocking(move || {
        call(&["provision", "--region", "mars", "--output", "json"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["error"]["kind"], "provider_error", "{answer}");
    assert!(
        answer["error"]["error"]["InvalidSpec"].is_string(),
        "{answer}"
    );

    let output = tokio::task::spawn_blocking(move || {
        call(&["provision", "--config", "regions=local"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("provisioning"),
        "the plugin's log: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe: {stderr:?}"
    );
}

/// Where componentize-py is installed for the tests: under the target directory, from PyPI,
/// on first use. Fails (never skips) when it cannot be installed, saying why.
fn componentize_py() -> (PathBuf, PathBuf) {
    const VERSION: &str = "0.25.1";
    let dir = target_dir().join(format!("tools/componentize-py-{VERSION}"));
    let program = dir.join("bin/componentize-py");
    if !program.exists() {
        let installed = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&dir)
            .arg(format!("componentize-py=={VERSION}"))
            .output();
        match installed {
            Ok(output) if output.status.success() => {}
            Ok(output) => panic!(
                "the Python example needs componentize-py {VERSION} from PyPI, and `python3 -m pip install --target {} componentize-py=={VERSION}` failed:\n{}",
                dir.display(),
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(err) => panic!(
                "the Python example needs python3 and pip to install componentize-py {VERSION}: {err}"
            ),
        }
    }
    (program, dir)
}

/// `sdk/examples/python` built with componentize-py as `sdk/README.md` says, then loaded
/// beside the Rust plugins and called: declared configuration, the host's cache between
/// calls, typed errors raised from Python.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_builds_and_answers_every_call() {
    let wasm = tokio::task::spawn_blocking(|| {
        let (program, python_path) = componentize_py();
        let out = target_dir().join("tools/python-example.wasm");
        let example = Path::new(REPO).join("sdk/examples/python");
        let output = Command::new(&program)
            .args([
                "--wit-path",
                "../../wit",
                "--world",
                "provider",
                "componentize",
                "app",
                "-o",
            ])
            .arg(&out)
            .current_dir(&example)
            .env("PYTHONPATH", &python_path)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "componentize-py failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read(&out).unwrap()
    })
    .await
    .unwrap();

    let host = PluginHost::new(None).unwrap();
    let limits = PluginLimits {
        health_deadline: std::time::Duration::from_secs(10),
        ..PluginLimits::default()
    };
    let plugin = host
        .plugin_load(&wasm, limits)
        .expect("the host accepts it");
    assert_eq!(plugin.contract_version, "0.7.0");
    let mut settings = PluginEnv {
        provider: "python".into(),
        ..Default::default()
    };
    settings.config.insert("regions".into(), "eu,us".into());
    settings
        .config
        .insert("address".into(), "127.0.0.1:8080".into());
    let env = Arc::new(settings);

    let info = host.plugin_info(&plugin, &env).await.unwrap();
    assert_eq!(info.name, "python-example");
    assert_eq!(info.regions, ["eu", "us"]);
    assert!(
        info.config
            .iter()
            .any(|key| key.name == "address" && key.required)
    );
    for expected in ["health check 1", "health check 2"] {
        let report = host.plugin_health(&plugin, &env).await.unwrap();
        assert_eq!(report.status, HealthStatus::Healthy);
        assert_eq!(
            report.message, expected,
            "the cache kept the count between calls"
        );
    }
    let spec = |region: &str| InstanceSpec {
        instance_key: "web-1".into(),
        region: region.into(),
        artifact: "app:1".into(),
        port: 8080,
        env: vec![],
        labels: vec![],
        health_check: None,
        source: None,
        size: InstanceSize {
            cpu_millis: 500,
            memory_mib: 512,
        },
    };
    let made = host
        .plugin_provision(&plugin, &env, spec("us"))
        .await
        .unwrap();
    assert_eq!(made.provider_id, "py-web-1");
    assert_eq!(made.address.as_deref(), Some("127.0.0.1:8080"));
    // Its logs: what it noted of the instance, numbered.
    let request = |after: Option<&str>| LogRequest {
        after: after.map(str::to_owned),
        since_ms: None,
        max_lines: 10,
        max_bytes: 1000,
    };
    let page = host
        .plugin_logs(&plugin, &env, "web-1".into(), request(None))
        .await
        .unwrap();
    assert_eq!(page.lines.len(), 1, "{page:?}");
    assert_eq!(page.lines[0].text, "provisioned in us");
    assert_eq!(page.lines[0].stream, LogStream::System);
    assert_eq!(page.next, "1");
    let empty = host
        .plugin_logs(&plugin, &env, "web-1".into(), request(Some("1")))
        .await
        .unwrap();
    assert!(empty.lines.is_empty());
    assert_eq!(empty.next, "1");
    let bad = host
        .plugin_logs(&plugin, &env, "web-1".into(), request(Some("x")))
        .await;
    assert!(
        matches!(
            &bad,
            Err(PluginError::Provider(ProviderError::InvalidSpec(_)))
        ),
        "{bad:?}"
    );
    let refused = host.plugin_provision(&plugin, &env, spec("mars")).await;
    assert!(
        matches!(&refused, Err(PluginError::Provider(ProviderError::InvalidSpec(m))) if m.contains("mars")),
        "{refused:?}"
    );
    let unconfigured = Arc::new(PluginEnv {
        provider: "python".into(),
        ..Default::default()
    });
    let misconfigured = host
        .plugin_provision(&plugin, &unconfigured, spec("local"))
        .await;
    assert!(
        matches!(
            &misconfigured,
            Err(PluginError::Provider(ProviderError::Misconfigured(_)))
        ),
        "{misconfigured:?}"
    );
    assert_eq!(
        host.plugin_describe(&plugin, &env, "web-1".into())
            .await
            .unwrap()
            .region,
        "eu"
    );
    assert!(host.plugin_list(&plugin, &env).await.unwrap().is_empty());
    host.plugin_deprovision(&plugin, &env, "web-1".into())
        .await
        .unwrap();
}
