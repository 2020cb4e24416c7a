//! Every operation in the OpenAPI document refuses a caller without credentials (401) and a
//! caller whose token is too narrow (403, or 404 where the resource is hidden from them).

use std::collections::HashMap;

use reqwest::Method;
use serde_json::{Value, json};

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, TestServer};

db_tests!(every_operation_requires_authorization);

/// Makes one of each resource that a path names, so that every path parameter names something
/// that exists: a 404 then cannot stand in for a refusal.
async fn resources_made(
    s: &TestServer,
    owner: &str,
    project: &str,
    narrow_session: &str,
) -> HashMap<&'static str, String> {
    let id =
        |reply: &crate::support::Reply| reply.assert_status(201)["id"].as_str().unwrap().to_owned();
    let environment = id(&s
        .post(
            &format!("/v1/projects/{project}/environments"),
            owner,
            json!({ "name": "production" }),
        )
        .await);
    let service = id(&s
        .post(
            &format!("/v1/projects/{project}/services"),
            owner,
            json!({ "environment_id": environment, "name": "web", "source": { "type": "artifact", "image": "nginx:1" }, "port": 80 }),
        )
        .await);
    let domain = id(&s
        .post(
            &format!("/v1/projects/{project}/domains"),
            owner,
            json!({ "hostname": "coverage.example.test", "service_id": service }),
        )
        .await);
    s.post(
        "/v1/deploy-pipeline/pause",
        ADMIN_TOKEN,
        json!({ "reason": "coverage" }),
    )
    .await
    .assert_status(200);
    // Before the deployment, so that its first event makes a message.
    let webhook = id(&s
        .post(
            &format!("/v1/projects/{project}/webhooks"),
            owner,
            json!({ "url": "https://hooks.example.com/coverage" }),
        )
        .await);
    let deployment = id(&s
        .call(
            Method::POST,
            &format!("/v1/projects/{project}/services/{service}/deployments"),
            Some(owner),
            None,
        )
        .await);
    let user = s.get("/v1/me", narrow_session).await.assert_status(200)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = s.get("/v1/tokens", narrow_session).await.assert_status(200)["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let invitation = id(&s
        .post(
            &format!("/v1/projects/{project}/invitations"),
            owner,
            json!({ "email": "cov-invited@example.com", "role": "member" }),
        )
        .await);
    let first = |reply: crate::support::Reply, field: &str| {
        reply.assert_status(200)["items"][0][field]
            .as_str()
            .map(str::to_owned)
    };
    let provider = first(s.get("/v1/providers", ADMIN_TOKEN).await, "name").expect("a provider");
    let keys = s.get("/v1/routing-table/keys", ADMIN_TOKEN).await;
    let key = keys.assert_status(200)["keys"][0]["id"]
        .as_str()
        .expect("a key")
        .to_owned();
    let digest = first(s.get("/v1/plugins", ADMIN_TOKEN).await, "digest").expect("a plugin binary");
    let message = first(
        s.get(
            &format!("/v1/projects/{project}/webhooks/{webhook}/messages"),
            owner,
        )
        .await,
        "id",
    )
    .expect("a webhook message");
    let installation = id(&s
        .post(
            &format!("/v1/projects/{project}/git-installations"),
            owner,
            json!({ "bindings": [{ "repository": "acme/web", "branch": "main", "service_id": service }] }),
        )
        .await);
    HashMap::from([
        ("project_id", project.to_owned()),
        ("environment_id", environment),
        ("service_id", service),
        ("domain_id", domain),
        ("deployment_id", deployment),
        ("user_id", user),
        ("token_id", token),
        ("invitation_id", invitation),
        ("name", provider),
        ("key_id", key),
        ("digest", digest),
        ("installation_id", installation),
        ("webhook_id", webhook),
        // No provider is configured: any name (authorization comes first).
        ("provider", "github".to_owned()),
        ("identity_id", uuid::Uuid::now_v7().to_string()),
        ("message_id", message),
        // Made by edges and providers as they run: any well-formed value.
        ("edge_id", "edge-coverage".to_owned()),
        ("instance_key", "web-1".to_owned()),
    ])
}

async fn every_operation_requires_authorization(s: TestServer) {
    // A project the narrow caller is a viewer of, so that 403 (not 404) is reachable too.
    let owner = s.user_with_session("cov-owner@example.com").await;
    let project = s.project_create(&owner, "p").await;
    let narrow_session = s.user_with_session("cov-narrow@example.com").await;
    s.member_add(&project, "cov-narrow@example.com", "viewer")
        .await;
    let narrow = s
        .post(
            "/v1/tokens",
            &narrow_session,
            json!({ "name": "edge", "scopes": ["routing:read"] }),
        )
        .await;
    let narrow = narrow.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let made = resources_made(&s, &owner, &project, &narrow_session).await;

    let doc: Value = s
        .http
        .get(s.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Ok(method) = method.to_uppercase().parse::<Method>() else {
                continue;
            };
            let public = operation.get("security").is_none();
            if public {
                // Git deliveries are signed instead (tests/integration/git_intake.rs).
                assert!(
                    path.starts_with("/v1/auth/")
                        || ["/healthz", "/readyz", "/metrics", "/v1/hooks/github"]
                            .contains(&path.as_str()),
                    "{method} {path} is public"
                );
                continue;
            }
            let concrete = path
                .split('/')
                .map(
                    |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                        Some(param) => made
                            .get(param)
                            .unwrap_or_else(|| {
                                panic!("{path}: make a `{param}` in `resources_made`")
                            })
                            .clone(),
                        None => segment.to_owned(),
                    },
                )
                .collect::<Vec<_>>()
                .join("/");
            let body =
                matches!(method, Method::POST | Method::PATCH | Method::PUT).then(|| json!({}));
            let anonymous = s.call(method.clone(), &concrete, None, body.clone()).await;
            assert_eq!(
                anonymous.status, 401,
                "{method} {path} without credentials: {}",
                anonymous.text
            );
            anonymous.assert_problem(401, "unauthenticated");
            // Every resource exists and the caller may see the project: a refusal is 403.
            let limited = s.call(method.clone(), &concrete, Some(&narrow), body).await;
            assert_eq!(
                limited.status, 403,
                "{method} {concrete} with a viewer's routing:read token: {}",
                limited.text
            );
            assert_eq!(
                limited.header("content-type"),
                Some("application/problem+json")
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} operations checked");
}
