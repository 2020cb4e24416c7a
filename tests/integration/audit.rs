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

    // Newest first, paged: the pages hold the same events, the other way round.
    let mut newest_first = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = s
            .get(
                &format!("/v1/audit-events?order=desc&limit=2{cursor}"),
                &owner,
            )
            .await;
        let page = page.assert_status(200).clone();
        newest_first.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["action"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    newest_first.reverse();
    assert_eq!(newest_first, actions);

    // Filters: by action, by kind of resource, by actor; a caller's filters never widen what
    // they may read.
    let filtered = |query: &'static str| {
        let s = &s;
        let owner = owner.clone();
        async move {
            let reply = s.get(&format!("/v1/audit-events?{query}"), &owner).await;
            reply.assert_status(200)["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["action"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(filtered("action=project.update").await, ["project.update"]);
    assert_eq!(
        filtered("resource_type=project&order=desc").await,
        ["project.update", "project.create"]
    );
    let other_id = s.get("/v1/me", &other).await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let widened = s
        .get(
            &format!("/v1/audit-events?actor_user_id={other_id}"),
            &owner,
        )
        .await;
    assert_eq!(widened.assert_status(200)["items"], json!([]));
    let by_admin = s
        .get(
            &format!("/v1/audit-events?actor_user_id={other_id}"),
            ADMIN_TOKEN,
        )
        .await;
    let by_admin = by_admin.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!by_admin.is_empty());
    assert!(
        by_admin
            .iter()
            .all(|e| e["actor_user_id"] == other_id.as_str())
    );
    for bad in [
        "order=newest",
        "limit=0",
        "limit=201",
        "action=",
        "cursor=not-a-cursor",
    ] {
        let refused = s.get(&format!("/v1/audit-events?{bad}"), &owner).await;
        assert_eq!(refused.status, 400, "{bad}: {}", refused.text);
    }
    let long = "x".repeat(101);
    s.get(&format!("/v1/audit-events?action={long}"), &owner)
        .await
        .assert_problem(400, "invalid_query");
}
