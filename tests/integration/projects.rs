//! Projects: lifecycle, visibility (404 for non-members), roles (403), ETags and concurrent
//! updates, pagination.

use reqwest::Method;
use serde_json::json;

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, TestServer};

db_tests!(
    project_lifecycle,
    projects_are_visible_to_members_only,
    roles_limit_what_members_may_do,
    if_match_guards_updates,
    concurrent_conflicting_updates_one_gets_412,
    lists_are_paginated_with_cursors,
);

async fn project_lifecycle(s: TestServer) {
    let token = s.user_with_session("owner@example.com").await;
    let created = s
        .post(
            "/v1/projects",
            &token,
            json!({ "name": " Shop ", "description": "the shop" }),
        )
        .await;
    let body = created.assert_status(201).clone();
    assert_eq!(body["name"], "Shop");
    let id = body["id"].as_str().unwrap();
    assert_eq!(
        created.header("location"),
        Some(format!("/v1/projects/{id}").as_str())
    );
    assert_eq!(created.header("etag"), Some("\"r1\""));

    let listed = s.get("/v1/projects", &token).await;
    assert_eq!(
        listed.assert_status(200)["items"].as_array().unwrap().len(),
        1
    );
    let viewed = s.get(&format!("/v1/projects/{id}"), &token).await;
    assert_eq!(viewed.assert_status(200)["description"], "the shop");

    let updated = s
        .patch(
            &format!("/v1/projects/{id}"),
            &token,
            json!({ "description": "new" }),
        )
        .await;
    assert_eq!(updated.assert_status(200)["description"], "new");
    assert_eq!(updated.header("etag"), Some("\"r2\""));
    assert_eq!(updated.body["name"], "Shop");

    s.delete(&format!("/v1/projects/{id}"), &token)
        .await
        .assert_status(204);
    s.get(&format!("/v1/projects/{id}"), &token)
        .await
        .assert_problem(404, "not_found");
    s.post("/v1/projects", &token, json!({ "name": "" }))
        .await
        .assert_problem(422, "invalid_request");
    s.post("/v1/projects", &token, json!({ "name": "x".repeat(101) }))
        .await
        .assert_problem(422, "invalid_request");
}

