//! Sizes end to end: a service's size (validated against the operator's bounds, defaulted,
//! kept by a PATCH that leaves it out, changed by a deploy and restored by a rollback), given to
//! the clouds as the machine types their simulators accept (and refused as they refuse an
//! unknown one), and to a host agent, which holds the workload to it with a cgroup.

use std::time::Duration;

use serde_json::{Value, json};

use bulkhead::dev::{AWS_REGION, GCP_ZONE};
use bulkhead_agent::{CGROUP_PARENT, ResourceLimits};

use crate::db_tests;
use crate::deployments::{deploy, deployment_wait, event_items, fixture, rollback};
use crate::support::{ADMIN_TOKEN, TestServer, platform};

db_tests!(
    a_service_size_is_validated_defaulted_and_kept,
    a_deploy_changes_the_size_and_a_rollback_restores_it,
    sizes_reach_the_clouds_as_machine_types,
    a_metal_workload_is_held_to_its_services_size,
);

async fn a_service_size_is_validated_defaulted_and_kept(s: TestServer) {
    let made = s.project_with_service("sized").await;
    let service = format!("/v1/projects/{}/services/{}", made.id, made.service);
    let view = s.get(&service, &made.owner).await;
    assert_eq!(
        view.assert_status(200)["size"],
        json!({"cpu_millis": 500, "memory_mib": 512}),
        "a service given no size gets the operator's default"
    );

    let limits = s
        .get(&format!("/v1/projects/{}/limits", made.id), &made.owner)
        .await;
    assert_eq!(
        limits.assert_status(200)["service_sizes"],
        json!({"default": {"cpu_millis": 500, "memory_mib": 512},
               "max": {"cpu_millis": 8000, "memory_mib": 16384}})
    );
    let mine = s.get("/v1/me/limits", &made.owner).await;
    assert!(mine.assert_status(200).get("service_sizes").is_none());

    for (size, says) in [
        (
            json!({"cpu_millis": 8001, "memory_mib": 512}),
            "`size.cpu_millis` must be 10 to 8000",
        ),
        (
            json!({"cpu_millis": 9, "memory_mib": 512}),
            "`size.cpu_millis` must be 10 to 8000",
        ),
        (
            json!({"cpu_millis": 500, "memory_mib": 16385}),
            "`size.memory_mib` must be 16 to 16384",
        ),
        (
            json!({"cpu_millis": 500, "memory_mib": 15}),
            "`size.memory_mib` must be 16 to 16384",
        ),
    ] {
        let refused = s.patch(&service, &made.owner, json!({"size": size})).await;
        refused.assert_problem(422, "invalid_request");
        assert!(refused.text.contains(says), "{}", refused.text);
    }
    for malformed in [
        json!({"cpu_millis": 500}),
        json!({"cpu_millis": -1, "memory_mib": 512}),
        json!({"cpu_millis": 500, "memory_mib": 512, "gpus": 1}),
        json!("large"),
    ] {
        let refused = s
            .patch(&service, &made.owner, json!({"size": malformed}))
            .await;
        assert!(
            refused.status == 400 || refused.status == 422,
            "{}",
            refused.text
        );
    }
    let unchanged = s.get(&service, &made.owner).await;
    assert_eq!(
        unchanged.assert_status(200)["size"],
        json!({"cpu_millis": 500, "memory_mib": 512}),
        "nothing refused was kept"
    );

    let resized = s
        .patch(
            &service,
            &made.owner,
            json!({"size": {"cpu_millis": 8000, "memory_mib": 16384}}),
        )
        .await;
    assert_eq!(
        resized.assert_status(200)["size"],
        json!({"cpu_millis": 8000, "memory_mib": 16384})
    );
    let renamed = s.patch(&service, &made.owner, json!({"name": "api"})).await;
    assert_eq!(
        renamed.assert_status(200)["size"],
        json!({"cpu_millis": 8000, "memory_mib": 16384}),
        "a PATCH that leaves the size out keeps it"
    );

    // Created with one, within the bounds, and refused past them.
    let environment = unchanged.body["environment_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let create = |size: Value| {
        json!({"environment_id": environment, "name": format!("w{}", uuid::Uuid::new_v4().simple())
                   .chars().take(12).collect::<String>(),
               "source": {"type": "artifact", "image": "shop/web:1"}, "port": 8080, "size": size})
    };
    let services = format!("/v1/projects/{}/services", made.id);
    let small = s
        .post(
            &services,
            &made.owner,
            create(json!({"cpu_millis": 10, "memory_mib": 16})),
        )
        .await;
    assert_eq!(
        small.assert_status(201)["size"],
        json!({"cpu_millis": 10, "memory_mib": 16})
    );
    s.post(
        &services,
        &made.owner,
        create(json!({"cpu_millis": 1000, "memory_mib": 100000})),
    )
    .await
    .assert_problem(422, "invalid_request");
}

/// The `instance.started` events' messages of a deployment.
async fn started(s: &TestServer, service: &str, id: &str) -> Vec<String> {
    event_items(s, service, id)
        .await
        .iter()
        .filter(|event| event["kind"] == "instance.started")
        .map(|event| event["message"].as_str().unwrap().to_owned())
        .collect()
}

