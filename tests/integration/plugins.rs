//! The plugin host: the example plugin end to end, and hostile plugins contained by the
//! sandbox (deadline, memory cap, panic, no environment or files, outbound HTTP only to the
//! allowlist, wrong world) without slowing other plugins down.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bulkhead::plugins::{
    Allowlist, GitSource, HealthCheck, HealthStatus, InstanceSize, InstanceSpec, InstanceState,
    LogRequest, LogStream, Plugin, PluginEnv, PluginError, PluginHost, PluginLimits,
    PluginRejection, ProviderError, WorkloadHealth,
};

use crate::support::plugin_bytes;

fn env(provider: &str) -> Arc<PluginEnv> {
    let mut env = PluginEnv {
        provider: provider.into(),
        ..Default::default()
    };
    env.config
        .insert("regions".into(), "eu-west,us-east".into());
    env.config.insert("address".into(), "127.0.0.1:9999".into());
    Arc::new(env)
}

fn spec(key: &str, region: &str) -> InstanceSpec {
    InstanceSpec {
        instance_key: key.into(),
        region: region.into(),
        artifact: "shop/web:1".into(),
        port: 8080,
        env: vec![("A".into(), "1".into())],
        labels: vec![],
        health_check: None,
        source: None,
        size: InstanceSize {
            cpu_millis: 500,
            memory_mib: 512,
        },
    }
}

/// `file` of the test plugins, loaded on `host` with the default limits.
fn loaded(host: &PluginHost, file: &str) -> Plugin {
    host.plugin_load(&plugin_bytes(file), PluginLimits::default())
        .unwrap_or_else(|err| panic!("{file}: {err}"))
}

/// A host with the hostile plugin loaded under [`hostile_limits`].
fn hostile() -> (PluginHost, Plugin) {
    let host = PluginHost::new(None).unwrap();
    let plugin = host
        .plugin_load(
            &plugin_bytes("bulkhead_plugin_hostile.wasm"),
            hostile_limits(),
        )
        .unwrap();
    (host, plugin)
}

