//! The generated Rust client (`openapi/rust`, progenitor over the 3.0 form of the document)
//! against the real server. One scenario reaches every operation of the committed document
//! through it, and each answer is decoded into the type the document gives: a server that
//! answers other than its document says fails here, and so does an operation added to the
//! server without being reached below.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use bulkhead_client::{Client, ClientOptions, Error, Observer, ResponseValue, types};
use futures::StreamExt;

use crate::support::{ADMIN_TOKEN, PASSWORD, TestServer, eventually, platform, plugin_bytes};

crate::db_tests!(the_generated_client_reaches_every_operation);

/// The operations the client sent, by `operationId`.
#[derive(Clone, Default)]
struct Reached(Arc<Mutex<BTreeSet<String>>>);

impl Reached {
    fn observer(&self) -> Observer {
        let reached = self.0.clone();
        Observer::new(move |operation, _request| {
            reached.lock().unwrap().insert(operation.to_owned());
        })
    }

    fn client(&self, s: &TestServer, token: &str) -> Client {
        Client::with_options(
            &s.base,
            ClientOptions {
                token: Some(token.to_owned()),
                observer: self.observer(),
                ..ClientOptions::default()
            },
        )
        .unwrap()
    }
}

/// Every `operationId` of the committed document.
fn documented_operations() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/openapi.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .map(|operation| operation["operationId"].as_str().unwrap().to_owned())
        .collect()
}

/// The problem a call was refused with (and fails the test if it was not refused).
fn refused<T: std::fmt::Debug>(
    answer: Result<ResponseValue<T>, Error<types::Problem>>,
) -> (u16, types::Problem) {
    match answer {
        Err(Error::ErrorResponse(problem)) => (problem.status().as_u16(), problem.into_inner()),
        other => panic!("expected a problem, got {other:?}"),
    }
}

/// The `ETag` of an answer.
fn etag<T>(answer: &ResponseValue<T>) -> String {
    answer.headers()["etag"].to_str().unwrap().to_owned()
}

/// Sets a service's replicas (with `If-Match`, as a dashboard does) and deploys them.
async fn replicas_deploy(
    client: &Client,
    project: uuid::Uuid,
    service: uuid::Uuid,
    replicas: i32,
) -> types::DeploymentView {
    let viewed = client
        .service_view()
        .project_id(project)
        .service_id(service)
        .send()
        .await
        .unwrap();
    client
        .service_update()
        .project_id(project)
        .service_id(service)
        .if_match(etag(&viewed))
        .body_map(|b| b.replicas(Some(replicas)))
        .send()
        .await
        .unwrap();
    client
        .deployment_create()
        .project_id(project)
        .service_id(service)
        .send()
        .await
        .unwrap()
        .into_inner()
}

const WORKLOAD: &str = "import os,http.server as h\nclass H(h.BaseHTTPRequestHandler):\n def do_GET(s):\n  s.send_response(200); s.end_headers(); s.wfile.write(b'ok')\n def log_message(s,*a): pass\nh.HTTPServer(('127.0.0.1',int(os.environ['PORT'])),H).serve_forever()";

