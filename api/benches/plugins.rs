//! Plugin host benchmarks (criterion): the cost of a sandboxed call (fresh instance from the
//! pre-instantiated component + `health`) against the same Rust logic called natively, cold
//! compilation against loading from the compiled-code cache, concurrent calls, and a call of a
//! contract 0.2.0 component beside a 0.3.0 one.
//!
//! `cargo bench -p bulkhead-api --bench plugins` (builds the example plugin if needed).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkhead::plugins::{PluginEnv, PluginHost, PluginLimits};
use bulkhead_plugin_example::Example;
use bulkhead_sdk::Provider;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

/// A plugin built by the build script.
fn plugin_wasm(file: &str) -> Vec<u8> {
    std::fs::read(Path::new(bulkhead_bundled_plugins::PLUGINS_DIR).join(file)).unwrap()
}

fn benches(c: &mut Criterion) {
    let bytes = plugin_wasm("bulkhead_plugin_example.wasm");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let host = Arc::new(PluginHost::new(None).unwrap());
    let plugin = Arc::new(host.plugin_load(&bytes, PluginLimits::default()).unwrap());
    let env = Arc::new(PluginEnv {
        provider: "bench".into(),
        ..Default::default()
    });

    let mut calls = c.benchmark_group("health call");
    calls.bench_function("native (same Rust logic)", |b| {
        b.iter(|| std::hint::black_box(Example::health()))
    });
    calls.bench_function("sandboxed (fresh instance + call)", |b| {
        b.to_async(&runtime)
            .iter(|| async { host.plugin_health(&plugin, &env).await.unwrap() })
    });
    // The same call of a component built for contract 0.2.0 (answers adapted to 0.3.0) and of
    // a 0.3.0 one, side by side: what supporting an older version costs per call.
    let legacy = Arc::new(
        host.plugin_load(
            &plugin_wasm("bulkhead_plugin_contract_0_2.wasm"),
            PluginLimits::default(),
        )
        .unwrap(),
    );
    calls.bench_function("sandboxed 0.2.0 component (adapted)", |b| {
        b.to_async(&runtime)
            .iter(|| async { host.plugin_health(&legacy, &env).await.unwrap() })
    });
    calls.finish();

    // Each load runs on a new host (made outside the measurement), so that the host's own
    // memo of compiled components does not answer instead of the compiler or the cache.
    let cache_dir = tempfile::tempdir().unwrap();
    PluginHost::new(Some(cache_dir.path()))
        .unwrap()
        .plugin_load(&bytes, PluginLimits::default())
        .unwrap();
    let mut load = c.benchmark_group("plugin load");
    load.sample_size(10)
        .measurement_time(Duration::from_secs(10));
    load.bench_function("cold compile", |b| {
        b.iter_batched(
            || PluginHost::new(None).unwrap(),
            |fresh| {
                let plugin = fresh.plugin_load(&bytes, PluginLimits::default()).unwrap();
                assert!(!plugin.from_cache);
                (plugin, fresh)
            },
            BatchSize::PerIteration,
        )
    });
    load.bench_function("from the compiled-code cache", |b| {
        b.iter_batched(
            || PluginHost::new(Some(cache_dir.path())).unwrap(),
            |fresh| {
                let plugin = fresh.plugin_load(&bytes, PluginLimits::default()).unwrap();
                assert!(plugin.from_cache);
                (plugin, fresh)
            },
            BatchSize::PerIteration,
        )
    });
    load.finish();

    // Throughput: 2,000 health calls, `concurrency` at a time, on the 2-worker runtime.
    let mut throughput = c.benchmark_group("concurrent health calls (2,000 per iteration)");
    throughput.sample_size(10);
    for concurrency in [1usize, 2, 8] {
        throughput.bench_function(format!("{concurrency} at a time"), |b| {
            b.to_async(&runtime).iter_custom(|iterations| {
                let (host, plugin, env) = (host.clone(), plugin.clone(), env.clone());
                async move {
                    let started = Instant::now();
                    for _ in 0..iterations {
                        let tasks: Vec<_> = (0..concurrency)
                            .map(|_| {
                                let (host, plugin, env) =
                                    (host.clone(), plugin.clone(), env.clone());
                                tokio::spawn(async move {
                                    for _ in 0..2000 / concurrency {
                                        host.plugin_health(&plugin, &env).await.unwrap();
                                    }
                                })
                            })
                            .collect();
                        for task in tasks {
                            task.await.unwrap();
                        }
                    }
                    started.elapsed()
                }
            })
        });
    }
    throughput.finish();
}

criterion_group!(plugin_benches, benches);
criterion_main!(plugin_benches);
