//! Project members: adding by email, role changes, and the rules that keep a project owned.

use serde_json::json;

use crate::db_tests;
use crate::support::TestServer;

db_tests!(members_roles_and_last_owner);

async fn members_roles_and_last_owner(s: TestServer) {
    let owner = s.user_with_session("own@example.com").await;
    let admin = s.user_with_session("adm@example.com").await;
    let viewer_id = s.user_create("view@example.com").await;
    let project = s.project_create(&owner, "p").await;
    let base = format!("/v1/projects/{project}/members");

    // Invite a member with a narrower role.
    let added = s
        .post(
            &base,
            &owner,
            json!({ "email": "adm@example.com", "role": "admin" }),
        )
        .await;
    assert_eq!(added.assert_status(201)["role"], "admin");
    s.post(
        &base,
        &owner,
        json!({ "email": "adm@example.com", "role": "viewer" }),
    )
    .await
    .assert_problem(409, "already_member");
    s.post(
        &base,
        &owner,
        json!({ "email": "ghost@example.com", "role": "viewer" }),
    )
    .await
    .assert_problem(422, "invalid_request");
    s.post(
        &base,
        &owner,
        json!({ "email": "view@example.com", "role": "superuser" }),
    )
    .await
    .assert_problem(422, "invalid_body");

    // An admin manages members below owner, but cannot create or touch owners.
    s.post(
        &base,
        &admin,
        json!({ "email": "view@example.com", "role": "owner" }),
    )
    .await
    .assert_problem(403, "forbidden");
    s.post(
        &base,
        &admin,
        json!({ "email": "view@example.com", "role": "viewer" }),
    )
    .await
    .assert_status(201);
    let owner_id = s.get("/v1/me", &owner).await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.patch(
        &format!("{base}/{owner_id}"),
        &admin,
        json!({ "role": "viewer" }),
    )
    .await
    .assert_problem(403, "forbidden");
    s.patch(
        &format!("{base}/{viewer_id}"),
        &admin,
        json!({ "role": "member" }),
    )
    .await
    .assert_status(200);

    let listed = s.get(&base, &admin).await;
    let roles: Vec<&str> = listed.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["owner", "admin", "member"]);

    // The last owner can neither leave nor be demoted.
    s.delete(&format!("{base}/{owner_id}"), &owner)
        .await
        .assert_problem(409, "last_owner");
    s.patch(
        &format!("{base}/{owner_id}"),
        &owner,
        json!({ "role": "admin" }),
    )
    .await
    .assert_problem(409, "last_owner");

    // A member may leave on their own.
    let viewer = s.login("view@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.delete(&format!("{base}/{viewer_id}"), &viewer)
        .await
        .assert_status(204);
    s.get(&format!("/v1/projects/{project}"), &viewer)
        .await
        .assert_problem(404, "not_found");
}