async fn the_generated_client_reaches_every_operation(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let reached = Reached::default();
    let anonymous = Client::new(&s.base, reached.observer());
    let admin = reached.client(&s, ADMIN_TOKEN);

    // Operations without a credential.
    assert_eq!(anonymous.healthz().send().await.unwrap().status, "ok");
    assert_eq!(anonymous.readyz().send().await.unwrap().status, "ready");
    let mut metrics = anonymous
        .metrics_render()
        .send()
        .await
        .unwrap()
        .into_inner();
    let first = metrics.next().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("# "),
        "not Prometheus text"
    );

    // Users and sessions.
    let alice = admin
        .user_create()
        .body_map(|b| {
            b.email("alice@example.com")
                .name("Alice")
                .password(Some(PASSWORD.try_into().unwrap()))
        })
        .send()
        .await
        .unwrap();
    assert_eq!(alice.email, "alice@example.com");
    let listed = admin.user_list().limit(200).send().await.unwrap();
    assert!(listed.items.iter().any(|u| u.id == alice.id));
    let viewed = admin.user_view().user_id(alice.id).send().await.unwrap();
    let renamed = admin
        .user_update()
        .user_id(alice.id)
        .if_match(etag(&viewed))
        .body_map(|b| b.name(Some("Alice A.".try_into().unwrap())))
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.name, "Alice A.");
    let (status, problem) = refused(
        anonymous
            .session_login()
            .body_map(|b| b.email("alice@example.com").password("wrong password"))
            .send()
            .await,
    );
    assert_eq!(
        (status, problem.code),
        (401, types::ErrorCode::Unauthenticated)
    );
    let session = anonymous
        .session_login()
        .body_map(|b| b.email("alice@example.com").password(PASSWORD))
        .send()
        .await
        .unwrap();
    let renewed = anonymous
        .session_refresh()
        .body_map(|b| b.refresh_token(session.refresh_token.clone()))
        .send()
        .await
        .unwrap();
    assert_ne!(renewed.refresh_token, session.refresh_token);
    // The cookie mode is the browser's: this client keeps no cookie, so a refresh is refused
    // (no session cookie) and a logout has nothing to end (tested with cookies in `dashboard`).
    let browser = anonymous
        .browser_session_login()
        .body_map(|b| b.email("alice@example.com").password(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(browser.csrf_token.len(), 40);
    let (status, problem) = refused(
        anonymous
            .browser_session_refresh()
            .x_csrf_token(browser.csrf_token.clone())
            .send()
            .await,
    );
    assert_eq!(
        (status, problem.code),
        (401, types::ErrorCode::Unauthenticated)
    );
    anonymous.browser_session_logout().send().await.unwrap();
    let alice_client = reached.client(&s, &renewed.access_token);
    let me = alice_client.me_view().send().await.unwrap();
    assert_eq!(me.id, alice.id);
    let mine = alice_client.me_limits().send().await.unwrap();
    assert!(mine.limits.iter().any(|l| l.name == "projects_per_user"));
    let me = alice_client
        .me_update()
        .if_match(etag(&me))
        .body_map(|b| b.name(Some("Alice".try_into().unwrap())))
        .send()
        .await
        .unwrap();
    assert_eq!(me.name, "Alice");

    // Terms of service.
    let terms = admin
        .terms_publish()
        .body_map(|b| {
            b.version("2026-11")
                .url("https://example.com/terms/2026-11")
        })
        .send()
        .await
        .unwrap();
    assert!(
        admin
            .terms_list()
            .send()
            .await
            .unwrap()
            .items
            .iter()
            .any(|t| t.version == terms.version)
    );
    assert!(
        alice_client
            .me_terms_status()
            .send()
            .await
            .unwrap()
            .must_accept
    );
    alice_client
        .me_terms_accept()
        .body_map(|b| b.version("2026-11"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        alice_client
            .me_terms_acceptance_list()
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // API tokens.
    let token = alice_client
        .token_create()
        .body_map(|b| b.name("ci").scopes(vec![types::Scope::Read]))
        .send()
        .await
        .unwrap();
    assert!(token.secret.starts_with("bh_"), "{}", token.prefix);
    let reader = reached.client(&s, &token.secret);
    assert!(
        alice_client
            .token_list()
            .send()
            .await
            .unwrap()
            .items
            .iter()
            .any(|t| t.id == token.id)
    );
    let viewed = alice_client
        .token_view()
        .token_id(token.id)
        .send()
        .await
        .unwrap();
    assert_eq!(viewed.scopes, vec![types::Scope::Read]);

    // A project, its environment, members and invitations.
    let project = alice_client
        .project_create()
        .idempotency_key("create-shop")
        .body_map(|b| b.name("shop"))
        .send()
        .await
        .unwrap();
    let (status, problem) = refused(
        reader
            .project_create()
            .body_map(|b| b.name("nope"))
            .send()
            .await,
    );
    assert_eq!(
        (status, problem.code),
        (403, types::ErrorCode::InsufficientScope)
    );
    assert!(
        reader
            .project_list()
            .send()
            .await
            .unwrap()
            .items
            .iter()
            .any(|p| p.id == project.id)
    );
    let viewed = alice_client
        .project_view()
        .project_id(project.id)
        .send()
        .await
        .unwrap();
    let held = alice_client
        .project_limits()
        .project_id(project.id)
        .send()
        .await
        .unwrap();
    assert!(held.limits.iter().all(|l| l.used <= l.max));
    let project = alice_client
        .project_update()
        .project_id(project.id)
        .if_match(etag(&viewed))
        .body_map(|b| b.description(Some("The shop".to_owned())))
        .send()
        .await
        .unwrap();
    assert_eq!(project.description, "The shop");
    let environment = alice_client
        .environment_create()
        .project_id(project.id)
        .body_map(|b| b.name("production"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        alice_client
            .environment_list()
            .project_id(project.id)
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let viewed = alice_client
        .environment_view()
        .project_id(project.id)
        .environment_id(environment.id)
        .send()
        .await
        .unwrap();
    alice_client
        .environment_update()
        .project_id(project.id)
        .environment_id(environment.id)
        .if_match(etag(&viewed))
        .body_map(|b| b.name("prod"))
        .send()
        .await
        .unwrap();

    let bob = admin
        .user_create()
        .body_map(|b| {
            b.email("bob@example.com")
                .name("Bob")
                .password(Some(PASSWORD.try_into().unwrap()))
        })
        .send()
        .await
        .unwrap();
    let bob_session = anonymous
        .session_login()
        .body_map(|b| b.email("bob@example.com").password(PASSWORD))
        .send()
        .await
        .unwrap();
    let bob_client = reached.client(&s, &bob_session.access_token);
    let invite = |role: types::ProjectRole| {
        alice_client
            .invitation_create()
            .project_id(project.id)
            .body_map(move |b| b.email("bob@example.com").role(role))
            .send()
    };
    // One pending invitation per email at a time: revoked, declined, then accepted.
    let revoked = invite(types::ProjectRole::Viewer).await.unwrap();
    assert_eq!(
        alice_client
            .invitation_list()
            .project_id(project.id)
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    alice_client
        .invitation_revoke()
        .project_id(project.id)
        .invitation_id(revoked.id)
        .send()
        .await
        .unwrap();
    let declined = invite(types::ProjectRole::Viewer).await.unwrap();
    assert_eq!(
        bob_client
            .me_invitation_list()
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    bob_client
        .me_invitation_decline()
        .invitation_id(declined.id)
        .send()
        .await
        .unwrap();
    let first = invite(types::ProjectRole::Viewer).await.unwrap();
    let member = bob_client
        .me_invitation_accept()
        .invitation_id(first.id)
        .send()
        .await
        .unwrap();
    assert_eq!(member.role, types::ProjectRole::Viewer);
    assert_eq!(
        alice_client
            .member_list()
            .project_id(project.id)
            .send()
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    let viewed = alice_client
        .member_view()
        .project_id(project.id)
        .user_id(bob.id)
        .send()
        .await
        .unwrap();
    let promoted = alice_client
        .member_update()
        .project_id(project.id)
        .user_id(bob.id)
        .if_match(etag(&viewed))
        .body_map(|b| b.role(types::ProjectRole::Member))
        .send()
        .await
        .unwrap();
    assert_eq!(promoted.role, types::ProjectRole::Member);
    alice_client
        .member_remove()
        .project_id(project.id)
        .user_id(bob.id)
        .send()
        .await
        .unwrap();

    // Providers and their plugins (administrators).
    let providers = admin.provider_list().send().await.unwrap();
    assert!(
        providers
            .items
            .iter()
            .any(|p| p.name == "metal" && p.state == types::ProviderState::Healthy)
    );
    // A reader sees name, state and health only: the administrators' fields are absent, and
    // the document says they may be.
    let seen = reader.provider_list().send().await.unwrap();
    assert!(
        seen.items
            .iter()
            .any(|p| p.name == "metal" && p.state == types::ProviderState::Healthy)
    );
    assert!(
        seen.items.iter().all(|p| p.health_reason.is_none()),
        "{seen:?}"
    );
    let metal = admin.provider_view().name("metal").send().await.unwrap();
    assert!(metal.health_reason.is_some());
    admin
        .provider_update()
        .name("metal")
        .if_match(etag(&metal))
        .body_map(|b| b.drained(Some(false)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        admin
            .provider_probe()
            .name("metal")
            .send()
            .await
            .unwrap()
            .status,
        types::ProviderHealth::Healthy
    );
    // Each event's kind decodes as one the document names (`ProviderEventKind`).
    admin
        .provider_event_list()
        .name("metal")
        .order(types::ListOrder::Desc)
        .send()
        .await
        .unwrap();
    assert!(
        !admin
            .provider_activation_list()
            .name("metal")
            .send()
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let uploaded = admin
        .plugin_binary_upload()
        .body(plugin_bytes("bulkhead_plugin_example.wasm"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        admin
            .plugin_binary_view()
            .digest(uploaded.digest.clone())
            .send()
            .await
            .unwrap()
            .name,
        uploaded.name
    );
    assert!(
        admin
            .plugin_binary_list()
            .send()
            .await
            .unwrap()
            .items
            .iter()
            .any(|b| b.digest == uploaded.digest)
    );
    admin
        .provider_create()
        .body_map(|b| b.name("toy"))
        .send()
        .await
        .unwrap();
    let toy = admin
        .provider_activate()
        .name("toy")
        .body_map(|b| b.digest(uploaded.digest.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(toy.plugin.as_ref().unwrap().digest, uploaded.digest);
    let (status, problem) = refused(admin.provider_rollback().name("toy").send().await);
    assert_eq!(
        (status, problem.code),
        (409, types::ErrorCode::NothingToRollBack)
    );
    let instance = admin
        .provider_instance_create()
        .name("toy")
        .body_map(|b| {
            b.instance_key("web-1")
                .region("local")
                .artifact("demo")
                .port(8080)
        })
        .send()
        .await
        .unwrap();
    assert_eq!(
        admin
            .provider_instance_view()
            .name("toy")
            .instance_key("web-1")
            .send()
            .await
            .unwrap()
            .provider_id,
        instance.provider_id
    );
    admin
        .provider_instance_delete()
        .name("toy")
        .instance_key("web-1")
        .send()
        .await
        .unwrap();
    let evacuation = admin.evacuation_start().name("toy").send().await.unwrap();
    let viewed = admin.evacuation_view().name("toy").send().await.unwrap();
    assert_eq!(viewed.id, evacuation.id);
    let cancelled = admin.evacuation_cancel().name("toy").send().await.unwrap();
    assert_eq!(cancelled.id, evacuation.id);

    // A service, deployed, rolled back, and its domain.
    let service = alice_client
        .service_create()
        .project_id(project.id)
        .body_map(|b| {
            b.environment_id(environment.id)
                .name("web")
                .port(std::num::NonZeroU32::new(8080).unwrap())
                .replicas(Some(1))
                .source(types::ServiceSource::Command {
                    command: vec!["python3".into(), "-c".into(), WORKLOAD.into()],
                })
                .placement(Some(types::PlacementPolicy {
                    providers: vec![types::ProviderPreference {
                        name: "metal".into(),
                        priority: None,
                        regions: vec![],
                        weight: None,
                    }],
                    spread: None,
                }))
        })
        .send()
        .await
        .unwrap();
    assert_eq!(
        alice_client
            .service_list()
            .project_id(project.id)
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let deployment = replicas_deploy(&alice_client, project.id, service.id, 1).await;
    eventually("the deployment becomes healthy", async || {
        let now = alice_client
            .deployment_view()
            .project_id(project.id)
            .service_id(service.id)
            .deployment_id(deployment.id)
            .send()
            .await
            .unwrap();
        assert!(
            ![
                types::DeploymentState::Failed,
                types::DeploymentState::Cancelled
            ]
            .contains(&now.state),
            "{now:?}"
        );
        now.state == types::DeploymentState::Healthy
    })
    .await;
    let events = alice_client
        .deployment_event_list()
        .project_id(project.id)
        .service_id(service.id)
        .deployment_id(deployment.id)
        .send()
        .await
        .unwrap();
    assert!(!events.items.is_empty());
    assert_eq!(
        alice_client
            .deployment_list()
            .project_id(project.id)
            .service_id(service.id)
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let service_instances = async || {
        alice_client
            .service_instance_list()
            .project_id(project.id)
            .service_id(service.id)
            .send()
            .await
            .unwrap()
            .into_inner()
            .items
    };
    let instances = service_instances().await;
    assert_eq!(instances.len(), 1);
    // The same instance, as its provider lists it.
    let on_metal = admin
        .provider_instance_list()
        .name("metal")
        .send()
        .await
        .unwrap();
    assert!(
        on_metal
            .items
            .iter()
            .any(|i| i.address == instances[0].address),
        "{on_metal:?}"
    );
    // What the instance printed: the agent's note that it started, as a page of its logs.
    let logs = alice_client
        .service_logs()
        .project_id(project.id)
        .service_id(service.id)
        .limit(1000)
        .send()
        .await
        .unwrap();
    assert!(
        logs.lines
            .iter()
            .any(|line| line.stream == types::LogStreamName::System
                && line.instance_key == instances[0].instance_key),
        "{logs:?}"
    );
    assert!(logs.missing.is_empty(), "{logs:?}");
    // A second deployment, rolled back to the first (the last that became healthy).
    let second = alice_client
        .deployment_create()
        .project_id(project.id)
        .service_id(service.id)
        .send()
        .await
        .unwrap();
    let rollback = alice_client
        .deployment_rollback()
        .project_id(project.id)
        .service_id(service.id)
        .deployment_id(second.id)
        .send()
        .await
        .unwrap();
    assert_eq!(rollback.number, 3);
    assert!(rollback.rollback_of.is_some(), "{rollback:?}");
    let cancelled = alice_client
        .deployment_cancel()
        .project_id(project.id)
        .service_id(service.id)
        .deployment_id(rollback.id)
        .send()
        .await
        .unwrap();
    assert!(
        [
            types::DeploymentState::Cancelled,
            types::DeploymentState::Healthy,
            types::DeploymentState::Superseded
        ]
        .contains(&cancelled.state),
        "{cancelled:?}"
    );
    let domain = alice_client
        .domain_create()
        .project_id(project.id)
        .body_map(|b| b.hostname("shop.example.com").service_id(service.id))
        .send()
        .await
        .unwrap();
    // Pending until its challenge is in DNS; then verified, and routed.
    assert_eq!(domain.status, types::DomainStatus::Pending);
    let challenge = domain
        .challenge
        .clone()
        .expect("a pending domain's challenge");
    crate::support::dns().txt_add(&challenge.name, challenge.value.clone());
    let verified = alice_client
        .domain_verify()
        .project_id(project.id)
        .domain_id(domain.id)
        .send()
        .await
        .unwrap();
    assert_eq!(verified.status, types::DomainStatus::Verified);
    assert!(verified.challenge.is_none());

    // A git installation, and a push signed with its secret (to a branch bound to nothing, so
    // that the scenario's deployments stay as they are: git_intake.rs deploys from pushes).
    let binding: types::PushBinding = serde_json::from_value(
        serde_json::json!({ "repository": "acme/shop", "branch": "main", "service_id": service.id }),
    )
    .unwrap();
    let installation = alice_client
        .git_installation_create()
        .project_id(project.id)
        .body_map(|b| b.bindings(vec![binding.clone()]))
        .send()
        .await
        .unwrap();
    let secret = alice_client
        .git_installation_secret_rotate()
        .project_id(project.id)
        .installation_id(installation.id)
        .send()
        .await
        .unwrap()
        .secret
        .clone();
    let event: types::GithubPushEvent = serde_json::from_value(serde_json::json!({
        "ref": "refs/heads/elsewhere",
        "after": "c0ffee".repeat(6) + "c0ff",
        "repository": { "full_name": "acme/shop", "pushed_at": chrono::Utc::now().timestamp() },
        "head_commit": { "message": "Ship it" },
        "pusher": { "name": "alice" },
    }))
    .unwrap();
    let signature = crate::git_intake::signature(&secret, &serde_json::to_vec(&event).unwrap());
    let receipt = anonymous
        .github_hook_receive()
        .installation(installation.id)
        .x_git_hub_event("push")
        .x_git_hub_delivery("rust-client-1")
        .x_hub_signature_256(signature)
        .body(event)
        .send()
        .await
        .unwrap();
    assert_eq!(receipt.status(), 202);
    assert_eq!(receipt.outcome, types::HookOutcome::Queued);
    eventually("the push is processed", async || {
        let page = alice_client
            .git_delivery_list()
            .project_id(project.id)
            .installation_id(installation.id)
            .send()
            .await
            .unwrap();
        page.items
            .first()
            .is_some_and(|d| d.state == types::GitDeliveryState::Ignored)
    })
    .await;
    let listed = alice_client
        .git_installation_list()
        .project_id(project.id)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let viewed = alice_client
        .git_installation_view()
        .project_id(project.id)
        .installation_id(installation.id)
        .send()
        .await
        .unwrap();
    assert!(viewed.previous_secret_until.is_some());
    let updated = alice_client
        .git_installation_update()
        .project_id(project.id)
        .installation_id(installation.id)
        .body_map(|b| b.bindings(Vec::new()))
        .send()
        .await
        .unwrap();
    assert!(updated.bindings.is_empty());
    alice_client
        .git_installation_delete()
        .project_id(project.id)
        .installation_id(installation.id)
        .send()
        .await
        .unwrap();

    // Outside sign-in: this server has no provider configured.
    assert!(
        anonymous
            .sign_in_provider_list()
            .send()
            .await
            .unwrap()
            .is_empty()
    );
    let (status, _) = refused(anonymous.sign_in_start().provider("github").send().await);
    assert_eq!(status, 404);
    let (status, _) = refused(
        anonymous
            .sign_in_finish()
            .provider("github")
            .body_map(|b| b.code("code").state("state"))
            .send()
            .await,
    );
    assert_eq!(status, 404);
    let (status, _) = refused(
        anonymous
            .browser_session_provider_finish()
            .provider("github")
            .body_map(|b| {
                b.code("code")
                    .state("state")
                    .iss(Some("https://issuer.example".parse().unwrap()))
            })
            .send()
            .await,
    );
    assert_eq!(status, 404);
    assert!(
        alice_client
            .identity_list()
            .send()
            .await
            .unwrap()
            .is_empty()
    );
    let (status, _) = refused(
        alice_client
            .identity_link_start()
            .provider("github")
            .send()
            .await,
    );
    assert_eq!(status, 404);
    let (status, _) = refused(
        alice_client
            .identity_link_finish()
            .provider("github")
            .body_map(|b| b.code("code").state("state"))
            .send()
            .await,
    );
    assert_eq!(status, 404);
    let (status, _) = refused(
        alice_client
            .identity_unlink()
            .identity_id(uuid::Uuid::now_v7())
            .send()
            .await,
    );
    assert_eq!(status, 404);

    // A webhook endpoint: registered, read, changed, its secret rotated, its log read.
    let endpoint = alice_client
        .webhook_endpoint_create()
        .project_id(project.id)
        .body_map(|b| b.url("https://hooks.example.com/bulkhead"))
        .send()
        .await
        .unwrap();
    assert!(endpoint.secret.starts_with("whsec_"));
    let rotated = alice_client
        .webhook_endpoint_secret_rotate()
        .project_id(project.id)
        .webhook_id(endpoint.id)
        .send()
        .await
        .unwrap();
    assert_ne!(rotated.secret, endpoint.secret);
    assert_eq!(
        alice_client
            .webhook_endpoint_list()
            .project_id(project.id)
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let viewed = alice_client
        .webhook_endpoint_view()
        .project_id(project.id)
        .webhook_id(endpoint.id)
        .send()
        .await
        .unwrap();
    assert!(viewed.previous_secret_until.is_some());
    let updated = alice_client
        .webhook_endpoint_update()
        .project_id(project.id)
        .webhook_id(endpoint.id)
        .body_map(|b| b.event_types(vec![types::WebhookEventType::DeploymentHealthy]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        updated.event_types,
        [types::WebhookEventType::DeploymentHealthy]
    );
    alice_client
        .webhook_message_list()
        .project_id(project.id)
        .webhook_id(endpoint.id)
        .send()
        .await
        .unwrap();
    let (status, _) = refused(
        alice_client
            .webhook_message_replay()
            .project_id(project.id)
            .webhook_id(endpoint.id)
            .message_id(uuid::Uuid::now_v7())
            .send()
            .await,
    );
    assert_eq!(status, 404);
    alice_client
        .webhook_endpoint_delete()
        .project_id(project.id)
        .webhook_id(endpoint.id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        alice_client
            .domain_list()
            .project_id(project.id)
            .send()
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let viewed = alice_client
        .domain_view()
        .project_id(project.id)
        .domain_id(domain.id)
        .send()
        .await
        .unwrap();
    alice_client
        .domain_update()
        .project_id(project.id)
        .domain_id(domain.id)
        .if_match(etag(&viewed))
        .body_map(|b| b.service_id(service.id))
        .send()
        .await
        .unwrap();

    // The routing table and the edges.
    let table = admin.routing_table_view().send().await.unwrap();
    assert_eq!(table.format, "bulkhead.routing-table.v1");
    // The Caddy configuration decodes as the document describes it.
    let caddy = admin
        .routing_table_caddy()
        .listen(":8081")
        .send()
        .await
        .unwrap();
    let server = &caddy.apps.http.servers.bulkhead;
    assert_eq!(server.listen, [":8081"]);
    assert_eq!(server.routes.len(), table.table.routes.len() + 1);
    assert!(server.routes.last().unwrap().match_.is_none());
    let changes = admin.routing_table_changes().since(0).send().await.unwrap();
    assert!(changes.revision >= 1);
    let keys = admin.routing_key_list().send().await.unwrap();
    let active = keys
        .keys
        .iter()
        .find(|k| k.state == types::RoutingKeyState::Active)
        .unwrap()
        .id
        .clone();
    let next = admin.routing_key_create().send().await.unwrap();
    assert_eq!(next.state, types::RoutingKeyState::Next);
    admin
        .routing_key_activate()
        .key_id(next.id.clone())
        .send()
        .await
        .unwrap();
    admin
        .routing_key_delete()
        .key_id(active)
        .send()
        .await
        .unwrap();
    let mut watch = admin
        .routing_table_watch()
        .send()
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("snapshot"),
        "{first:?}"
    );
    drop(watch);
    let edge = admin
        .edge_status_report()
        .edge_id("edge-1")
        .body_map(|b| b.revision(changes.revision))
        .send()
        .await
        .unwrap();
    assert_eq!(edge.revision, changes.revision);
    assert_eq!(admin.edge_list().send().await.unwrap().items.len(), 1);
    admin.edge_delete().edge_id("edge-1").send().await.unwrap();

    // The replicas and their leaders: this lone replica leads every kind of work.
    let cluster = admin.cluster_status().send().await.unwrap();
    assert_eq!(cluster.replicas.len(), 1);
    assert_eq!(cluster.replicas[0].id, cluster.replica);
    assert_eq!(
        cluster.leaders.len(),
        bulkhead::app::cluster::leases::Work::ALL.len()
    );
    assert!(
        cluster
            .leaders
            .iter()
            .all(|l| l.holder == cluster.replica && l.current)
    );

    // The deploy pipeline.
    let pipeline = admin.deploy_pipeline_view().send().await.unwrap();
    assert!(!pipeline.paused);
    admin
        .deploy_pipeline_pause()
        .body_map(|b| b.reason(Some("drill".try_into().unwrap())))
        .send()
        .await
        .unwrap();
    admin.deploy_pipeline_resume().send().await.unwrap();
    let updated = admin
        .deploy_pipeline_update()
        .body_map(|b| b.drain_rate(5.0))
        .send()
        .await
        .unwrap();
    assert_eq!(updated.drain_rate, 5.0);

    // The audit log saw it all.
    let audit = admin.audit_event_list().limit(200).send().await.unwrap();
    assert!(audit.items.len() > 20, "{}", audit.items.len());

    // Deletions, and the end of the session.
    alice_client
        .domain_delete()
        .project_id(project.id)
        .domain_id(domain.id)
        .send()
        .await
        .unwrap();
    let (status, problem) = refused(
        alice_client
            .service_delete()
            .project_id(project.id)
            .service_id(service.id)
            .send()
            .await,
    );
    assert_eq!(
        (status, problem.code),
        (409, types::ErrorCode::InstancesRunning)
    );
    replicas_deploy(&alice_client, project.id, service.id, 0).await;
    eventually("the instances are removed", async || {
        service_instances().await.is_empty()
    })
    .await;
    alice_client
        .service_delete()
        .project_id(project.id)
        .service_id(service.id)
        .send()
        .await
        .unwrap();
    alice_client
        .environment_delete()
        .project_id(project.id)
        .environment_id(environment.id)
        .send()
        .await
        .unwrap();
    alice_client
        .project_delete()
        .project_id(project.id)
        .send()
        .await
        .unwrap();
    alice_client
        .token_revoke()
        .token_id(token.id)
        .send()
        .await
        .unwrap();
    anonymous
        .session_logout()
        .body_map(|b| b.refresh_token(renewed.refresh_token.clone()))
        .send()
        .await
        .unwrap();
    let (status, _) = refused(
        anonymous
            .session_refresh()
            .body_map(|b| b.refresh_token(renewed.refresh_token.clone()))
            .send()
            .await,
    );
    assert_eq!(status, 401);

    let reached = reached.0.lock().unwrap().clone();
    let missing: Vec<_> = documented_operations()
        .difference(&reached)
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "operations the generated client did not reach: {missing:?}"
    );
}
