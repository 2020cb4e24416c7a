//! Git intake: a project installs GitHub's push webhook, and pushes to a bound branch deploy
//! the bound service, exactly once. Signatures (valid, wrong, missing, a tampered body, an
//! unknown installation, a rotated secret), replays (the same delivery, the same body under a
//! fresh id, a stale push), the forge's other events and content types, bodies too large,
//! roles and other tenants; exactly once across a SIGKILL of the real binary with
//! deliveries queued and being drained; and commit statuses sent back to the forge simulator
//! within its primary and secondary rate limits, retried after its 5xx, and never to an
//! address a project's outbound calls may not reach.

use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::deployments::deployment_wait;
use crate::support::{
    ADMIN_TOKEN, Backend, ChildServer, ProjectWithService, TestServer, database_fresh, eventually,
    platform,
};
use crate::{backend_tests, db_tests};

backend_tests!(
    pushes_deploy_once_and_forgeries_are_refused,
    pushes_survive_a_sigkill_and_deploy_exactly_once,
    commit_statuses_stay_within_the_forges_limits
);

db_tests!(a_deployment_deploys_one_commit_and_a_rollback_the_one_before);

/// A push deploys its own commit: the image names it, the provider is given that image; a
/// deployment by hand deploys the latest pushed commit or the one given; a rollback deploys
/// its target's commit again. An image that names a commit with none to fill in is refused,
/// as are unknown placeholders and commits that are not full commit ids.
async fn a_deployment_deploys_one_commit_and_a_rollback_the_one_before(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let made = s
        .project_with_service_of(
            "revisions",
            json!({
                "name": "web",
                "source": { "type": "artifact", "image": "ghcr.io/acme/web:{branch}-{short_commit}" },
                "port": 8080,
                "placement": { "providers": [{ "name": "gcp" }] },
                "health_check": { "interval_ms": 200, "start_timeout_secs": 30 },
            }),
        )
        .await;
    let (owner, project, service_id) = (made.owner, made.id, made.service);
    let service = format!("/v1/projects/{project}/services/{service_id}");
    let deployments = format!("{service}/deployments");
    let image = |n: u32| format!("ghcr.io/acme/web:main-{}", &sha(n)[..7]);
    let deploy = async |query: &str| {
        s.call(
            Method::POST,
            &format!("{deployments}{query}"),
            Some(&owner),
            None,
        )
        .await
    };

    // Unknown placeholders are refused when the spec is written.
    for bad in ["acme/web:{sha}", "acme/web:{commit", "acme/web:commit}"] {
        s.patch(
            &service,
            &owner,
            json!({ "source": { "type": "artifact", "image": bad } }),
        )
        .await
        .assert_problem(422, "invalid_request");
    }
    // Nothing pushed yet, no commit given: nothing to fill the image in with.
    deploy("").await.assert_problem(409, "no_commit");
    for bad in ["abc1234".to_owned(), "A".repeat(40), format!("{}0", sha(1))] {
        deploy(&format!("?commit={bad}"))
            .await
            .assert_problem(422, "invalid_request");
    }
    deploy(&format!("?commit={}&extra=1", sha(1)))
        .await
        .assert_problem(400, "invalid_query");
    // Another tenant cannot deploy it, commit or not.
    let other = s.project_with_service("other").await;
    let at_commit = format!("{deployments}?commit={}", sha(1));
    s.call(Method::POST, &at_commit, Some(&other.owner), None)
        .await
        .assert_problem(404, "not_found");

    let created = s
        .post(
            &format!("/v1/projects/{project}/git-installations"),
            &owner,
            json!({ "bindings": [{ "repository": "acme/web", "branch": "main", "service_id": service_id }] }),
        )
        .await;
    let created = created.assert_status(201).clone();
    let installation = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let running = async |n: u32| {
        eventually(&format!("gcp runs only {}", image(n)), async || {
            let artifacts = platform.gcp.instance_metadata("bulkhead-artifact");
            let commits = platform
                .gcp
                .instance_metadata("bulkhead-env-BULKHEAD_GIT_COMMIT");
            !artifacts.is_empty()
                && artifacts.iter().all(|a| *a == image(n))
                && commits.len() == artifacts.len()
                && commits.iter().all(|c| *c == sha(n))
        })
        .await;
    };
    let list = async || {
        let page = s.get(&format!("{deployments}?order=desc"), &owner).await;
        page.assert_status(200)["items"].as_array().unwrap().clone()
    };

    // Two pushes: each deploys its own commit, and the provider is given its image.
    for n in [1, 2] {
        let event = push_event("Acme/Web", "refs/heads/main", &sha(n), now() + i64::from(n));
        let (status, _) = push(&s, &installation, &secret, &format!("p-{n}"), event).await;
        assert_eq!(status, 202);
        eventually("the push deploys", async || {
            list().await.len() == n as usize
        })
        .await;
        let made = list().await[0].clone();
        assert_eq!(made["revision"]["commit"], sha(n), "{made}");
        assert_eq!(made["revision"]["branch"], "main");
        assert_eq!(made["image"], image(n));
        assert_eq!(
            made["spec"]["source"]["image"],
            "ghcr.io/acme/web:{branch}-{short_commit}"
        );
        deployment_wait(
            &s,
            &service,
            made["id"].as_str().unwrap(),
            "healthy",
            Duration::from_secs(60),
        )
        .await;
        running(n).await;
    }

    // By hand: the latest pushed commit, then one given (on the service's one branch).
    let latest = deploy("").await.assert_status(201).clone();
    assert_eq!(latest["revision"]["commit"], sha(2), "{latest}");
    assert_eq!(latest["image"], image(2));
    let events = s
        .get(
            &format!("{deployments}/{}/events", latest["id"].as_str().unwrap()),
            &owner,
        )
        .await;
    let queued = &events.assert_status(200)["items"][0];
    assert!(
        queued["message"]
            .as_str()
            .unwrap()
            .contains(&format!("commit {} of `main`", &sha(2)[..7])),
        "{queued}"
    );
    let given = deploy(&format!("?commit={}", sha(3)))
        .await
        .assert_status(201)
        .clone();
    assert_eq!(given["revision"]["commit"], sha(3));
    assert_eq!(given["revision"]["branch"], "main");
    let given_id = given["id"].as_str().unwrap().to_owned();
    deployment_wait(&s, &service, &given_id, "healthy", Duration::from_secs(60)).await;
    running(3).await;

    // A rollback from it runs the commit before it again, whatever was pushed since.
    let rollback = s
        .call(
            Method::POST,
            &format!("{deployments}/{given_id}/rollback"),
            Some(&owner),
            None,
        )
        .await;
    let rollback = rollback.assert_status(201).clone();
    assert_eq!(rollback["revision"]["commit"], sha(2), "{rollback}");
    assert_eq!(rollback["image"], image(2));
    deployment_wait(
        &s,
        &service,
        rollback["id"].as_str().unwrap(),
        "healthy",
        Duration::from_secs(60),
    )
    .await;
    running(2).await;
}