fn hostile_limits() -> PluginLimits {
    PluginLimits {
        memory_bytes: 32 * 1024 * 1024,
        health_deadline: Duration::from_millis(300),
        call_deadline: Duration::from_secs(5),
        max_concurrent_calls: 4,
        http_response_bytes: 1024 * 1024,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_plugin_answers_every_call() {
    let host = PluginHost::new(None).unwrap();
    let plugin = loaded(&host, "bulkhead_plugin_example.wasm");
    assert_eq!(plugin.contract_version, "0.7.0");
    assert_eq!(plugin.digest.len(), 64);
    let env = env("example");

    let info = host.plugin_info(&plugin, &env).await.unwrap();
    assert_eq!(info.name, "example");
    assert_eq!(
        info.regions,
        ["eu-west", "us-east"],
        "the plugin read its configuration"
    );
    assert_eq!(
        host.plugin_health(&plugin, &env).await.unwrap().status,
        HealthStatus::Healthy
    );
    let made = host
        .plugin_provision(&plugin, &env, spec("web-1", "us-east"))
        .await
        .unwrap();
    assert_eq!(made.provider_id, "example-web-1");
    assert_eq!(made.state, InstanceState::Running);
    assert_eq!(made.address.as_deref(), Some("127.0.0.1:9999"));
    let refused = host
        .plugin_provision(&plugin, &env, spec("web-2", "mars"))
        .await;
    assert!(
        matches!(
            refused,
            Err(PluginError::Provider(ProviderError::InvalidSpec(_)))
        ),
        "{refused:?}"
    );
    assert_eq!(
        host.plugin_describe(&plugin, &env, "web-1".into())
            .await
            .unwrap()
            .instance_key,
        "web-1"
    );
    host.plugin_deprovision(&plugin, &env, "web-1".into())
        .await
        .unwrap();
    assert!(host.plugin_list(&plugin, &env).await.unwrap().is_empty());
    assert_eq!(plugin.stats.ok.load(Relaxed), 6);
    assert_eq!(plugin.stats.provider_errors.load(Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_is_stopped_by_the_deadline() {
    let (host, plugin) = hostile();
    let started = Instant::now();
    let result = host.plugin_health(&plugin, &env("hostile")).await;
    let elapsed = started.elapsed();
    assert!(matches!(result, Err(PluginError::Timeout(_))), "{result:?}");
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "stopped after {elapsed:?}"
    );
    // The plugin still works for calls that behave.
    assert_eq!(
        host.plugin_info(&plugin, &env("hostile"))
            .await
            .unwrap()
            .name,
        "hostile"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_hits_the_cap() {
    let (host, plugin) = hostile();
    let result = host
        .plugin_provision(&plugin, &env("hostile"), spec("hog", "local"))
        .await;
    assert!(
        matches!(result, Err(PluginError::MemoryExceeded(bytes)) if bytes == 32 * 1024 * 1024),
        "{result:?}"
    );
    assert_eq!(plugin.stats.memory_exceeded.load(Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_fails_only_its_call() {
    let (host, plugin) = hostile();
    let result = host
        .plugin_describe(&plugin, &env("hostile"), "x".into())
        .await;
    assert!(matches!(&result, Err(PluginError::Trap(_))), "{result:?}");
    assert!(result.unwrap_err().to_string().contains("crashed"));
    assert_eq!(
        host.plugin_info(&plugin, &env("hostile"))
            .await
            .unwrap()
            .name,
        "hostile",
        "a fresh instance per call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_has_no_environment_and_no_files() {
    // SAFETY: set before any plugin runs; no other thread of this test reads the environment.
    unsafe { std::env::set_var("BULKHEAD_SANDBOX_CANARY", "must-not-leak") };
    let (host, plugin) = hostile();
    let result = host.plugin_list(&plugin, &env("hostile")).await;
    let Err(PluginError::Provider(ProviderError::Internal(seen))) = result else {
        panic!("{result:?}")
    };
    assert!(
        seen.contains("env=[]"),
        "the plugin saw environment variables: {seen}"
    );
    assert!(seen.contains("file=Err"), "the plugin read a file: {seen}");
    assert!(
        seen.contains("dir=Err"),
        "the plugin listed a directory: {seen}"
    );
    assert!(!seen.contains("must-not-leak"));
}

#[test]
fn binaries_that_are_not_providers_are_refused() {
    let host = PluginHost::new(None).unwrap();
    let limits = PluginLimits::default();
    let garbage = host.plugin_load(b"definitely not wasm", limits.clone());
    assert!(matches!(garbage, Err(PluginRejection::NotAComponent(_))));
    let core_module = host.plugin_load(b"\0asm\x01\0\0\0", limits.clone());
    assert!(matches!(
        core_module,
        Err(PluginRejection::NotAComponent(_))
    ));
    let command = host.plugin_load(&plugin_bytes("not-a-provider.wasm"), limits.clone());
    let Err(PluginRejection::WrongWorld(exports)) = command else {
        panic!("a WASI command was accepted")
    };
    assert!(exports.contains("wasi:cli/run"), "{exports}");
    let future = host.plugin_load(
        &plugin_bytes("bulkhead_plugin_future_contract.wasm"),
        limits,
    );
    let Err(PluginRejection::UnsupportedVersion { found, .. }) = future else {
        panic!("a component for a newer contract version was accepted")
    };
    assert_eq!(found, "0.8.0");
}

/// What the hostile plugin reports after `deprovision(url)` fetched (or failed to fetch) `url`.
async fn hostile_fetch(
    host: &PluginHost,
    plugin: &Plugin,
    env: &Arc<PluginEnv>,
    url: &str,
) -> String {
    match host.plugin_deprovision(plugin, env, url.into()).await {
        Err(PluginError::Provider(ProviderError::Internal(report))) => report,
        other => panic!("unexpected outcome of fetching {url}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_http_reaches_only_the_allowlist_and_is_capped() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new()
        .route("/ping", axum::routing::get(|| async { "pong" }))
        .route(
            "/big",
            axum::routing::get(|| async { vec![b'x'; 2 * 1024 * 1024] }),
        )
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                counted.fetch_add(1, Relaxed);
                next.run(request)
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (host, plugin) = hostile();
    let allowing = Arc::new(PluginEnv {
        provider: "hostile".into(),
        allowlist: Arc::new(Allowlist::parse(&[format!("127.0.0.1:{port}")]).unwrap()),
        ..Default::default()
    });
    let allowed = hostile_fetch(
        &host,
        &plugin,
        &allowing,
        &format!("http://127.0.0.1:{port}/ping"),
    )
    .await;
    assert_eq!(allowed, "fetched status=200 bytes=4 body=pong");

    for refused in [
        format!("http://localhost:{port}/ping"),
        format!("http://127.0.0.1:{}/ping", port.wrapping_add(1)),
        "https://example.com/".to_owned(),
        format!("post:http://localhost:{port}/ping"),
    ] {
        let report = hostile_fetch(&host, &plugin, &allowing, &refused).await;
        assert!(
            report.starts_with("refused:") && report.contains("not on this provider's allowlist"),
            "{refused}: {report}"
        );
    }
    let no_allowlist = env("hostile");
    let report = hostile_fetch(
        &host,
        &plugin,
        &no_allowlist,
        &format!("http://127.0.0.1:{port}/ping"),
    )
    .await;
    assert!(
        report.contains("not on this provider's allowlist"),
        "{report}"
    );

    let big = hostile_fetch(
        &host,
        &plugin,
        &allowing,
        &format!("http://127.0.0.1:{port}/big"),
    )
    .await;
    // The cap cuts the body stream; the plugin reads the host's reason.
    assert!(
        big.contains("body size exceeds limit: 1048576 bytes"),
        "{big}"
    );
    assert_eq!(
        hits.load(Relaxed),
        2,
        "only the two allowed requests may reach the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_plugin_does_not_slow_another() {
    let host = std::sync::Arc::new(PluginHost::new(None).unwrap());
    let example = loaded(&host, "bulkhead_plugin_example.wasm");
    let hostile = std::sync::Arc::new(
        host.plugin_load(
            &plugin_bytes("bulkhead_plugin_hostile.wasm"),
            PluginLimits {
                health_deadline: Duration::from_secs(2),
                ..hostile_limits()
            },
        )
        .unwrap(),
    );
    let env_example = env("example");

    let mut quiet = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        host.plugin_health(&example, &env_example).await.unwrap();
        quiet.push(started.elapsed());
    }
    // Two looping calls keep both cores' worth of the hostile plugin busy for two seconds.
    let loops: Vec<_> = (0..2)
        .map(|_| {
            let (host, hostile) = (host.clone(), hostile.clone());
            tokio::spawn(async move { host.plugin_health(&hostile, &env("hostile")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut busy = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        host.plugin_health(&example, &env_example).await.unwrap();
        busy.push(started.elapsed());
    }
    for handle in loops {
        assert!(matches!(
            handle.await.unwrap(),
            Err(PluginError::Timeout(_))
        ));
    }
    quiet.sort();
    busy.sort();
    let (quiet_median, busy_median) = (quiet[10], busy[10]);
    eprintln!(
        "example health: median {quiet_median:?} alone, {busy_median:?} beside two looping calls"
    );
    assert!(
        busy_median < Duration::from_millis(250),
        "calls slowed to {busy_median:?} (alone {quiet_median:?})"
    );
}

#[test]
fn plugin_cli_inspects_and_calls() {
    let bin = env!("CARGO_BIN_EXE_bulkhead");
    let example = crate::support::plugins_dir().join("bulkhead_plugin_example.wasm");
    let inspect = std::process::Command::new(bin)
        .args(["plugin", "inspect"])
        .arg(&example)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(inspect.status.success(), "{text}");
    assert!(
        text.contains("contract: bulkhead:provider@0.7.0") && text.contains("verdict:  accepted"),
        "{text}"
    );
    assert!(
        text.contains("exports:  bulkhead:provider/adapter@0.7.0"),
        "{text}"
    );
    assert!(text.contains("sha256:"), "{text}");
    assert!(
        text.contains("config:   health_url (optional): A URL that `health` asks, if set"),
        "the declared configuration: {text}"
    );

    let command = crate::support::plugins_dir().join("not-a-provider.wasm");
    let rejected = std::process::Command::new(bin)
        .args(["plugin", "inspect"])
        .arg(&command)
        .output()
        .unwrap();
    assert!(!rejected.status.success());
    assert!(String::from_utf8_lossy(&rejected.stdout).contains("verdict:  rejected"));

    let call = std::process::Command::new(bin)
        .args(["plugin", "call"])
        .arg(&example)
        .args([
            "provision",
            "--config",
            "regions=local",
            "--config",
            "address=10.1.2.3:80",
            "--key",
            "cli-1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&call.stdout);
    assert!(
        call.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&call.stderr)
    );
    assert!(
        text.contains("example-cli-1") && text.contains("10.1.2.3:80"),
        "{text}"
    );
    let refused = std::process::Command::new(bin)
        .args(["plugin", "call"])
        .arg(&example)
        .args(["provision", "--region", "mars"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("InvalidSpec"));
}

#[test]
fn plugin_logic_is_unit_tested_natively() {
    // The SDK's in-memory host lets plugin authors test without a Wasm build; the example
    // plugin's own unit tests prove that path works.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(["test", "-p", "bulkhead-plugin-example", "--manifest-path"])
        .arg(root.join("plugins/Cargo.toml"))
        .env("CARGO_TARGET_DIR", root.join("plugins/target"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("provisions_in_configured_regions_only ... ok"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_code_is_cached_across_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = plugin_bytes("bulkhead_plugin_example.wasm");
    let first = PluginHost::new(Some(dir.path())).unwrap();
    let started = Instant::now();
    let cold = first.plugin_load(&bytes, PluginLimits::default()).unwrap();
    let compile = started.elapsed();
    assert!(!cold.from_cache);
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(entries.len(), 1);
    assert!(
        entries[0].starts_with(&cold.digest),
        "keyed by the component's SHA-256: {entries:?}"
    );

    // A new host (as after a restart) loads the compiled code instead of compiling.
    let second = PluginHost::new(Some(dir.path())).unwrap();
    let started = Instant::now();
    let warm = second.plugin_load(&bytes, PluginLimits::default()).unwrap();
    let load = started.elapsed();
    assert!(warm.from_cache);
    eprintln!("example plugin: compiled in {compile:?}, loaded from the cache in {load:?}");
    assert_eq!(
        second
            .plugin_info(&warm, &env("example"))
            .await
            .unwrap()
            .name,
        "example"
    );

    // A damaged entry is compiled again and replaced.
    std::fs::write(dir.path().join(&entries[0]), b"garbage").unwrap();
    let third = PluginHost::new(Some(dir.path())).unwrap();
    let repaired = third.plugin_load(&bytes, PluginLimits::default()).unwrap();
    assert!(!repaired.from_cache);
    assert_eq!(
        third
            .plugin_info(&repaired, &env("example"))
            .await
            .unwrap()
            .name,
        "example"
    );
    assert!(
        PluginHost::new(Some(dir.path()))
            .unwrap()
            .plugin_load(&bytes, PluginLimits::default())
            .unwrap()
            .from_cache
    );
}

/// The plugins' own unit tests (native, against the SDK's in-memory host) run with the rest:
/// the plugins are a workspace of their own, so `cargo test --workspace` would skip them.
#[test]
fn plugin_unit_tests_pass_natively() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(["test", "--quiet", "--manifest-path"])
        .arg(root.join("plugins/Cargo.toml"))
        .env("CARGO_TARGET_DIR", root.join("plugins/target"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "plugin unit tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let passed: usize = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(
        passed >= 40,
        "only {passed} plugin unit tests ran:\n{stdout}"
    );
}

/// A name on the allowlist is not enough: the address it resolves to is checked too, and a
/// loopback, link-local or private address must be named by the allowlist itself. URLs with
/// credentials in their authority never leave the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_http_checks_the_address_a_name_resolves_to() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/ping",
        axum::routing::get(move || {
            counted.fetch_add(1, Relaxed);
            async { "pong" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (host, plugin) = hostile();
    let with = |patterns: &[String]| {
        Arc::new(PluginEnv {
            provider: "hostile".into(),
            allowlist: Arc::new(Allowlist::parse(patterns).unwrap()),
            ..Default::default()
        })
    };

    // `localhost` is on the allowlist, but it resolves to loopback, which is not.
    let by_name = with(&[format!("localhost:{port}")]);
    let report = hostile_fetch(
        &host,
        &plugin,
        &by_name,
        &format!("http://localhost:{port}/ping"),
    )
    .await;
    assert!(report.starts_with("refused:"), "{report}");
    assert_eq!(hits.load(Relaxed), 0, "nothing reached the loopback server");

    // Naming the address itself allows it, by name or by address.
    let named = with(&[format!("localhost:{port}"), format!("127.0.0.1:{port}")]);
    for url in [
        format!("http://localhost:{port}/ping"),
        format!("http://127.0.0.1:{port}/ping"),
    ] {
        let report = hostile_fetch(&host, &plugin, &named, &url).await;
        assert_eq!(report, "fetched status=200 bytes=4 body=pong", "{url}");
    }
    assert_eq!(hits.load(Relaxed), 2);

    // Credentials in the authority: refused whatever the allowlist says.
    let report = hostile_fetch(
        &host,
        &plugin,
        &named,
        &format!("http://user:pw@127.0.0.1:{port}/ping"),
    )
    .await;
    assert!(report.starts_with("refused:"), "{report}");
    assert_eq!(
        hits.load(Relaxed),
        2,
        "no refused request reached the server"
    );
}

/// One provider flooding the host holds at most its share of the host's capacity: another
/// provider's calls neither fail nor wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_provider_leaves_room_for_the_others() {
    // A server that accepts connections and never answers: each call to it holds its
    // instance until the call's deadline. It counts the connections open at once (a call
    // that times out closes its connection).
    let black_hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole = black_hole.local_addr().unwrap();
    let open = Arc::new(AtomicUsize::new(0));
    let most_open = Arc::new(AtomicUsize::new(0));
    let (counting, most) = (open.clone(), most_open.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = black_hole.accept().await {
            let now = counting.fetch_add(1, Relaxed) + 1;
            most.fetch_max(now, Relaxed);
            let counting = counting.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut sink = [0u8; 1024];
                while stream.read(&mut sink).await.is_ok_and(|read| read > 0) {}
                counting.fetch_sub(1, Relaxed);
            });
        }
    });

    let host = Arc::new(PluginHost::with_capacity(None, 8).unwrap());
    assert_eq!(host.provider_share_size(), 2);
    let busy = Arc::new(
        host.plugin_load(
            &plugin_bytes("bulkhead_plugin_hostile.wasm"),
            PluginLimits {
                call_deadline: Duration::from_millis(1500),
                max_concurrent_calls: 8,
                ..hostile_limits()
            },
        )
        .unwrap(),
    );
    let busy_env = Arc::new(PluginEnv {
        provider: "busy".into(),
        allowlist: Arc::new(Allowlist::parse(&[hole.to_string()]).unwrap()),
        ..Default::default()
    });
    let flood: Vec<_> = (0..12)
        .map(|_| {
            let (host, busy, env) = (host.clone(), busy.clone(), busy_env.clone());
            tokio::spawn(async move {
                host.plugin_deprovision(&busy, &env, format!("http://{hole}/"))
                    .await
            })
        })
        .collect();
    within(
        Duration::from_secs(5),
        "the busy provider's calls never reached the server",
        || open.load(Relaxed) == 2,
    )
    .await;

    let example = loaded(&host, "bulkhead_plugin_example.wasm");
    let quiet = env("example");
    for _ in 0..10 {
        let started = Instant::now();
        let report = host.plugin_health(&example, &quiet).await;
        assert!(report.is_ok(), "{report:?}");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "a quiet provider's call waited {:?} behind a busy one",
            started.elapsed()
        );
    }
    assert_eq!(
        most_open.load(Relaxed),
        2,
        "the busy provider ran {} calls at once; its share is 2",
        most_open.load(Relaxed)
    );
    for call in flood {
        assert!(matches!(call.await.unwrap(), Err(PluginError::Timeout(_))));
    }
}

/// A component built for contract 0.2.0 from the WIT as published (no SDK), loaded and called
/// beside 0.7.0 plugins on one host: every call answers, adapted to the newest contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_0_plugin_runs_beside_0_5_0_plugins() {
    let host = PluginHost::new(None).unwrap();
    let legacy = loaded(&host, "bulkhead_plugin_contract_0_2.wasm");
    let example = loaded(&host, "bulkhead_plugin_example.wasm");
    assert_eq!(legacy.contract_version, "0.2.0");
    assert_eq!(example.contract_version, "0.7.0");
    let mut settings = PluginEnv {
        provider: "legacy".into(),
        ..Default::default()
    };
    settings
        .config
        .insert("regions".into(), "old-1,old-2".into());
    settings
        .config
        .insert("address".into(), "10.9.9.9:80".into());
    let old_env = Arc::new(settings);
    let new_env = env("example");

    for _ in 0..2 {
        let info = host.plugin_info(&legacy, &old_env).await.unwrap();
        assert_eq!(info.name, "legacy");
        assert_eq!(
            info.regions,
            ["old-1", "old-2"],
            "it read its configuration"
        );
        assert!(info.config.is_empty(), "a 0.2.0 plugin declares nothing");
        let info = host.plugin_info(&example, &new_env).await.unwrap();
        assert!(info.config.iter().any(|key| key.name == "health_url"));

        let report = host.plugin_health(&legacy, &old_env).await.unwrap();
        assert_eq!(report.status, HealthStatus::Healthy);
        assert_eq!(report.message, "contract 0.2.0 plugin");
        let made = host
            .plugin_provision(&legacy, &old_env, spec("web-1", "old-2"))
            .await
            .unwrap();
        assert_eq!(made.provider_id, "legacy-web-1");
        assert_eq!(made.state, InstanceState::Running);
        assert_eq!(made.health, WorkloadHealth::Unchecked, "the host checks it");
        assert_eq!(made.address.as_deref(), Some("10.9.9.9:80"));
        let refused = host
            .plugin_provision(&legacy, &old_env, spec("web-2", "mars"))
            .await;
        assert!(
            matches!(&refused, Err(PluginError::Provider(ProviderError::InvalidSpec(m))) if m.contains("mars")),
            "{refused:?}"
        );
        let locked = host
            .plugin_deprovision(&legacy, &old_env, "locked".into())
            .await;
        assert!(
            matches!(
                &locked,
                Err(PluginError::Provider(ProviderError::Unauthorized(_)))
            ),
            "{locked:?}"
        );
        host.plugin_deprovision(&legacy, &old_env, "web-1".into())
            .await
            .unwrap();
        let found = host
            .plugin_describe(&legacy, &old_env, "web-1".into())
            .await
            .unwrap();
        assert_eq!(found.region, "old-1");
        assert_eq!(host.plugin_list(&legacy, &old_env).await.unwrap().len(), 1);
        host.plugin_provision(&example, &new_env, spec("web-1", "us-east"))
            .await
            .unwrap();
    }
    assert_eq!(legacy.stats.ok.load(Relaxed), 12);
    assert_eq!(legacy.stats.provider_errors.load(Relaxed), 4);
}

/// A component built for contract 0.3.0 from the WIT as published (no SDK), beside 0.7.0
/// plugins: what 0.3.0 added (declared configuration, the host's cache, `forbidden`) works,
/// and its instances are `unchecked`, so the control plane checks them itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_3_0_plugin_runs_beside_0_5_0_plugins() {
    let host = PluginHost::new(None).unwrap();
    let v03 = loaded(&host, "bulkhead_plugin_contract_0_3.wasm");
    let metal = loaded(&host, "bulkhead_plugin_metal.wasm");
    assert_eq!(v03.contract_version, "0.3.0");
    assert_eq!(metal.contract_version, "0.7.0");
    let mut settings = PluginEnv {
        provider: "v03".into(),
        ..Default::default()
    };
    settings
        .config
        .insert("address".into(), "10.3.3.3:80".into());
    let settings = Arc::new(settings);

    let info = host.plugin_info(&v03, &settings).await.unwrap();
    assert_eq!(
        (info.name.as_str(), info.regions.as_slice()),
        ("v03", &["v03".to_string()][..])
    );
    assert_eq!(info.config.len(), 1);
    assert_eq!(info.config[0].name, "address");
    let info = host.plugin_info(&metal, &env("metal")).await.unwrap();
    assert!(info.capabilities.iter().any(|c| c == "health-checks"));

    let report = host.plugin_health(&v03, &settings).await.unwrap();
    assert_eq!(report.message, "contract 0.3.0 plugin");
    let mut spec_checked = spec("web-1", "v03");
    spec_checked.health_check = Some(HealthCheck {
        path: "/ready".into(),
        interval_ms: 1000,
        timeout_ms: 500,
        healthy_threshold: 1,
        unhealthy_threshold: 3,
    });
    for call in 1..=2 {
        let made = host
            .plugin_provision(&v03, &settings, spec_checked.clone())
            .await
            .unwrap();
        assert_eq!(
            made.provider_id,
            format!("v03-web-1-{call}"),
            "its cache keeps the count"
        );
        assert_eq!(made.address.as_deref(), Some("10.3.3.3:80"));
        assert_eq!(made.health, WorkloadHealth::Unchecked);
    }
    let locked = host
        .plugin_deprovision(&v03, &settings, "locked".into())
        .await;
    assert!(
        matches!(&locked, Err(PluginError::Provider(ProviderError::Forbidden(m))) if m == "v03 refusal"),
        "{locked:?}"
    );
    let found = host
        .plugin_describe(&v03, &settings, "web-1".into())
        .await
        .unwrap();
    assert_eq!(found.provider_id, "v03-web-1");
    let listed = host.plugin_list(&v03, &settings).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].health, WorkloadHealth::Unchecked);
}

/// A component built for contract 0.4.0 from the WIT as published (no SDK), beside 0.7.0
/// plugins: what 0.4.0 added (the health check in the spec, the instance's health) goes both
/// ways, and it has no logs although it claims the capability, while metal's (0.7.0) answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_4_0_plugin_runs_beside_0_7_0_plugins() {
    let host = PluginHost::new(None).unwrap();
    let v04 = loaded(&host, "bulkhead_plugin_contract_0_4.wasm");
    let metal = loaded(&host, "bulkhead_plugin_metal.wasm");
    assert_eq!(v04.contract_version, "0.4.0");
    assert_eq!(metal.contract_version, "0.7.0");
    let settings = Arc::new(PluginEnv {
        provider: "v04".into(),
        ..Default::default()
    });

    let info = host.plugin_info(&v04, &settings).await.unwrap();
    assert_eq!(info.name, "v04");
    assert!(info.capabilities.iter().any(|c| c == "logs"));
    let info = host.plugin_info(&metal, &env("metal")).await.unwrap();
    assert!(info.capabilities.iter().any(|c| c == "logs"));
    let report = host.plugin_health(&v04, &settings).await.unwrap();
    assert_eq!(report.message, "contract 0.4.0 plugin");

    let mut checked = spec("web-1", "v04");
    checked.health_check = Some(HealthCheck {
        path: "/ready".into(),
        interval_ms: 1000,
        timeout_ms: 500,
        healthy_threshold: 1,
        unhealthy_threshold: 3,
    });
    let made = host
        .plugin_provision(&v04, &settings, checked)
        .await
        .unwrap();
    assert_eq!(
        made.provider_id, "v04-web-1-checked/ready",
        "the check reached it"
    );
    assert_eq!(made.health, WorkloadHealth::Healthy);
    let made = host
        .plugin_provision(&v04, &settings, spec("web-2", "v04"))
        .await
        .unwrap();
    assert_eq!(made.health, WorkloadHealth::Unchecked);
    let found = host
        .plugin_describe(&v04, &settings, "web-1".into())
        .await
        .unwrap();
    assert_eq!(found.health, WorkloadHealth::Pending);
    let listed = host.plugin_list(&v04, &settings).await.unwrap();
    assert_eq!(listed[0].health, WorkloadHealth::Unhealthy);
    let locked = host
        .plugin_deprovision(&v04, &settings, "locked".into())
        .await;
    assert!(
        matches!(&locked, Err(PluginError::Provider(ProviderError::Forbidden(m))) if m == "v04 refusal"),
        "{locked:?}"
    );

    let calls_before = v04.stats.ok.load(Relaxed) + v04.stats.provider_errors.load(Relaxed);
    let logs = host
        .plugin_logs(
            &v04,
            &settings,
            "web-1".into(),
            LogRequest {
                after: None,
                since_ms: None,
                max_lines: 10,
                max_bytes: 1000,
            },
        )
        .await;
    assert!(
        matches!(&logs, Err(PluginError::Provider(ProviderError::InvalidSpec(m))) if m.contains("0.4.0")),
        "{logs:?}"
    );
    assert_eq!(
        v04.stats.ok.load(Relaxed) + v04.stats.provider_errors.load(Relaxed),
        calls_before + 1
    );
}

/// A component built for contract 0.5.0 from the WIT as published (no SDK), beside 0.7.0
/// plugins: its logs reach the host, its instances give no `detail`, and a spec with a source
/// is refused for it (without a call) although it claims `git-source`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_5_0_plugin_runs_beside_0_7_0_plugins() {
    let host = PluginHost::new(None).unwrap();
    let v05 = loaded(&host, "bulkhead_plugin_contract_0_5.wasm");
    assert_eq!(v05.contract_version, "0.5.0");
    let settings = Arc::new(PluginEnv {
        provider: "v05".into(),
        ..Default::default()
    });
    let info = host.plugin_info(&v05, &settings).await.unwrap();
    assert!(info.capabilities.iter().any(|c| c == "git-source"));
    assert_eq!(
        host.plugin_health(&v05, &settings).await.unwrap().message,
        "contract 0.5.0 plugin"
    );
    let made = host
        .plugin_provision(&v05, &settings, spec("web-1", "v05"))
        .await
        .unwrap();
    assert_eq!(made.health, WorkloadHealth::Healthy);
    assert_eq!(made.detail, None);
    let listed = host.plugin_list(&v05, &settings).await.unwrap();
    assert_eq!(listed[0].provider_id, "v05-one");

    let page = host
        .plugin_logs(
            &v05,
            &settings,
            "web-1".into(),
            LogRequest {
                after: Some("4".into()),
                since_ms: None,
                max_lines: 10,
                max_bytes: 1000,
            },
        )
        .await
        .unwrap();
    let texts: Vec<_> = page.lines.iter().map(|line| line.text.as_str()).collect();
    assert_eq!(texts, ["web-1 line 5", "web-1 line 6"]);
    assert_eq!(page.lines[1].stream, LogStream::Stderr);
    assert_eq!(page.next, "6");

    let calls_before = v05.stats.ok.load(Relaxed) + v05.stats.provider_errors.load(Relaxed);
    let mut built = spec("web-2", "v05");
    built.source = Some(GitSource {
        url: "https://example.com/web.git".into(),
        commit: "a".repeat(40),
        token: Some("read-token".into()),
        build: None,
    });
    let refused = host.plugin_provision(&v05, &settings, built).await;
    assert!(
        matches!(&refused, Err(PluginError::Provider(ProviderError::InvalidSpec(m))) if m.contains("0.5.0") && m.contains("repository")),
        "{refused:?}"
    );
    assert_eq!(
        v05.stats.ok.load(Relaxed) + v05.stats.provider_errors.load(Relaxed),
        calls_before + 1
    );
}

/// A component built for contract 0.6.0 from the WIT as published (no SDK), beside 0.7.0
/// plugins: a spec with a source reaches it (0.6.0 builds code), less its size; its instances'
/// `detail` comes through, and they name no machine type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_6_0_plugin_runs_beside_0_7_0_plugins() {
    let host = PluginHost::new(None).unwrap();
    let v06 = loaded(&host, "bulkhead_plugin_contract_0_6.wasm");
    let metal = loaded(&host, "bulkhead_plugin_metal.wasm");
    assert_eq!(v06.contract_version, "0.6.0");
    assert_eq!(metal.contract_version, "0.7.0");
    let settings = Arc::new(PluginEnv {
        provider: "v06".into(),
        ..Default::default()
    });
    assert_eq!(
        host.plugin_health(&v06, &settings).await.unwrap().message,
        "contract 0.6.0 plugin"
    );
    let mut built = spec("web-1", "v06");
    built.size = InstanceSize {
        cpu_millis: 4000,
        memory_mib: 8192,
    };
    built.source = Some(GitSource {
        url: "https://example.com/web.git".into(),
        commit: "b".repeat(40),
        token: None,
        build: Some("make".into()),
    });
    let made = host.plugin_provision(&v06, &settings, built).await.unwrap();
    assert_eq!(
        made.detail.as_deref(),
        Some(format!("built {} of https://example.com/web.git", "b".repeat(40)).as_str())
    );
    assert_eq!(made.machine_type, None);
    assert_eq!(made.health, WorkloadHealth::Healthy);
    let page = host
        .plugin_logs(
            &v06,
            &settings,
            "web-1".into(),
            LogRequest {
                after: Some("7".into()),
                since_ms: None,
                max_lines: 10,
                max_bytes: 1000,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.lines[0].text, "web-1 line 8");
    let listed = host.plugin_list(&v06, &settings).await.unwrap();
    assert_eq!(listed[0].provider_id, "v06-one");
}

/// `POST` bodies go out with a `Content-Length`: a real HTTP/1.1 server that does not accept
/// chunked bodies (Python's http.server) reads the whole body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_reach_a_server_that_does_not_read_chunked_bodies() {
    let script = r#"
import http.server, sys
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        answer = ("read %d bytes; chunked=%s" % (len(body), self.headers.get("Transfer-Encoding") == "chunked")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Echo)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;
    let mut python = match std::process::Command::new("python3")
        .args(["-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => panic!("this test needs python3 (its http.server): {err}"),
    };
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(python.stdout.take().unwrap()),
        &mut port,
    )
    .unwrap();
    let port: u16 = port.trim().parse().unwrap();
    let (host, plugin) = hostile();
    let allowing = Arc::new(PluginEnv {
        provider: "hostile".into(),
        allowlist: Arc::new(Allowlist::parse(&[format!("127.0.0.1:{port}")]).unwrap()),
        ..Default::default()
    });
    let report = hostile_fetch(
        &host,
        &plugin,
        &allowing,
        &format!("post:http://127.0.0.1:{port}/echo"),
    )
    .await;
    python.kill().ok();
    python.wait().ok();
    // The hostile plugin posts a JSON array of 4096 "payload" strings.
    let sent = serde_json::to_vec(&vec!["payload"; 4096]).unwrap().len();
    assert_eq!(
        report,
        format!(
            "fetched status=200 bytes={} body=read {sent} bytes; chunked=False",
            format!("read {sent} bytes; chunked=False").len()
        ),
    );
}

/// A server that accepts connections and never answers: it reads each until the client
/// closes it, and counts the connections accepted and those still open.
struct BlackHole {
    address: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
}

impl BlackHole {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let (counted, still_open) = (accepted.clone(), open.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Relaxed);
                still_open.fetch_add(1, Relaxed);
                let still_open = still_open.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt;
                    let mut sink = [0u8; 1024];
                    while stream.read(&mut sink).await.is_ok_and(|read| read > 0) {}
                    still_open.fetch_sub(1, Relaxed);
                });
            }
        });
        Self {
            address,
            accepted,
            open,
        }
    }
}

/// Polls `check` every 10 ms until it holds; fails saying `what` once `bound` has passed.
async fn within(bound: Duration, what: &str, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < bound, "{what} (waited {bound:?})");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn allowing(patterns: &[String]) -> Arc<PluginEnv> {
    Arc::new(PluginEnv {
        provider: "hostile".into(),
        allowlist: Arc::new(Allowlist::parse(patterns).unwrap()),
        ..Default::default()
    })
}

/// A plugin that opens requests and returns with them still in flight holds nothing after
/// its call: every connection is closed when the call ends, and a call has at most 16
/// requests in flight (the 17th is refused, and never reaches the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_requests_end_with_its_call_and_are_capped() {
    let hole = BlackHole::start().await;
    let (host, plugin) = hostile();
    let env = allowing(&[hole.address.to_string()]);
    let started = Instant::now();
    // 17 requests at once, no timeouts; the plugin waits 1.5 s for answers, then returns.
    let report = hostile_fetch(
        &host,
        &plugin,
        &env,
        &format!("requests:17:1500:0:0:0:http://{}/", hole.address),
    )
    .await;
    let ended = Instant::now();
    let mut expected = vec!["pending"; 16];
    expected.push("ConnectionLimitReached");
    assert_eq!(report, expected.join(","));
    assert!(
        ended - started < Duration::from_secs(4),
        "the call took {:?}",
        ended - started
    );
    assert_eq!(
        hole.accepted.load(Relaxed),
        16,
        "16 requests reached the server, the 17th was refused"
    );
    within(
        Duration::from_millis(500),
        "the server still sees connections of a call that ended",
        || hole.open.load(Relaxed) == 0,
    )
    .await;
    eprintln!(
        "all 16 connections closed {:?} after the call",
        ended.elapsed()
    );
    // The cap is per call: the next call has its own 16.
    let report = hostile_fetch(
        &host,
        &plugin,
        &env,
        &format!("requests:16:300:0:0:0:http://{}/", hole.address),
    )
    .await;
    assert_eq!(report, vec!["pending"; 16].join(","));
}

/// The timeouts of `wasi:http`'s request options are honoured: the first byte of the answer
/// (a server that never answers), the gap between bytes of its body (a server that stalls),
/// and the connection, TLS handshake included (a server that never answers the handshake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeouts_are_honoured() {
    let hole = BlackHole::start().await;
    let stall = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stalling = stall.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = stall.accept().await {
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut head = [0u8; 1024];
                let _ = stream.read(&mut head).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nx")
                    .await;
                // Then nothing, until the client goes away.
                while stream.read(&mut head).await.is_ok_and(|read| read > 0) {}
            });
        }
    });
    let (host, plugin) = hostile();
    let env = allowing(&[hole.address.to_string(), stalling.to_string()]);
    for (what, spec, expected) in [
        (
            "first byte",
            format!("1:4000:0:300:0:http://{}/", hole.address),
            "HttpResponseTimeout".to_owned(),
        ),
        (
            "between bytes",
            format!("1:4000:0:0:300:http://{stalling}/"),
            // The body stream reports the host's error as text.
            "status=200 bytes=1 then connection read timeout".to_owned(),
        ),
        (
            "TLS handshake",
            format!("1:4000:300:0:0:https://{}/", hole.address),
            "ConnectionTimeout".to_owned(),
        ),
    ] {
        let started = Instant::now();
        let report = hostile_fetch(&host, &plugin, &env, &format!("requests:{spec}")).await;
        let elapsed = started.elapsed();
        assert_eq!(report, expected, "{what}");
        assert!(
            elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
            "the {what} timeout of 300 ms fired after {elapsed:?}"
        );
    }
}