async fn a_deploy_changes_the_size_and_a_rollback_restores_it(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let f = fixture(&s, 1, &["aws"]).await;
    let healthy = Duration::from_secs(60);
    s.patch(
        &f.service,
        &f.owner,
        json!({"size": {"cpu_millis": 250, "memory_mib": 256}}),
    )
    .await
    .assert_status(200);
    let v1 = deploy(&s, &f.owner, &f.service).await;
    assert_eq!(
        v1["spec"]["size"],
        json!({"cpu_millis": 250, "memory_mib": 256})
    );
    let v1_id = v1["id"].as_str().unwrap().to_owned();
    deployment_wait(&s, &f.service, &v1_id, "healthy", healthy).await;
    let v1_started = started(&s, &f.service, &v1_id).await;
    assert!(
        v1_started[0].ends_with("(t3.small)"),
        "250m and 256 MiB: t3.small (t3.micro's baseline is 200m): {v1_started:?}"
    );

    s.patch(
        &f.service,
        &f.owner,
        json!({"size": {"cpu_millis": 1000, "memory_mib": 1024}}),
    )
    .await
    .assert_status(200);
    let v2 = deploy(&s, &f.owner, &f.service).await;
    let v2_id = v2["id"].as_str().unwrap().to_owned();
    deployment_wait(&s, &f.service, &v2_id, "healthy", healthy).await;
    let v2_started = started(&s, &f.service, &v2_id).await;
    assert!(v2_started[0].ends_with("(c6i.large)"), "{v2_started:?}");

    let rollback = rollback(&s, &f.owner, &f.service, &v2_id).await;
    assert_eq!(
        rollback["spec"]["size"],
        json!({"cpu_millis": 250, "memory_mib": 256}),
        "a rollback deploys the size it goes back to"
    );
    let rollback_id = rollback["id"].as_str().unwrap().to_owned();
    deployment_wait(&s, &f.service, &rollback_id, "healthy", healthy).await;
    let back = started(&s, &f.service, &rollback_id).await;
    assert!(back[0].ends_with("(t3.small)"), "{back:?}");
}

/// Provisions `key` on `provider` through the instances API at `size`.
async fn provision(s: &TestServer, provider: &str, key: &str, region: &str, size: Value) -> Value {
    let made = s
        .post(
            &format!("/v1/providers/{provider}/instances"),
            ADMIN_TOKEN,
            json!({"instance_key": key, "region": region, "artifact": "shop/web:1", "port": 8080,
                   "size": size}),
        )
        .await;
    made.assert_status(201).clone()
}

async fn sizes_reach_the_clouds_as_machine_types(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    for (provider, region, size, expected) in [
        (
            "gcp",
            GCP_ZONE,
            json!({"cpu_millis": 2000, "memory_mib": 6000}),
            "e2-standard-2",
        ),
        (
            "gcp",
            GCP_ZONE,
            json!({"cpu_millis": 100, "memory_mib": 512}),
            "e2-micro",
        ),
        (
            "aws",
            AWS_REGION,
            json!({"cpu_millis": 1000, "memory_mib": 1024}),
            "c6i.large",
        ),
        (
            "aws",
            AWS_REGION,
            json!({"cpu_millis": 8000, "memory_mib": 16384}),
            "c6i.2xlarge",
        ),
    ] {
        let key = format!("sized-{}", expected.replace('.', "-"));
        let made = provision(&s, provider, &key, region, size).await;
        assert_eq!(made["machine_type"], expected, "{made}");
        // What the simulated cloud recorded, read back from it.
        let described = s
            .get(
                &format!("/v1/providers/{provider}/instances/{key}"),
                ADMIN_TOKEN,
            )
            .await;
        assert_eq!(
            described.assert_status(200)["machine_type"],
            expected,
            "{}",
            described.text
        );
    }

    // A machine type the cloud does not have is refused by it, as Compute Engine does.
    let gcp = s.get("/v1/providers/gcp", ADMIN_TOKEN).await;
    let mut config = gcp.assert_status(200)["config"].clone();
    config["machine_type"] = json!("e2-huge");
    s.patch("/v1/providers/gcp", ADMIN_TOKEN, json!({"config": config}))
        .await
        .assert_status(200);
    let refused = s
        .post(
            "/v1/providers/gcp/instances",
            ADMIN_TOKEN,
            json!({"instance_key": "huge-1", "region": GCP_ZONE, "artifact": "shop/web:1",
                   "port": 8080}),
        )
        .await;
    refused.assert_problem(422, "invalid_spec");
    assert!(
        refused.text.contains("e2-huge") && refused.text.contains("does not exist"),
        "{}",
        refused.text
    );
}

async fn a_metal_workload_is_held_to_its_services_size(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let f = fixture(&s, 1, &["metal"]).await;
    s.patch(
        &f.service,
        &f.owner,
        json!({"size": {"cpu_millis": 300, "memory_mib": 96}}),
    )
    .await
    .assert_status(200);
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap().to_owned();
    deployment_wait(&s, &f.service, &id, "healthy", Duration::from_secs(60)).await;
    let instances = s
        .get(&format!("{}/instances", f.service), ADMIN_TOKEN)
        .await;
    let key = instances.assert_status(200)["items"][0]["instance_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let (hierarchy, limit_file) = match platform.agent.limits {
        ResourceLimits::CgroupV1 => ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        ResourceLimits::CgroupV2 => ("/sys/fs/cgroup", "memory.max"),
        ResourceLimits::NotEnforced => panic!(
            "the tests run as root on a machine with cgroups (CI does): the agent holds sizes"
        ),
    };
    let parent = std::path::Path::new(hierarchy).join(CGROUP_PARENT);
    let cgroup = std::fs::read_dir(&parent)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(&format!("{key}-")))
        })
        .unwrap_or_else(|| panic!("no cgroup of {key} under {}", parent.display()));
    let limit = std::fs::read_to_string(cgroup.join(limit_file)).unwrap();
    assert_eq!(limit.trim(), (96u64 << 20).to_string());
    let procs = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap();
    assert!(!procs.trim().is_empty(), "the workload runs in its cgroup");
}