async fn projects_are_visible_to_members_only(s: TestServer) {
    let alice = s.user_with_session("alice@example.com").await;
    let mallory = s.user_with_session("mallory@example.com").await;
    let id = s.project_create(&alice, "alice's").await;
    let path = format!("/v1/projects/{id}");
    // Mallory cannot learn that the project exists: the same 404 as for a random id.
    let hidden = s.get(&path, &mallory).await;
    hidden.assert_problem(404, "not_found");
    let random = s
        .get(&format!("/v1/projects/{}", uuid::Uuid::now_v7()), &mallory)
        .await;
    assert_eq!(hidden.body["detail"], random.body["detail"]);
    s.patch(&path, &mallory, json!({ "name": "pwned" }))
        .await
        .assert_problem(404, "not_found");
    s.delete(&path, &mallory)
        .await
        .assert_problem(404, "not_found");
    s.get(&format!("{path}/services"), &mallory)
        .await
        .assert_problem(404, "not_found");
    assert_eq!(
        s.get("/v1/projects", &mallory).await.body["items"],
        json!([])
    );
    // The administrator sees everything.
    s.get(&path, ADMIN_TOKEN).await.assert_status(200);
    assert_eq!(
        s.get("/v1/projects", ADMIN_TOKEN).await.body["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

async fn roles_limit_what_members_may_do(s: TestServer) {
    let owner = s.user_with_session("o@example.com").await;
    let viewer = s.user_with_session("v@example.com").await;
    let member = s.user_with_session("m@example.com").await;
    let id = s.project_create(&owner, "p").await;
    s.member_add(&id, "v@example.com", "viewer").await;
    s.member_add(&id, "m@example.com", "member").await;
    let path = format!("/v1/projects/{id}");

    s.get(&path, &viewer).await.assert_status(200);
    s.patch(&path, &viewer, json!({ "name": "x" }))
        .await
        .assert_problem(403, "forbidden");
    s.post(
        &format!("{path}/environments"),
        &viewer,
        json!({ "name": "prod" }),
    )
    .await
    .assert_problem(403, "forbidden");
    s.post(
        &format!("{path}/environments"),
        &member,
        json!({ "name": "prod" }),
    )
    .await
    .assert_status(201);
    s.patch(&path, &member, json!({ "name": "x" }))
        .await
        .assert_problem(403, "forbidden");
    s.delete(&path, &member)
        .await
        .assert_problem(403, "forbidden");
    s.patch(&path, &owner, json!({ "name": "renamed" }))
        .await
        .assert_status(200);
}

async fn if_match_guards_updates(s: TestServer) {
    let token = s.user_with_session("e@example.com").await;
    let id = s.project_create(&token, "p").await;
    let path = format!("/v1/projects/{id}");
    let etag = s
        .get(&path, &token)
        .await
        .header("etag")
        .unwrap()
        .to_owned();

    // A read with the current ETag is answered 304 without a body.
    let cached = TestServer::send(
        s.request(Method::GET, &path, Some(&token))
            .header("if-none-match", &etag),
    )
    .await;
    assert_eq!(cached.status, 304);
    assert!(cached.text.is_empty());

    let first = TestServer::send(
        s.request(Method::PATCH, &path, Some(&token))
            .header("if-match", &etag)
            .json(&json!({ "name": "a" })),
    )
    .await;
    first.assert_status(200);
    let stale = TestServer::send(
        s.request(Method::PATCH, &path, Some(&token))
            .header("if-match", &etag)
            .json(&json!({ "name": "b" })),
    )
    .await;
    stale.assert_problem(412, "precondition_failed");
    let stale_delete = TestServer::send(
        s.request(Method::DELETE, &path, Some(&token))
            .header("if-match", &etag),
    )
    .await;
    stale_delete.assert_problem(412, "precondition_failed");
    assert_eq!(
        s.get(&path, &token).await.body["name"],
        "a",
        "the refused update changed nothing"
    );
    let star = TestServer::send(
        s.request(Method::PATCH, &path, Some(&token))
            .header("if-match", "*")
            .json(&json!({ "name": "c" })),
    )
    .await;
    star.assert_status(200);
}

async fn concurrent_conflicting_updates_one_gets_412(s: TestServer) {
    let token = s.user_with_session("c@example.com").await;
    let id = s.project_create(&token, "p").await;
    let path = format!("/v1/projects/{id}");
    for round in 0..5 {
        let etag = s
            .get(&path, &token)
            .await
            .header("etag")
            .unwrap()
            .to_owned();
        let update = |name: String| {
            TestServer::send(
                s.request(Method::PATCH, &path, Some(&token))
                    .header("if-match", &etag)
                    .json(&json!({ "name": name })),
            )
        };
        let (a, b) = tokio::join!(update(format!("a{round}")), update(format!("b{round}")));
        let mut statuses = [a.status, b.status];
        statuses.sort();
        assert_eq!(
            statuses,
            [200, 412],
            "round {round}: {} / {}",
            a.text,
            b.text
        );
        let winner = if a.status == 200 { &a } else { &b };
        assert_eq!(s.get(&path, &token).await.body["name"], winner.body["name"]);
    }
}

async fn lists_are_paginated_with_cursors(s: TestServer) {
    let token = s.user_with_session("pg@example.com").await;
    let mut created = Vec::new();
    for i in 0..7 {
        created.push(s.project_create(&token, &format!("p{i}")).await);
    }
    let mut seen = Vec::new();
    let mut path = "/v1/projects?limit=3".to_owned();
    loop {
        let page = s.get(&path, &token).await;
        let body = page.assert_status(200);
        let items = body["items"].as_array().unwrap();
        assert!(items.len() <= 3);
        seen.extend(items.iter().map(|p| p["id"].as_str().unwrap().to_owned()));
        match body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/projects?limit=3&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, created, "every project once, in creation order");
    s.get("/v1/projects?limit=0", &token)
        .await
        .assert_problem(400, "invalid_query");
    s.get("/v1/projects?limit=1000", &token)
        .await
        .assert_problem(400, "invalid_query");
    s.get("/v1/projects?cursor=not-a-cursor", &token)
        .await
        .assert_problem(400, "invalid_cursor");
    s.get("/v1/projects?limit=abc", &token)
        .await
        .assert_problem(400, "invalid_query");
    s.get("/v1/projects?color=blue", &token)
        .await
        .assert_problem(400, "invalid_query");
}