/// Connections of this machine open (ESTABLISHED) to `port` on 127.0.0.1: the client ends,
/// as the kernel lists them.
fn connections_open_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("Linux lists its sockets");
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&"01")
        })
        .count()
}

/// A server that accepts and never reads: a plugin that posts more than the sockets buffer
/// blocks until its deadline, and its connection (with what it could not send) is closed
/// when the call ends, not kept by the host trying to flush it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_server_never_reads_is_closed_with_its_call() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let host = Arc::new(PluginHost::new(None).unwrap());
    let plugin = Arc::new(
        host.plugin_load(
            &plugin_bytes("bulkhead_plugin_hostile.wasm"),
            PluginLimits {
                call_deadline: Duration::from_secs(1),
                ..hostile_limits()
            },
        )
        .unwrap(),
    );
    let env = allowing(&[address.to_string()]);
    let call = {
        let (host, plugin, env) = (host.clone(), plugin.clone(), env.clone());
        tokio::spawn(async move {
            host.plugin_deprovision(&plugin, &env, format!("upload:64:http://{address}/"))
                .await
        })
    };
    within(Duration::from_secs(1), "the upload never connected", || {
        connections_open_to(address.port()) == 1
    })
    .await;
    let outcome = call.await.unwrap();
    assert!(
        matches!(outcome, Err(PluginError::Timeout(_))),
        "{outcome:?}"
    );
    let ended = Instant::now();
    within(
        Duration::from_millis(500),
        "the host still holds the connection of a call that ended",
        || connections_open_to(address.port()) == 0,
    )
    .await;
    eprintln!(
        "the upload's connection closed {:?} after the call",
        ended.elapsed()
    );
}

