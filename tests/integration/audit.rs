//! The audit log: every mutation is recorded with who, what, when and the request id, and each
//! caller reads only what they may.

use reqwest::Method;
use serde_json::json;

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, TestServer};

db_tests!(mutations_are_audited_and_visibility_is_limited);

async fn mutations_are_audited_and_visibility_is_limited(s: TestServer) {
    let owner = s.user_with_session("aud@example.com").await;
    let other = s.user_with_session("other@example.com").await;
    let request = s
        .request(Method::POST, "/v1/projects", Some(&owner))
        .header("x-request-id", "req-audit-1")
        .json(&json!({ "name": "p" }));
    let created = TestServer::send(request).await;
    assert_eq!(created.header("x-request-id"), Some("req-audit-1"));
    let project = created.assert_status(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.patch(
        &format!("/v1/projects/{project}"),
        &owner,
        json!({ "name": "q" }),
    )
    .await
    .assert_status(200);
    s.post(
        &format!("/v1/projects/{project}/environments"),
        &owner,
        json!({ "name": "prod" }),
    )
    .await
    .assert_status(201);

    let mine = s.get("/v1/audit-events", &owner).await;
    let events = mine.assert_status(200)["items"].as_array().unwrap().clone();
    let actions: Vec<&str> = events
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "session.login",
            "project.create",
            "project.update",
            "environment.create"
        ]
    );
    let create = &events[1];
    assert_eq!(create["request_id"], "req-audit-1");
    assert_eq!(create["project_id"], project.as_str());
    assert_eq!(
        create["actor_user_id"],
        s.get("/v1/me", &owner).await.body["id"]
    );
    assert!(create["occurred_at"].is_string());

    let by_project = s
        .get(&format!("/v1/audit-events?project_id={project}"), &owner)
        .await;
    assert_eq!(by_project.body["items"].as_array().unwrap().len(), 3);
    // Others see neither the project's events nor the owner's.
    s.get(&format!("/v1/audit-events?project_id={project}"), &other)
        .await
        .assert_problem(404, "not_found");
    let theirs = s.get("/v1/audit-events", &other).await;
    assert!(
        theirs.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["action"] == "session.login")
    );
    // The administrator sees everything, including user creation.
    let all = s.get("/v1/audit-events?limit=200", ADMIN_TOKEN).await;
    let all_actions: Vec<&str> = all.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(all_actions.contains(&"user.create") && all_actions.contains(&"project.update"));
}
