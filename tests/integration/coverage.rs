//! Every operation in the OpenAPI document refuses a caller without credentials (401) and a
//! caller whose token is too narrow (403, or 404 where the resource is hidden from them).

use reqwest::Method;
use serde_json::{Value, json};

use crate::db_tests;
use crate::support::TestServer;

db_tests!(every_operation_requires_authorization);

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
                assert!(
                    path.starts_with("/v1/auth/")
                        || ["/healthz", "/readyz", "/metrics"].contains(&path.as_str()),
                    "{method} {path} is public"
                );
                continue;
            }
            let concrete = path
                .replace("{project_id}", &project)
                .split('/')
                .map(|segment| {
                    if segment.starts_with('{') {
                        uuid::Uuid::now_v7().to_string()
                    } else {
                        segment.to_owned()
                    }
                })
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
            let limited = s.call(method.clone(), &concrete, Some(&narrow), body).await;
            assert!(
                [403, 404].contains(&limited.status),
                "{method} {path} with a routing:read token: {} {}",
                limited.status,
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