/// An endpoint in a provider's configuration is a name its plugin may reach, but a loopback,
/// private or metadata address opens only to a pattern the operator listed: a configured
/// `http://127.0.0.1:…` reaches nothing until the allowlist names it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_endpoint_opens_no_restricted_address_unless_listed() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/ping",
        axum::routing::get(move || {
            counted.fetch_add(1, Relaxed);
            async { "pong" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (host, plugin) = hostile();
    let config: std::collections::BTreeMap<String, String> = [
        ("endpoint".to_owned(), format!("http://127.0.0.1:{port}/v1")),
        (
            "metadata".to_owned(),
            "http://169.254.169.254/latest/meta-data".to_owned(),
        ),
    ]
    .into();
    let with = |listed: &[String]| {
        Arc::new(PluginEnv {
            provider: "hostile".into(),
            allowlist: Arc::new(Allowlist::parse(listed).unwrap().with_endpoints(&config)),
            config: config.clone(),
            ..Default::default()
        })
    };
    let configured_only = with(&[]);
    for url in [
        format!("http://127.0.0.1:{port}/ping"),
        "http://169.254.169.254/latest/meta-data".to_owned(),
    ] {
        let report = hostile_fetch(&host, &plugin, &configured_only, &url).await;
        assert!(report.starts_with("refused:"), "{url}: {report}");
    }
    assert_eq!(hits.load(Relaxed), 0, "nothing reached the loopback server");

    let listed = with(&[format!("127.0.0.1:{port}")]);
    let report = hostile_fetch(
        &host,
        &plugin,
        &listed,
        &format!("http://127.0.0.1:{port}/ping"),
    )
    .await;
    assert_eq!(report, "fetched status=200 bytes=4 body=pong");
    let metadata = hostile_fetch(
        &host,
        &plugin,
        &listed,
        "http://169.254.169.254/latest/meta-data",
    )
    .await;
    assert!(metadata.starts_with("refused:"), "{metadata}");
    assert_eq!(hits.load(Relaxed), 1);
}