/// A commit id whose digits are all `n`'s (so that its short form tells it apart too).
fn sha(n: u32) -> String {
    format!("{n:x}").repeat(40)[..40].to_owned()
}

/// `X-Hub-Signature-256` of `body` under `secret`, computed here as GitHub does.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A `push` event as GitHub sends it (the fields intake reads, and some it does not).
pub(crate) fn push_event(repository: &str, git_ref: &str, commit: &str, pushed_at: i64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "ref": git_ref,
        "before": "0".repeat(40),
        "after": commit,
        "created": false,
        "deleted": false,
        "forced": false,
        "repository": { "id": 1296269, "full_name": repository, "pushed_at": pushed_at, "private": true },
        "pusher": { "name": "octocat", "email": "octocat@example.com" },
        "head_commit": { "id": commit, "message": format!("Ship {commit}\n\nLonger text"), "timestamp": "2026-12-05T08:00:00Z" },
        "commits": [],
    }))
    .unwrap()
}

fn commit(n: u32) -> String {
    format!("{n:040x}")
}

pub(crate) fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Posts a delivery to `base`'s hook for `installation`.
pub(crate) async fn deliver(
    http: &reqwest::Client,
    base: &str,
    installation: &str,
    headers: &[(&str, &str)],
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let mut request = http
        .post(format!(
            "{base}/v1/hooks/github?installation={installation}"
        ))
        .header("content-type", content_type)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A push to `installation`, signed with `secret`, as delivery `id`.
pub(crate) async fn push(
    s: &TestServer,
    installation: &str,
    secret: &str,
    id: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let signed = signature(secret, &body);
    deliver(
        &s.http,
        &s.base,
        installation,
        &[
            ("x-github-event", "push"),
            ("x-github-delivery", id),
            ("x-hub-signature-256", &signed),
        ],
        "application/json",
        body,
    )
    .await
}

/// The deployments of a service, oldest first.
async fn deployments(s: &TestServer, project: &ProjectWithService) -> Vec<Value> {
    let list = s
        .get(
            &format!(
                "/v1/projects/{}/services/{}/deployments?limit=200",
                project.id, project.service
            ),
            &project.owner,
        )
        .await;
    list.assert_status(200)["items"].as_array().unwrap().clone()
}

async fn pushes_deploy_once_and_forgeries_are_refused(backend: Backend) {
    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    let shop = s.project_with_service("shop").await;
    let installations = format!("/v1/projects/{}/git-installations", shop.id);
    let binding =
        json!([{ "repository": "Acme/Shop", "branch": "main", "service_id": shop.service }]);

    // Who may install: admins and owners; not a member, not another tenant.
    let member = format!("member-{}@example.com", uuid::Uuid::new_v4().simple());
    s.user_create(&member).await;
    s.member_add(&shop.id, &member, "member").await;
    let member = s.login(&member).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post(&installations, &member, json!({ "bindings": binding }))
        .await
        .assert_problem(403, "forbidden");
    let other = s.project_with_service("other").await;
    s.post(&installations, &other.owner, json!({ "bindings": binding }))
        .await
        .assert_problem(404, "not_found");
    // Another tenant's service cannot be bound.
    s.post(
        &installations,
        &shop.owner,
        json!({ "bindings": [{ "repository": "acme/shop", "branch": "main", "service_id": other.service }] }),
    )
    .await
    .assert_problem(422, "invalid_request");
    for bad in [
        json!({ "bindings": [{ "repository": "acme", "branch": "main", "service_id": shop.service }] }),
        json!({ "bindings": [{ "repository": "acme/shop", "branch": "a..b", "service_id": shop.service }] }),
        json!({ "bindings": [{ "repository": "acme/shop", "branch": "main", "service_id": shop.service, "extra": 1 }] }),
    ] {
        let reply = s.post(&installations, &shop.owner, bad.clone()).await;
        assert!(
            matches!(reply.status, 400 | 422),
            "{bad}: {} {}",
            reply.status,
            reply.text
        );
    }

    let created = s
        .post(&installations, &shop.owner, json!({ "bindings": binding }))
        .await;
    let created = created.assert_status(201).clone();
    let installation = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert_eq!(
        created["hook_path"],
        format!("/v1/hooks/github?installation={installation}")
    );
    // The secret is shown once: not in reads, not in the audit log.
    let read = s
        .get(&format!("{installations}/{installation}"), &member)
        .await;
    assert!(!read.assert_status(200).to_string().contains(&secret));
    let audit = s.get("/v1/audit-events?limit=200", ADMIN_TOKEN).await;
    assert!(audit.text.contains("git_installation.create"));
    assert!(!audit.text.contains(&secret));

    // A push to the bound branch: 202 at once, then one deployment that says which push.
    let first = push_event("acme/shop", "refs/heads/main", &commit(1), now());
    let (status, receipt) = push(&s, &installation, &secret, "d-1", first.clone()).await;
    assert_eq!(
        (status, &receipt["outcome"]),
        (202, &json!("queued")),
        "{receipt}"
    );
    eventually("the push deploys", async || {
        deployments(&s, &shop).await.len() == 1
    })
    .await;
    let deployed = &deployments(&s, &shop).await[0];
    assert_eq!(deployed["push"]["commit"], commit(1));
    assert_eq!(deployed["push"]["branch"], "main");
    assert_eq!(deployed["push"]["message"], format!("Ship {}", commit(1)));
    assert_eq!(deployed["push"]["delivery_id"], receipt["delivery_id"]);

    // Replays do nothing: the same delivery, and the same body under a fresh id.
    for id in ["d-1", "d-1-replayed"] {
        let (status, again) = push(&s, &installation, &secret, id, first.clone()).await;
        assert_eq!(
            (status, &again["outcome"]),
            (200, &json!("duplicate")),
            "{again}"
        );
        assert_eq!(again["delivery_id"], receipt["delivery_id"]);
    }

    // Forgeries: a wrong secret, no signature, a tampered body, an unknown installation.
    let second = push_event("acme/shop", "refs/heads/main", &commit(2), now());
    let (status, problem) = push(&s, &installation, "not-the-secret", "d-2", second.clone()).await;
    assert_eq!(
        (status, &problem["code"]),
        (401, &json!("invalid_signature"))
    );
    let (status, _) = deliver(
        &s.http,
        &s.base,
        &installation,
        &[("x-github-event", "push"), ("x-github-delivery", "d-2")],
        "application/json",
        second.clone(),
    )
    .await;
    assert_eq!(status, 401);
    let signed = signature(&secret, &second);
    let tampered = push_event("acme/shop", "refs/heads/main", &commit(666), now());
    let (status, _) = deliver(
        &s.http,
        &s.base,
        &installation,
        &[
            ("x-github-event", "push"),
            ("x-github-delivery", "d-2"),
            ("x-hub-signature-256", &signed),
        ],
        "application/json",
        tampered,
    )
    .await;
    assert_eq!(status, 401);
    let (status, problem) = push(
        &s,
        &uuid::Uuid::now_v7().to_string(),
        &secret,
        "d-2",
        second.clone(),
    )
    .await;
    assert_eq!(
        (status, &problem["code"]),
        (401, &json!("invalid_signature"))
    );
    assert_eq!(
        problem["detail"],
        push(&s, &installation, "wrong", "d-2", second.clone())
            .await
            .1["detail"],
        "an unknown installation is answered as a wrong signature"
    );

    // A stale push (older than 72 hours) is refused, even signed.
    let stale = push_event(
        "acme/shop",
        "refs/heads/main",
        &commit(3),
        now() - 73 * 3600,
    );
    let (status, problem) = push(&s, &installation, &secret, "d-3", stale).await;
    assert_eq!(
        (status, &problem["code"]),
        (422, &json!("stale_delivery")),
        "{problem}"
    );
    // So is one from the future (it would never turn stale, and every genuine push after it
    // would be ignored as older): ten minutes ahead, or in the year 33658.
    for (delivery, pushed_at) in [("d-ahead", now() + 600), ("d-far", 1_000_000_000_000)] {
        let ahead = push_event("acme/shop", "refs/heads/main", &commit(3), pushed_at);
        let (status, problem) = push(&s, &installation, &secret, delivery, ahead).await;
        assert_eq!(
            (status, &problem["code"]),
            (422, &json!("future_delivery")),
            "{problem}"
        );
    }

    // The forge's other events and refs: ping, an issue, a tag, another branch.
    let ping = br#"{"zen":"Keep it logically awesome.","hook_id":1}"#.to_vec();
    let signed = signature(&secret, &ping);
    let (status, pong) = deliver(
        &s.http,
        &s.base,
        &installation,
        &[
            ("x-github-event", "ping"),
            ("x-github-delivery", "d-ping"),
            ("x-hub-signature-256", &signed),
        ],
        "application/json",
        ping,
    )
    .await;
    assert_eq!((status, &pong["outcome"]), (200, &json!("pong")));
    let tag = push_event("acme/shop", "refs/tags/v1", &commit(4), now());
    let (status, ignored) = push(&s, &installation, &secret, "d-tag", tag).await;
    assert_eq!(
        (status, &ignored["outcome"]),
        (200, &json!("ignored")),
        "{ignored}"
    );
    let branch = push_event("acme/shop", "refs/heads/feature", &commit(5), now());
    let (status, queued) = push(&s, &installation, &secret, "d-feature", branch).await;
    assert_eq!(status, 202, "{queued}");

    // GitHub's default content type, a form with `payload`; a body neither JSON nor a form.
    let form_push = push_event("acme/shop", "refs/heads/main", &commit(6), now());
    let form = format!(
        "payload={}",
        url_encode(std::str::from_utf8(&form_push).unwrap())
    )
    .into_bytes();
    let signed = signature(&secret, &form);
    let headers = [
        ("x-github-event", "push"),
        ("x-github-delivery", "d-form"),
        ("x-hub-signature-256", signed.as_str()),
    ];
    let (status, receipt) = deliver(
        &s.http,
        &s.base,
        &installation,
        &headers,
        "application/x-www-form-urlencoded",
        form.clone(),
    )
    .await;
    assert_eq!(
        (status, &receipt["outcome"]),
        (202, &json!("queued")),
        "{receipt}"
    );
    let (status, problem) = deliver(
        &s.http,
        &s.base,
        &installation,
        &headers,
        "text/plain",
        form,
    )
    .await;
    assert_eq!(
        (status, &problem["code"]),
        (415, &json!("unsupported_media_type"))
    );
    let garbage = b"{not json".to_vec();
    let signed = signature(&secret, &garbage);
    let (status, problem) = deliver(
        &s.http,
        &s.base,
        &installation,
        &[
            ("x-github-event", "push"),
            ("x-github-delivery", "d-garbage"),
            ("x-hub-signature-256", &signed),
        ],
        "application/json",
        garbage,
    )
    .await;
    assert_eq!(
        (status, &problem["code"]),
        (400, &json!("invalid_body")),
        "{problem}"
    );
    // A body over the limit is refused from its declared length, before any of it is read.
    let oversized = s
        .head_only_answer(&format!(
            "POST /v1/hooks/github?installation={installation} HTTP/1.1\r\nhost: bulkhead\r\nx-github-event: push\r\nx-github-delivery: d-big\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            2 * 1024 * 1024
        ))
        .await;
    assert!(
        oversized.starts_with("HTTP/1.1 413") && oversized.contains("\"body_too_large\""),
        "{oversized}"
    );

    // A rotated secret: the new one signs, and the old one still does for a while.
    let rotated = s
        .call(
            Method::POST,
            &format!("{installations}/{installation}/secret"),
            Some(&shop.owner),
            None,
        )
        .await;
    let new_secret = rotated.assert_status(200)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new_secret, secret);
    assert!(rotated.body["previous_secret_until"].is_string());
    let (status, _) = push(
        &s,
        &installation,
        &new_secret,
        "d-7",
        push_event("acme/shop", "refs/heads/main", &commit(7), now()),
    )
    .await;
    assert_eq!(status, 202);
    let (status, _) = push(
        &s,
        &installation,
        &secret,
        "d-8",
        push_event("acme/shop", "refs/heads/main", &commit(8), now() + 1),
    )
    .await;
    assert_eq!(status, 202);

    // Every accepted push to main deployed once: commits 1, 6, 7, 8; the feature branch
    // deployed nothing, and its delivery says why.
    eventually("every push deploys", async || {
        deployments(&s, &shop).await.len() == 4
    })
    .await;
    let commits: Vec<Value> = deployments(&s, &shop)
        .await
        .iter()
        .map(|d| d["push"]["commit"].clone())
        .collect();
    assert_eq!(
        commits,
        [commit(1), commit(6), commit(7), commit(8)].map(Value::from)
    );
    let log = s
        .get(
            &format!("{installations}/{installation}/deliveries?order=desc"),
            &member,
        )
        .await;
    let log = log.assert_status(200)["items"].as_array().unwrap().clone();
    let feature = log.iter().find(|d| d["branch"] == "feature").unwrap();
    assert_eq!(feature["state"], "ignored");
    assert!(
        feature["reason"].as_str().unwrap().contains("no binding"),
        "{feature}"
    );
    let tag = log
        .iter()
        .find(|d| d["forge_delivery_id"] == "d-tag")
        .unwrap();
    assert_eq!(tag["state"], "ignored");
    assert_eq!(log.len(), 6, "{log:#?}");
    // The deployment's audit event says the push made it.
    let audit = s.get("/v1/audit-events?limit=200", ADMIN_TOKEN).await;
    assert!(
        audit.text.contains(&commit(8)),
        "the push is in the audit log"
    );

    // An older push arriving late deploys nothing: it would roll the code back.
    let (status, _) = push(
        &s,
        &installation,
        &new_secret,
        "d-late",
        push_event("acme/shop", "refs/heads/main", &commit(9), now() - 3600),
    )
    .await;
    assert_eq!(status, 202);
    eventually("the late push is processed", async || {
        let log = s
            .get(
                &format!("{installations}/{installation}/deliveries?order=desc&limit=1"),
                &member,
            )
            .await;
        log.body["items"][0]["state"] == "ignored"
    })
    .await;
    assert_eq!(deployments(&s, &shop).await.len(), 4);

    // Deleting the installation refuses its deliveries from then on.
    let deleted = s
        .delete(&format!("{installations}/{installation}"), &shop.owner)
        .await;
    deleted.assert_status(204);
    let (status, _) = push(
        &s,
        &installation,
        &new_secret,
        "d-10",
        push_event("acme/shop", "refs/heads/main", &commit(10), now()),
    )
    .await;
    assert_eq!(status, 401);
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Deliveries stored while the pipeline is paused survive a SIGKILL; after the restart they
/// deploy, and a second SIGKILL as soon as the drain has begun loses and repeats nothing:
/// every push made exactly one deployment, and a replay of each is a duplicate.
async fn pushes_survive_a_sigkill_and_deploy_exactly_once(backend: Backend) {
    let Some((database_url, dir)) = database_fresh(backend).await else {
        return;
    };
    const PUSHES: u32 = 60;
    let data_dir = dir.path().join("data");
    let server = ChildServer::start(&database_url, &data_dir);
    let call = async |server: &ChildServer, method: Method, path: &str, body: Option<Value>| {
        let (status, body) = server.call(method, path, body).await;
        assert!(status < 300, "{path}: {status} {body}");
        body
    };
    let project = call(
        &server,
        Method::POST,
        "/v1/projects",
        Some(json!({ "name": "crash" })),
    )
    .await;
    let project = project["id"].as_str().unwrap().to_owned();
    let environment = call(
        &server,
        Method::POST,
        &format!("/v1/projects/{project}/environments"),
        Some(json!({ "name": "production" })),
    )
    .await;
    let mut services = Vec::new();
    for name in ["web", "worker"] {
        let service = call(
            &server,
            Method::POST,
            &format!("/v1/projects/{project}/services"),
            Some(json!({
                "environment_id": environment["id"],
                "name": name,
                "source": { "type": "artifact", "image": "shop/web:1" },
                "port": 8080,
            })),
        )
        .await;
        services.push(service["id"].as_str().unwrap().to_owned());
    }
    // One branch per service, so that no push supersedes another's deployment record.
    let bindings: Vec<Value> = (0..PUSHES)
        .map(|n| {
            json!({ "repository": "acme/crash", "branch": format!("b{n}"), "service_id": services[(n % 2) as usize] })
        })
        .collect();
    let installation = call(
        &server,
        Method::POST,
        &format!("/v1/projects/{project}/git-installations"),
        Some(json!({ "bindings": bindings })),
    )
    .await;
    let id = installation["id"].as_str().unwrap().to_owned();
    let secret = installation["secret"].as_str().unwrap().to_owned();
    call(
        &server,
        Method::POST,
        "/v1/deploy-pipeline/pause",
        Some(json!({ "reason": "crash test" })),
    )
    .await;

    let send = async |server: &ChildServer, n: u32| {
        let body = push_event(
            "acme/crash",
            &format!("refs/heads/b{n}"),
            &commit(n + 1),
            now(),
        );
        let signed = signature(&secret, &body);
        deliver(
            &server.http,
            &server.base,
            &id,
            &[
                ("x-github-event", "push"),
                ("x-github-delivery", &format!("crash-{n}")),
                ("x-hub-signature-256", &signed),
            ],
            "application/json",
            body,
        )
        .await
    };
    // Half the pushes while paused, then a SIGKILL: they are stored, not deployed.
    for n in 0..PUSHES / 2 {
        let (status, receipt) = send(&server, n).await;
        assert_eq!(status, 202, "{receipt}");
    }
    server.kill();

    // Restarted: the stored pushes are still queued; the rest arrive, then the pipeline
    // resumes and a second SIGKILL lands while they drain.
    let server = ChildServer::start(&database_url, &data_dir);
    let deliveries = format!("/v1/projects/{project}/git-installations/{id}/deliveries?limit=200");
    let queued = call(&server, Method::GET, &deliveries, None).await;
    let queued = queued["items"].as_array().unwrap();
    assert_eq!(queued.len(), (PUSHES / 2) as usize);
    assert!(queued.iter().all(|d| d["state"] == "queued"), "{queued:#?}");
    for n in PUSHES / 2..PUSHES {
        let (status, receipt) = send(&server, n).await;
        assert_eq!(status, 202, "{receipt}");
    }
    call(&server, Method::POST, "/v1/deploy-pipeline/resume", None).await;
    let started = Instant::now();
    loop {
        let log = call(&server, Method::GET, &deliveries, None).await;
        let done = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["state"] != "queued")
            .count();
        if done > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nothing drains"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill();

    // Restarted again: everything drains; a replay of every push is a duplicate.
    let server = ChildServer::start(&database_url, &data_dir);
    let started = Instant::now();
    let log = loop {
        let log = call(&server, Method::GET, &deliveries, None).await;
        let items = log["items"].as_array().unwrap().clone();
        if items.iter().all(|d| d["state"] == "deployed") {
            break items;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not drained: {items:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(log.len(), PUSHES as usize);
    for n in 0..PUSHES {
        let (status, receipt) = send(&server, n).await;
        assert_eq!((status, &receipt["outcome"]), (200, &json!("duplicate")));
    }
    let mut pushed = Vec::new();
    for service in &services {
        let list = call(
            &server,
            Method::GET,
            &format!("/v1/projects/{project}/services/{service}/deployments?limit=200"),
            None,
        )
        .await;
        for deployment in list["items"].as_array().unwrap() {
            pushed.push(deployment["push"]["commit"].as_str().unwrap().to_owned());
        }
    }
    pushed.sort();
    let expected: Vec<String> = (0..PUSHES).map(|n| commit(n + 1)).collect();
    assert_eq!(pushed, expected, "each push made exactly one deployment");
    for delivery in &log {
        assert_eq!(delivery["deployment_ids"].as_array().unwrap().len(), 1);
    }
    server.kill();
}

/// Ten pushes make ten deployments (each superseding the one before); each commit's latest
/// status reaches a forge that allows 5 calls per 2 s window, and says what became of its
/// deployment, without one call over the limit. Then a secondary limit (429,
/// `Retry-After: 2`) is answered once and honoured, and a failing forge (502) is retried
/// until it recovers. The forge's address is one a project's outbound calls may reach, when
/// saved and at each call.
async fn commit_statuses_stay_within_the_forges_limits(backend: Backend) {
    use bulkhead_simulators::RunningSimulator;
    use bulkhead_simulators::faults::FaultState;
    use bulkhead_simulators::forge::{ForgeLimit, ForgeSimulator};

    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    let forge = ForgeSimulator::new("forge-token-1");
    forge.limit_set(ForgeLimit {
        requests: 5,
        window_secs: 2,
    });
    let simulator = RunningSimulator::serve("127.0.0.1:0".parse().unwrap(), forge.router())
        .await
        .unwrap();
    let shop = s.project_with_service("statuses").await;
    let installations = format!("/v1/projects/{}/git-installations", shop.id);
    // The API address is checked as a project's outbound calls are: https to a public
    // address; a private or metadata address (or plain http) only where the operator allowed
    // its network, as the test server allows loopback.
    for api_url in [
        "http://forge.example.com",
        "https://169.254.169.254/latest",
        "https://10.0.0.1/api/v3",
        "https://[fd00::1]/api/v3",
    ] {
        s.post(
            &installations,
            &shop.owner,
            json!({ "commit_statuses": { "api_url": api_url, "token": "t" } }),
        )
        .await
        .assert_problem(422, "invalid_request");
    }
    let bindings: Vec<Value> = (0..12)
        .map(|n| json!({ "repository": "acme/shop", "branch": format!("b{n}"), "service_id": shop.service }))
        .collect();
    let created = s
        .post(
            &installations,
            &shop.owner,
            json!({
                "bindings": bindings,
                "commit_statuses": { "api_url": simulator.url(), "token": "forge-token-1" },
            }),
        )
        .await;
    let created = created.assert_status(201).clone();
    assert!(
        !created.to_string().contains("forge-token-1"),
        "the token is never shown"
    );
    assert_eq!(created["commit_statuses"]["api_url"], simulator.url());
    let installation = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    for n in 0..10u32 {
        let body = push_event(
            "acme/shop",
            &format!("refs/heads/b{n}"),
            &commit(100 + n),
            now(),
        );
        let (status, receipt) = push(&s, &installation, &secret, &format!("st-{n}"), body).await;
        assert_eq!(status, 202, "{receipt}");
    }
    // Each commit's latest status is its deployment's (`error` when superseded, `failure`
    // when failed, `success` when healthy, `pending` before), without a call over the limit
    // or during a hold.
    let latest = |forge: &ForgeSimulator, sha: &str| {
        forge
            .stats()
            .statuses
            .iter()
            .rev()
            .find(|status| status.sha == sha)
            .map(|status| status.state.clone())
    };
    let settled = async |forge: &ForgeSimulator, count: usize| {
        let deployments = deployments(&s, &shop).await;
        deployments.len() == count
            && deployments.iter().all(|d| {
                let expected = match d["state"].as_str().unwrap() {
                    "healthy" => "success",
                    "failed" => "failure",
                    "cancelled" | "superseded" => "error",
                    _ => "pending",
                };
                latest(forge, d["push"]["commit"].as_str().unwrap()).as_deref() == Some(expected)
            })
    };
    eventually("every commit has its deployment's status", async || {
        settled(&forge, 10).await
    })
    .await;
    let stats = forge.stats();
    assert_eq!(stats.over_limit, 0, "{stats:#?}");
    assert_eq!(stats.during_hold, 0, "{stats:#?}");
    assert_eq!(stats.unauthorized, 0);
    assert!(
        stats
            .statuses
            .iter()
            .all(|st| st.context == "bulkhead/deploy" && st.repository == "acme/shop")
    );

    // A secondary limit: answered once, then nothing until its Retry-After has passed.
    forge.limit_set(ForgeLimit::default());
    forge.faults.set(FaultState {
        rate_limited_secs: Some(2),
        ..Default::default()
    });
    let body = push_event("acme/shop", "refs/heads/b10", &commit(110), now());
    let (status, _) = push(&s, &installation, &secret, "st-10", body).await;
    assert_eq!(status, 202);
    eventually("the forge limits a call", async || {
        forge.stats().secondary_limited > 0
    })
    .await;
    let view = s
        .get(&format!("{installations}/{installation}"), &shop.owner)
        .await;
    assert!(
        view.assert_status(200)["commit_statuses"]["held_for_secs"].as_u64() >= Some(1),
        "the hold is visible: {}",
        view.text
    );
    forge.faults.set(FaultState::default());
    eventually("the held status goes after the hold", async || {
        settled(&forge, 11).await
    })
    .await;
    let stats = forge.stats();
    assert_eq!(
        stats.secondary_limited, 1,
        "one limit answer, then honoured: {stats:#?}"
    );
    assert_eq!(stats.during_hold, 0, "{stats:#?}");

    // A failing forge: retried with backoff until it recovers.
    forge.faults.set(FaultState {
        failing: true,
        ..Default::default()
    });
    let body = push_event("acme/shop", "refs/heads/b11", &commit(111), now());
    let (status, _) = push(&s, &installation, &secret, "st-11", body).await;
    assert_eq!(status, 202);
    eventually("the forge fails a call", async || forge.stats().failed > 0).await;
    forge.faults.set(FaultState::default());
    eventually("the status arrives once the forge recovers", async || {
        settled(&forge, 12).await
    })
    .await;

    // The address is checked at every call too. Once the operator allows loopback no more,
    // neither the saved address (127.0.0.1) nor a name that resolves to loopback is called.
    let s = s
        .restart_with(|settings| settings.webhook_allowed_networks.clear())
        .await;
    let port = reqwest::Url::parse(&simulator.url())
        .unwrap()
        .port()
        .unwrap();
    let named = s
        .post(
            &installations,
            &shop.owner,
            json!({
                "bindings": [{ "repository": "acme/shop", "branch": "named", "service_id": shop.service }],
                "commit_statuses": { "api_url": format!("https://localhost:{port}"), "token": "forge-token-1" },
            }),
        )
        .await;
    let named = named.assert_status(201).clone();
    let body = push_event("acme/shop", "refs/heads/b0", &commit(120), now());
    let (status, _) = push(&s, &installation, &secret, "st-literal", body).await;
    assert_eq!(status, 202);
    let body = push_event("acme/shop", "refs/heads/named", &commit(121), now());
    let (status, _) = push(
        &s,
        named["id"].as_str().unwrap(),
        named["secret"].as_str().unwrap(),
        "st-named",
        body,
    )
    .await;
    assert_eq!(status, 202);
    let refused = async |sha: String| {
        use bulkhead::entity::forge_status;
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        forge_status::Entity::find()
            .filter(forge_status::Column::CommitSha.eq(sha))
            .one(&s.app().db)
            .await
            .unwrap()
            .filter(|row| row.done)
            .map(|row| row.last_error)
    };
    eventually("both statuses are refused", async || {
        refused(commit(120)).await.is_some() && refused(commit(121)).await.is_some()
    })
    .await;
    let literal = refused(commit(120)).await.unwrap();
    assert!(literal.contains("loopback"), "{literal}");
    let named = refused(commit(121)).await.unwrap();
    assert!(
        named.contains("`localhost` resolves to") && named.contains("loopback"),
        "{named}"
    );
    assert_eq!(
        latest(&forge, &commit(120)),
        None,
        "the forge was not called"
    );
    assert_eq!(
        latest(&forge, &commit(121)),
        None,
        "the forge was not called"
    );
    simulator.shutdown().await.unwrap();
}
