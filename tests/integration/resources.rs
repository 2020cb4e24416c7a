//! Environments, services (with write-only secrets) and domains.

use bulkhead::entity::service;
use sea_orm::EntityTrait;
use serde_json::{Value, json};

use crate::db_tests;
use crate::support::TestServer;

db_tests!(
    environments_lifecycle,
    services_keep_secrets_write_only,
    service_input_is_validated,
);

pub(crate) async fn setup(s: &TestServer, email: &str) -> (String, String, String) {
    let token = s.user_with_session(email).await;
    let project = s.project_create(&token, "p").await;
    let env = s
        .post(
            &format!("/v1/projects/{project}/environments"),
            &token,
            json!({ "name": "production" }),
        )
        .await;
    let env = env.assert_status(201)["id"].as_str().unwrap().to_owned();
    (token, project, env)
}

pub(crate) fn service_body(env: &str, name: &str) -> Value {
    json!({
        "environment_id": env,
        "name": name,
        "source": { "type": "artifact", "image": "registry.example.com/web:1.2.3" },
        "port": 8080,
        "replicas": 2,
        "regions": ["eu-west", "us-east"],
        "variables": [
            { "name": "LOG_LEVEL", "value": "info" },
            { "name": "DATABASE_PASSWORD", "value": "hunter2-very-secret", "secret": true }
        ]
    })
}

async fn environments_lifecycle(s: TestServer) {
    let (token, project, env) = setup(&s, "env@example.com").await;
    let base = format!("/v1/projects/{project}/environments");
    s.post(&base, &token, json!({ "name": "production" }))
        .await
        .assert_problem(409, "name_taken");
    s.post(&base, &token, json!({ "name": "Bad Name" }))
        .await
        .assert_problem(422, "invalid_request");
    let staging = s
        .post(&base, &token, json!({ "name": "staging" }))
        .await
        .assert_status(201)
        .clone();
    let renamed = s
        .patch(
            &format!("{base}/{}", staging["id"].as_str().unwrap()),
            &token,
            json!({ "name": "preview" }),
        )
        .await;
    assert_eq!(renamed.assert_status(200)["name"], "preview");
    assert_eq!(
        s.get(&base, &token).await.body["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    s.post(
        &format!("/v1/projects/{project}/services"),
        &token,
        service_body(&env, "web"),
    )
    .await
    .assert_status(201);
    s.delete(&format!("{base}/{env}"), &token)
        .await
        .assert_problem(409, "environment_not_empty");
    s.delete(
        &format!("{base}/{}", staging["id"].as_str().unwrap()),
        &token,
    )
    .await
    .assert_status(204);
    // An environment id of another project is not found here.
    let other = s.project_create(&token, "other").await;
    s.get(&format!("/v1/projects/{other}/environments/{env}"), &token)
        .await
        .assert_problem(404, "not_found");
}

async fn services_keep_secrets_write_only(s: TestServer) {
    let (token, project, env) = setup(&s, "svc@example.com").await;
    let base = format!("/v1/projects/{project}/services");
    let created = s.post(&base, &token, service_body(&env, "web")).await;
    assert!(
        !created.text.contains("hunter2"),
        "secret in create response: {}",
        created.text
    );
    let body = created.assert_status(201).clone();
    let id = body["id"].as_str().unwrap().to_owned();
    assert_eq!(body["replicas"], 2);
    assert_eq!(body["source"]["image"], "registry.example.com/web:1.2.3");
    assert_eq!(
        body["variables"],
        json!([
            { "name": "LOG_LEVEL", "secret": false, "value": "info" },
            { "name": "DATABASE_PASSWORD", "secret": true }
        ])
    );
    for path in [
        format!("{base}/{id}"),
        base.clone(),
        "/v1/audit-events".to_owned(),
    ] {
        let reply = s.get(&path, &token).await;
        assert_eq!(reply.status, 200);
        assert!(!reply.text.contains("hunter2"), "secret leaked by {path}");
    }

    // Resubmitting the secret without a value keeps it; the stored value is still there.
    let updated = s.patch(&format!("{base}/{id}"), &token, json!({
        "replicas": 3,
        "source": { "type": "command", "command": ["./server", "--port", "8080"] },
        "variables": [{ "name": "DATABASE_PASSWORD", "secret": true }, { "name": "NEW", "value": "1" }]
    })).await;
    let updated = updated.assert_status(200).clone();
    assert_eq!(updated["replicas"], 3);
    assert_eq!(updated["source"]["type"], "command");
    assert_eq!(updated["variables"].as_array().unwrap().len(), 2);
    let row = service::Entity::find_by_id(uuid::Uuid::parse_str(&id).unwrap())
        .one(&s.app().db)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !row.variables.to_string().contains("hunter2"),
        "the secret is stored sealed"
    );
    assert_eq!(
        s.app().service_environment(&row).unwrap()["DATABASE_PASSWORD"],
        "hunter2-very-secret",
        "the secret value was kept"
    );
    // A new variable without a value is refused.
    let missing = s
        .patch(
            &format!("{base}/{id}"),
            &token,
            json!({ "variables": [{ "name": "OTHER" }] }),
        )
        .await;
    missing.assert_problem(422, "invalid_request");

    s.post(&base, &token, service_body(&env, "web"))
        .await
        .assert_problem(409, "name_taken");
    s.delete(&format!("{base}/{id}"), &token)
        .await
        .assert_status(204);
    s.get(&format!("{base}/{id}"), &token)
        .await
        .assert_problem(404, "not_found");
}

async fn service_input_is_validated(s: TestServer) {
    let (token, project, env) = setup(&s, "val@example.com").await;
    let base = format!("/v1/projects/{project}/services");
    let with = |change: Value| {
        let mut body = service_body(&env, "web");
        for (key, value) in change.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let cases_422_invalid = [
        json!({ "port": 0 }),
        json!({ "replicas": 101 }),
        json!({ "name": "-web" }),
        json!({ "regions": ["eu", "eu"] }),
        json!({ "variables": [{ "name": "lower", "value": "x" }] }),
        json!({ "variables": [{ "name": "A", "value": "x" }, { "name": "A", "value": "y" }] }),
        json!({ "source": { "type": "command", "command": [] } }),
        json!({ "environment_id": uuid::Uuid::now_v7() }),
    ];
    for case in cases_422_invalid {
        let reply = s.post(&base, &token, with(case.clone())).await;
        assert_eq!(reply.status, 422, "{case} was accepted: {}", reply.text);
        reply.assert_problem(422, "invalid_request");
    }
    let cases_422_body = [
        json!({ "port": 70000 }),
        json!({ "port": "80" }),
        json!({ "replicas": -1 }),
        json!({ "source": { "type": "vm", "image": "x" } }),
        json!({ "source": { "type": "artifact", "image": "x", "extra": 1 } }),
    ];
    for case in cases_422_body {
        let reply = s.post(&base, &token, with(case.clone())).await;
        assert_eq!(reply.status, 422, "{case} was accepted: {}", reply.text);
        reply.assert_problem(422, "invalid_body");
    }
    let huge = "x".repeat(40 * 1024);
    let reply = s
        .post(
            &base,
            &token,
            with(json!({ "variables": [{ "name": "BIG", "value": huge, "secret": true }] })),
        )
        .await;
    assert!(
        !reply.text.contains("xxxxxxxx"),
        "an oversized (secret) value is never echoed"
    );
    assert_eq!(reply.status, 422);
}
