//! An administrator's levers on a provider from the CLI: a plugin uploaded, activated by its
//! version or digest, and rolled back; drained, disabled and brought back; evacuated
//! and the evacuation cancelled; what members see of it.

use serde_json::json;

use super::{Cli, row};
use crate::support::{ADMIN_TOKEN, TestServer, plugins_dir};

crate::db_tests!(an_administrator_operates_a_provider);

async fn an_administrator_operates_a_provider(s: TestServer) {
    let admin = Cli::with_token(&s.base, ADMIN_TOKEN);
    s.post("/v1/providers", ADMIN_TOKEN, json!({ "name": "toy" }))
        .await
        .assert_status(201);

    // A plugin version: uploaded, activated by its digest, then by its version (of the plugin
    // the provider runs: other providers' plugins have the same version).
    let file = plugins_dir().join("bulkhead_plugin_example.wasm");
    let uploaded = admin
        .run(&format!(
            "providers plugin upload toy {} --output json",
            file.display()
        ))
        .await
        .json();
    let digest = uploaded["digest"].as_str().unwrap();
    let activated = admin
        .run(&format!(
            "providers plugin activate toy {digest} --output json"
        ))
        .await
        .json();
    assert_eq!(activated["plugin"]["digest"], digest);
    let version = uploaded["version"].as_str().unwrap();
    let activated = admin
        .run(&format!(
            "providers plugin activate toy {version} --output json"
        ))
        .await
        .json();
    assert_eq!(activated["plugin"]["digest"], digest);
    let unknown = admin.run("providers plugin activate toy 9.9.9").await;
    assert!(unknown.exits(5).contains("9.9.9"), "{}", unknown.stderr);
    // Back to the version before the last switch (the same binary here).
    let rolled_back = admin
        .run("providers plugin rollback toy --output json")
        .await
        .json();
    assert_eq!(rolled_back["plugin"]["digest"], digest);
    let probe = admin.run("providers probe toy --output json").await.json();
    assert_eq!(probe["digest"], uploaded["digest"]);

    // The replicas and their leaders: this lone replica leads every kind of work.
    let status = admin.run("status --output json").await.json();
    assert_eq!(status["replicas"].as_array().unwrap().len(), 1);
    let leaders = status["leaders"].as_array().unwrap();
    assert_eq!(leaders.len(), 5, "every kind of work");
    assert!(leaders.iter().all(|l| l["holder"] == status["replica"]));
    let table = admin.run("status").await;
    let replica = status["replica"].as_str().unwrap();
    assert!(
        row(table.ok(), "deploys").is_some_and(|line| line.contains(replica)),
        "{}",
        table.stdout
    );

    // Drained, disabled, and back; each state in the list.
    let state = async |name: &str| {
        let listed = admin.run("providers list").await;
        row(listed.ok(), name)
            .map(str::to_owned)
            .unwrap_or_default()
    };
    admin.run("providers drain toy").await.ok();
    assert!(state("toy").await.contains("drained"));
    admin.run("providers undrain toy").await.ok();
    admin.run("providers disable toy").await.ok();
    assert!(state("toy").await.contains("disabled"));
    admin.run("providers enable toy").await.ok();
    assert!(!state("toy").await.contains("disabled"));

    // An evacuation, watched and cancelled.
    let started = admin
        .run("providers evacuate toy --output json")
        .await
        .json();
    let shown = admin
        .run("providers evacuation show toy --output json")
        .await
        .json();
    assert_eq!(shown["id"], started["id"]);
    let cancelled = admin
        .run("providers evacuation cancel toy --output json")
        .await
        .json();
    assert_eq!(cancelled["id"], started["id"]);
    admin.run("providers events toy").await.ok();

    // Members see the name, state and health; the reasons are for administrators.
    let seen_by_admin = admin.run("providers list --output json").await.json();
    let toy = |list: &serde_json::Value| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "toy")
            .cloned()
            .expect("toy is listed")
    };
    assert!(toy(&seen_by_admin).get("health_reason").is_some());
    let member = s.user_with_session("mo@example.com").await;
    let seen_by_member = Cli::with_token(&s.base, &member)
        .run("providers list --output json")
        .await
        .json();
    assert!(toy(&seen_by_member).get("health_reason").is_none());
    let forbidden = Cli::with_token(&s.base, &member)
        .run("providers drain toy")
        .await;
    assert!(
        forbidden.exits(4).contains("forbidden"),
        "{}",
        forbidden.stderr
    );
}
