//! Tenant limits (`--limit NAME=N`): each create that a limit bounds is refused one past it
//! with 409 `limit_reached` naming the limit, deleting makes room again, and creates racing for
//! the last places cannot pass a limit together.

use futures::future::join_all;
use reqwest::Method;
use serde_json::{Value, json};

use crate::backend_tests;
use crate::support::{Backend, Reply, TestServer};

backend_tests!(
    each_limit_refuses_one_more_with_its_name,
    concurrent_creates_stay_within_their_limit
);

/// Asserts that `reply` is the refusal of `limit`.
#[track_caller]
fn refused_by(reply: &Reply, limit: &str) {
    reply.assert_problem(409, "limit_reached");
    let detail = reply.body["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("`{limit}`")), "{detail}");
}

/// Two creates at `path` with `body(0)` and `body(1)` succeed, the third is refused by `limit`
/// (set to 2).
async fn creates_refused_past_two(
    s: &TestServer,
    path: &str,
    token: &str,
    limit: &str,
    body: impl Fn(usize) -> serde_json::Value,
) {
    for n in 0..2 {
        s.post(path, token, body(n)).await.assert_status(201);
    }
    refused_by(&s.post(path, token, body(2)).await, limit);
}

async fn each_limit_refuses_one_more_with_its_name(backend: Backend) {
    let Some(s) = TestServer::start_with(backend, |settings| {
        settings
            .limits
            .set_all([
                "projects_per_user=2",
                "tokens_per_user=2",
                "environments_per_project=2",
                "services_per_project=2",
                "domains_per_project=2",
                "git_installations_per_project=2",
                "webhook_endpoints_per_project=2",
                "invitations_per_project=2",
                "members_per_project=3",
            ])
            .unwrap();
    })
    .await
    else {
        return;
    };
    let owner = s.user_with_session("limits-owner@example.com").await;

    // Projects per user: those it owns.
    let project = s.project_create(&owner, "one").await;
    let second = s.project_create(&owner, "two").await;
    refused_by(
        &s.post("/v1/projects", &owner, json!({ "name": "three" }))
            .await,
        "projects_per_user",
    );
    s.delete(&format!("/v1/projects/{second}"), &owner)
        .await
        .assert_status(204);
    let second = s.project_create(&owner, "two again").await;
    refused_by(
        &s.post("/v1/projects", &owner, json!({ "name": "three" }))
            .await,
        "projects_per_user",
    );
    // Another user's count is their own.
    let other = s.user_with_session("limits-other@example.com").await;
    s.project_create(&other, "theirs").await;

    // Tokens per user: the live ones.
    let token = json!({ "name": "ci", "scopes": ["read"] });
    let first = s.post("/v1/tokens", &owner, token.clone()).await;
    let first = first.assert_status(201)["id"].as_str().unwrap().to_owned();
    s.post("/v1/tokens", &owner, token.clone())
        .await
        .assert_status(201);
    refused_by(
        &s.post("/v1/tokens", &owner, token.clone()).await,
        "tokens_per_user",
    );
    s.delete(&format!("/v1/tokens/{first}"), &owner)
        .await
        .assert_status(204);
    s.post("/v1/tokens", &owner, token.clone())
        .await
        .assert_status(201);

    // Per project: environments, services, domains, git installations, webhook endpoints.
    let environment = s.environment_create(&owner, &project, "production").await;
    s.environment_create(&owner, &project, "staging").await;
    refused_by(
        &s.post(
            &format!("/v1/projects/{project}/environments"),
            &owner,
            json!({ "name": "preview" }),
        )
        .await,
        "environments_per_project",
    );
    let service = |name: &str| {
        json!({
            "name": name, "environment_id": environment, "port": 8080,
            "source": { "type": "artifact", "image": "shop/web:1" },
        })
    };
    let web = s
        .service_create(&owner, &project, &environment, service("web"))
        .await;
    s.service_create(&owner, &project, &environment, service("api"))
        .await;
    refused_by(
        &s.post(
            &format!("/v1/projects/{project}/services"),
            &owner,
            service("worker"),
        )
        .await,
        "services_per_project",
    );
    creates_refused_past_two(
        &s,
        &format!("/v1/projects/{project}/domains"),
        &owner,
        "domains_per_project",
        |n| json!({ "hostname": format!("shop{n}.example.com"), "service_id": web }),
    )
    .await;
    creates_refused_past_two(
        &s,
        &format!("/v1/projects/{project}/git-installations"),
        &owner,
        "git_installations_per_project",
        |n| json!({ "bindings": [{ "repository": format!("acme/r{n}"), "branch": "main", "service_id": web }] }),
    )
    .await;
    creates_refused_past_two(
        &s,
        &format!("/v1/projects/{project}/webhooks"),
        &owner,
        "webhook_endpoints_per_project",
        |n| json!({ "url": format!("http://127.0.0.1:9/hook-{n}") }),
    )
    .await;

    // Pending invitations, and members (the owner is one of the 3).
    let mut sessions = Vec::new();
    for name in ["ana", "ben", "cy", "di"] {
        let email = format!("{name}@example.com");
        s.user_create(&email).await;
        sessions.push(
            s.login(&email).await["access_token"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let accept = async |invitation: &str, session: &str| {
        let path = format!("/v1/me/invitations/{invitation}/accept");
        s.call(Method::POST, &path, Some(session), None).await
    };
    let ana = s
        .invite(&owner, &project, "ana@example.com", "viewer")
        .await;
    let ben = s
        .invite(&owner, &project, "ben@example.com", "viewer")
        .await;
    let invitations = format!("/v1/projects/{project}/invitations");
    refused_by(
        &s.post(
            &invitations,
            &owner,
            json!({ "email": "cy@example.com", "role": "viewer" }),
        )
        .await,
        "invitations_per_project",
    );
    accept(&ana, &sessions[0]).await.assert_status(201);
    let cy = s.invite(&owner, &project, "cy@example.com", "viewer").await;
    accept(&ben, &sessions[1]).await.assert_status(201);
    // The project is full: the pending invitation cannot be accepted, and no more are made.
    refused_by(&accept(&cy, &sessions[2]).await, "members_per_project");
    refused_by(
        &s.post(
            &invitations,
            &owner,
            json!({ "email": "di@example.com", "role": "viewer" }),
        )
        .await,
        "members_per_project",
    );
    // The second project has room of its own.
    s.environment_create(&owner, &second, "production").await;

    // What each cap allows and what is held, as users read them before a create is refused.
    let held = |view: &Value, name: &str| {
        let limits = view["limits"].as_array().unwrap();
        let limit = limits
            .iter()
            .find(|limit| limit["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {view}"));
        (
            limit["used"].as_u64().unwrap(),
            limit["max"].as_u64().unwrap(),
        )
    };
    let mine = s.get("/v1/me/limits", &owner).await;
    let mine = mine.assert_status(200).clone();
    assert_eq!(mine["limits"].as_array().unwrap().len(), 2, "{mine}");
    assert_eq!(held(&mine, "projects_per_user"), (2, 2));
    assert_eq!(held(&mine, "tokens_per_user"), (2, 2));
    let limits = format!("/v1/projects/{project}/limits");
    let project_held = s.get(&limits, &owner).await;
    let project_held = project_held.assert_status(200).clone();
    for (name, used, max) in [
        ("environments_per_project", 2, 2),
        ("services_per_project", 2, 2),
        ("domains_per_project", 2, 2),
        ("git_installations_per_project", 2, 2),
        ("webhook_endpoints_per_project", 2, 2),
        ("invitations_per_project", 1, 2),
        ("members_per_project", 3, 3),
    ] {
        assert_eq!(held(&project_held, name), (used, max), "{name}");
    }
    // A token without `read` (deploy only) reads neither.
    let deploy_only = s
        .post(
            "/v1/tokens",
            &other,
            json!({ "name": "ci", "scopes": ["deploy"] }),
        )
        .await;
    let deploy_only = deploy_only.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    s.get("/v1/me/limits", &deploy_only)
        .await
        .assert_problem(403, "insufficient_scope");
    // A member (a viewer) reads them; another tenant cannot tell the project exists.
    s.get(&limits, &sessions[0]).await.assert_status(200);
    s.get(&limits, &other)
        .await
        .assert_problem(404, "not_found");
}

async fn concurrent_creates_stay_within_their_limit(backend: Backend) {
    let Some(s) = TestServer::start_with(backend, |settings| {
        settings
            .limits
            .set_all(["environments_per_project=3", "tokens_per_user=3"])
            .unwrap();
    })
    .await
    else {
        return;
    };
    let owner = s.user_with_session("racing-owner@example.com").await;
    let project = s.project_create(&owner, "racing").await;
    let path = format!("/v1/projects/{project}/environments");
    let environments = join_all((0..10).map(|n| {
        let (s, path, owner) = (&s, &path, &owner);
        async move {
            s.post(path, owner, json!({ "name": format!("env-{n}") }))
                .await
        }
    }))
    .await;
    let tokens = join_all((0..10).map(|n| {
        let (s, owner) = (&s, &owner);
        async move {
            s.post(
                "/v1/tokens",
                owner,
                json!({ "name": format!("t-{n}"), "scopes": ["read"] }),
            )
            .await
        }
    }))
    .await;
    for (replies, limit) in [
        (environments, "environments_per_project"),
        (tokens, "tokens_per_user"),
    ] {
        let made = replies.iter().filter(|reply| reply.status == 201).count();
        assert_eq!(
            made,
            3,
            "{limit}: {:?}",
            replies.iter().map(|r| r.status).collect::<Vec<_>>()
        );
        for reply in replies.iter().filter(|reply| reply.status != 201) {
            refused_by(reply, limit);
        }
    }
}
