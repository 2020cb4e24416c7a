//! Project members: invitations (the same answer whether or not an account has the email),
//! accepting and declining, role changes, and the rules that keep a project owned.

use reqwest::Method;
use serde_json::json;

use crate::db_tests;
use crate::support::TestServer;

db_tests!(
    members_roles_and_last_owner,
    invitations_do_not_tell_which_emails_have_accounts
);

async fn accept(s: &TestServer, token: &str, invitation: &str) -> crate::support::Reply {
    s.call(
        Method::POST,
        &format!("/v1/me/invitations/{invitation}/accept"),
        Some(token),
        None,
    )
    .await
}

async fn members_roles_and_last_owner(s: TestServer) {
    let owner = s.user_with_session("own@example.com").await;
    let admin = s.user_with_session("adm@example.com").await;
    let viewer_id = s.user_create("view@example.com").await;
    let project = s.project_create(&owner, "p").await;
    let base = format!("/v1/projects/{project}/members");
    let invitations = format!("/v1/projects/{project}/invitations");

    // Invite with a narrower role; the invitee sees it and accepts.
    let invitation = s.invite(&owner, &project, "adm@example.com", "admin").await;
    s.post(
        &invitations,
        &owner,
        json!({ "email": "adm@example.com", "role": "viewer" }),
    )
    .await
    .assert_problem(409, "already_invited");
    let mine = s.get("/v1/me/invitations", &admin).await;
    assert_eq!(
        mine.assert_status(200)["items"][0]["id"],
        invitation.as_str()
    );
    assert_eq!(mine.body["items"][0]["role"], "admin");
    assert_eq!(mine.body["items"][0]["project_name"], "p");
    let pending = s.get(&invitations, &owner).await;
    assert_eq!(pending.assert_status(200)["items"][0]["project_name"], "p");
    // Nobody else can accept it, not even the project's owner.
    accept(&s, &owner, &invitation)
        .await
        .assert_problem(404, "not_found");
    let added = accept(&s, &admin, &invitation).await;
    assert_eq!(added.assert_status(201)["role"], "admin");
    accept(&s, &admin, &invitation)
        .await
        .assert_problem(404, "not_found");
    s.post(
        &invitations,
        &owner,
        json!({ "email": "adm@example.com", "role": "viewer" }),
    )
    .await
    .assert_problem(409, "already_member");
    s.post(
        &invitations,
        &owner,
        json!({ "email": "view@example.com", "role": "superuser" }),
    )
    .await
    .assert_problem(422, "invalid_body");
    s.post(
        &invitations,
        &owner,
        json!({ "email": "not an email", "role": "viewer" }),
    )
    .await
    .assert_problem(422, "invalid_request");

    // An admin manages members below owner, but cannot invite or touch owners.
    s.post(
        &invitations,
        &admin,
        json!({ "email": "view@example.com", "role": "owner" }),
    )
    .await
    .assert_problem(403, "forbidden");
    let viewer = s.login("view@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let invitation = s
        .invite(&admin, &project, "view@example.com", "viewer")
        .await;
    accept(&s, &viewer, &invitation).await.assert_status(201);
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
    s.delete(&format!("{base}/{viewer_id}"), &viewer)
        .await
        .assert_status(204);
    s.get(&format!("/v1/projects/{project}"), &viewer)
        .await
        .assert_problem(404, "not_found");

    // Declining removes the invitation; a withdrawn one cannot be accepted.
    let declined = s
        .invite(&owner, &project, "view@example.com", "viewer")
        .await;
    s.delete(&format!("/v1/me/invitations/{declined}"), &viewer)
        .await
        .assert_status(204);
    let withdrawn = s
        .invite(&owner, &project, "view@example.com", "viewer")
        .await;
    s.delete(&format!("{invitations}/{withdrawn}"), &owner)
        .await
        .assert_status(204);
    accept(&s, &viewer, &withdrawn)
        .await
        .assert_problem(404, "not_found");
    let audit = s
        .get(&format!("/v1/audit-events?project_id={project}"), &owner)
        .await;
    let actions: Vec<&str> = audit.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for action in [
        "invitation.create",
        "invitation.accept",
        "invitation.decline",
        "invitation.revoke",
    ] {
        assert!(actions.contains(&action), "{action} not in {actions:?}");
    }
}

/// An administrator of one tenant invites an email that has an account and one that has
/// none: the two answers differ only in the invitation's id, email and dates.
async fn invitations_do_not_tell_which_emails_have_accounts(s: TestServer) {
    let owner = s.user_with_session("tenant-owner@example.com").await;
    s.user_create("exists@example.com").await;
    let project = s.project_create(&owner, "p").await;
    let path = format!("/v1/projects/{project}/invitations");
    let existing = s
        .post(
            &path,
            &owner,
            json!({ "email": "exists@example.com", "role": "viewer" }),
        )
        .await;
    let missing = s
        .post(
            &path,
            &owner,
            json!({ "email": "nobody@example.com", "role": "viewer" }),
        )
        .await;
    assert_eq!(existing.status, 201);
    assert_eq!(missing.status, existing.status);
    let shape = |reply: &crate::support::Reply| {
        let mut body = reply.body.clone();
        for field in ["id", "email", "created_at", "expires_at"] {
            body.as_object_mut().unwrap().remove(field);
        }
        body
    };
    assert_eq!(shape(&existing), shape(&missing));
    let header_names = |reply: &crate::support::Reply| {
        let mut names: Vec<String> = reply
            .headers
            .keys()
            .map(|name| name.to_string())
            .filter(|name| {
                !["date", "x-request-id", "location", "content-length"].contains(&name.as_str())
            })
            .collect();
        names.sort();
        names
    };
    assert_eq!(header_names(&existing), header_names(&missing));
    // The invitation to the email without an account waits for one to exist.
    s.user_create("nobody@example.com").await;
    let nobody = s.login("nobody@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let mine = s.get("/v1/me/invitations", &nobody).await;
    assert_eq!(
        mine.assert_status(200)["items"][0]["project_id"],
        project.as_str()
    );
}
