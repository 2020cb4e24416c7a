//! Terms of service: publishing, the must-accept question, accepting, and re-acceptance of a
//! new version.

use serde_json::json;

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, TestServer};

db_tests!(terms_publish_and_accept);

async fn terms_publish_and_accept(s: TestServer) {
    let user = s.user_with_session("tos@example.com").await;
    let none = s.get("/v1/me/terms", &user).await;
    assert_eq!(none.assert_status(200)["must_accept"], false);

    let v1 = json!({ "version": "2026-01", "url": "https://example.com/terms/2026-01", "summary": "first" });
    s.post("/v1/terms", &user, v1.clone())
        .await
        .assert_problem(403, "forbidden");
    s.post("/v1/terms", ADMIN_TOKEN, v1.clone())
        .await
        .assert_status(201);
    s.post("/v1/terms", ADMIN_TOKEN, v1.clone())
        .await
        .assert_problem(409, "version_exists");
    s.post(
        "/v1/terms",
        ADMIN_TOKEN,
        json!({ "version": "x", "url": "ftp://x" }),
    )
    .await
    .assert_problem(422, "invalid_request");

    let status = s.get("/v1/me/terms", &user).await;
    assert_eq!(status.body["must_accept"], true);
    assert_eq!(status.body["current"]["version"], "2026-01");

    s.post(
        "/v1/me/terms/acceptances",
        &user,
        json!({ "version": "2025-01" }),
    )
    .await
    .assert_problem(422, "invalid_request");
    let accepted = s
        .post(
            "/v1/me/terms/acceptances",
            &user,
            json!({ "version": "2026-01" }),
        )
        .await;
    let accepted = accepted.assert_status(201).clone();
    let again = s
        .post(
            "/v1/me/terms/acceptances",
            &user,
            json!({ "version": "2026-01" }),
        )
        .await;
    assert_eq!(
        again.assert_status(200)["id"],
        accepted["id"],
        "accepting twice keeps the first acceptance"
    );
    let status = s.get("/v1/me/terms", &user).await;
    assert_eq!(status.body["must_accept"], false);
    assert_eq!(status.body["accepted_at"], accepted["accepted_at"]);

    // A new version must be accepted again; the old acceptance is kept.
    s.post(
        "/v1/terms",
        ADMIN_TOKEN,
        json!({ "version": "2026-06", "url": "https://example.com/terms/2026-06" }),
    )
    .await
    .assert_status(201);
    assert_eq!(s.get("/v1/me/terms", &user).await.body["must_accept"], true);
    s.post(
        "/v1/me/terms/acceptances",
        &user,
        json!({ "version": "2026-06" }),
    )
    .await
    .assert_status(201);
    let history = s.get("/v1/me/terms/acceptances", &user).await;
    let versions: Vec<&str> = history.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["2026-01", "2026-06"]);
    assert_eq!(
        s.get("/v1/terms", &user).await.body["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}
