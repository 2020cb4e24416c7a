//! Domains as a hostile tenant would try them: a claim routes only once its project proved
//! control of the name in DNS, a squatter's claim locks the owner out of nothing, a verified
//! name (and every name under it) is held, and the refusals do not say who holds what.

use reqwest::Method;
use serde_json::{Value, json};

use crate::db_tests;
use crate::resources::{service_body, setup};
use crate::routing::{routing_token, table_fetch};
use crate::support::{ADMIN_TOKEN, TestServer, dns, eventually};

db_tests!(
    domains_are_validated_and_a_project_claims_a_name_once,
    a_domain_routes_only_once_its_project_proves_control,
    a_verified_name_and_the_names_under_it_are_held,
);

/// A tenant: its token, project and a service's id.
struct Tenant {
    token: String,
    project: String,
    service: String,
}

async fn tenant(s: &TestServer, email: &str) -> Tenant {
    let (token, project, env) = setup(s, email).await;
    let service = s
        .post(
            &format!("/v1/projects/{project}/services"),
            &token,
            service_body(&env, "web"),
        )
        .await;
    let service = service.assert_status(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    Tenant {
        token,
        project,
        service,
    }
}

impl Tenant {
    async fn claim(&self, s: &TestServer, hostname: &str) -> crate::support::Reply {
        s.post(
            &format!("/v1/projects/{}/domains", self.project),
            &self.token,
            json!({ "hostname": hostname, "service_id": self.service }),
        )
        .await
    }

    async fn verify(&self, s: &TestServer, domain: &Value) -> crate::support::Reply {
        s.call(
            Method::POST,
            &format!(
                "/v1/projects/{}/domains/{}/verify",
                self.project,
                domain["id"].as_str().unwrap()
            ),
            Some(&self.token),
            None,
        )
        .await
    }
}

/// A zone no other test uses: the suite's DNS is shared, and both backends' runs of a test
/// publish there.
fn zone(name: &str) -> String {
    format!(
        "{name}-{}.test",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Publishes `domain`'s challenge in the suite's DNS.
fn publish(domain: &Value) {
    dns().txt_add(
        domain["challenge"]["name"].as_str().unwrap(),
        domain["challenge"]["value"].as_str().unwrap().to_owned(),
    );
}

/// The hostnames in the routing table, with the project each routes to.
async fn routed(s: &TestServer) -> Vec<(String, String)> {
    let token = routing_token(s).await;
    let (table, _) = table_fetch(s, &token).await;
    table
        .routes
        .into_iter()
        .map(|route| (route.domain, route.project_id.to_string()))
        .collect()
}

async fn domains_are_validated_and_a_project_claims_a_name_once(s: TestServer) {
    let alice = tenant(&s, "dom-alice@example.com").await;
    let created = alice.claim(&s, "Shop.Example.COM").await;
    let domain = created.assert_status(201).clone();
    assert_eq!(domain["hostname"], "shop.example.com");
    assert_eq!(domain["status"], "pending");
    assert!(domain["verified_at"].is_null());
    assert_eq!(domain["challenge"]["record_type"], "TXT");
    assert_eq!(
        domain["challenge"]["name"],
        "_bulkhead-challenge.shop.example.com"
    );
    let value = domain["challenge"]["value"].as_str().unwrap();
    assert!(
        value.starts_with("bulkhead-verification=") && value.len() == 22 + 32,
        "{value}"
    );
    for bad in [
        "localhost",
        "*.example.com",
        "10.0.0.1",
        "a..b.com",
        "-x.example.com",
        // The schema's pattern: no trailing dot, no spaces, the last label starts with a letter.
        "shop.example.com.",
        " shop.example.com",
        "shop.example.1com",
    ] {
        alice
            .claim(&s, bad)
            .await
            .assert_problem(422, "invalid_request");
    }
    // One claim of a name per project.
    alice
        .claim(&s, "shop.example.com")
        .await
        .assert_problem(409, "hostname_taken");
    // A service of another project cannot be bound, and another project's domain is not found.
    let mallory = tenant(&s, "dom-mallory@example.com").await;
    s.post(
        &format!("/v1/projects/{}/domains", alice.project),
        &alice.token,
        json!({ "hostname": "x.example.com", "service_id": mallory.service }),
    )
    .await
    .assert_problem(422, "invalid_request");
    let path = format!(
        "/v1/projects/{}/domains/{}",
        alice.project,
        domain["id"].as_str().unwrap()
    );
    s.call(
        Method::POST,
        &format!("{path}/verify"),
        Some(&mallory.token),
        None,
    )
    .await
    .assert_problem(404, "not_found");
    // A viewer of the project reads the domain but cannot verify it.
    let viewer = s.user_with_session("dom-viewer@example.com").await;
    s.member_add(&alice.project, "dom-viewer@example.com", "viewer")
        .await;
    s.get(&path, &viewer).await.assert_status(200);
    s.call(Method::POST, &format!("{path}/verify"), Some(&viewer), None)
        .await
        .assert_problem(403, "forbidden");
    // The owner's token limited to reading cannot verify either.
    let read_only = s
        .post(
            "/v1/tokens",
            &alice.token,
            json!({ "name": "reader", "scopes": ["read"] }),
        )
        .await;
    let read_only = read_only.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    s.call(
        Method::POST,
        &format!("{path}/verify"),
        Some(&read_only),
        None,
    )
    .await
    .assert_problem(403, "insufficient_scope");
    s.delete(&path, &alice.token).await.assert_status(204);
}

async fn a_domain_routes_only_once_its_project_proves_control(s: TestServer) {
    let alice = tenant(&s, "route-alice@example.com").await;
    let mallory = tenant(&s, "route-mallory@example.com").await;
    let host = format!("shop.{}", zone("route"));
    // The squatter claims the name first: that locks the owner out of nothing.
    let squatted = mallory.claim(&s, &host).await;
    let squatted = squatted.assert_status(201).clone();
    let claimed = alice.claim(&s, &host).await;
    let claimed = claimed.assert_status(201).clone();
    assert_ne!(
        squatted["challenge"]["value"],
        claimed["challenge"]["value"]
    );
    assert!(routed(&s).await.is_empty(), "pending domains do not route");

    // Nothing in DNS: 422, saying what DNS has.
    let unverified = alice.verify(&s, &claimed).await;
    unverified.assert_problem(422, "domain_unverified");
    assert!(
        unverified.body["detail"]
            .as_str()
            .unwrap()
            .contains("no TXT record"),
        "{}",
        unverified.text
    );
    // Another value at the name (the squatter's own) proves nothing for alice's claim.
    publish(&squatted);
    let other_value = alice.verify(&s, &claimed).await;
    other_value.assert_problem(422, "domain_unverified");
    assert!(
        other_value
            .text
            .contains(squatted["challenge"]["value"].as_str().unwrap()),
        "the detail names what DNS holds: {}",
        other_value.text
    );

    publish(&claimed);
    let verified = alice.verify(&s, &claimed).await;
    let verified = verified.assert_status(200).clone();
    assert_eq!(verified["status"], "verified");
    assert!(verified["challenge"].is_null());
    assert!(verified["verified_at"].is_string());
    assert!(verified.get("verification_token").is_none());
    // Verifying again answers the domain as it is.
    alice.verify(&s, &claimed).await.assert_status(200);
    eventually("the verified domain routes", async || {
        routed(&s).await == [(host.clone(), alice.project.clone())]
    })
    .await;

    // The squatter's value is in DNS too (say it once controlled the zone): the name is held
    // all the same, and the refusal does not say by whom.
    let refused = mallory.verify(&s, &squatted).await;
    refused.assert_problem(409, "hostname_taken");
    assert!(!refused.text.contains(&alice.project));
    assert!(!refused.text.contains("route-alice"));
    assert_eq!(routed(&s).await, [(host.clone(), alice.project.clone())]);

    // Once the owner lets go, the other claim can be verified.
    let path = format!(
        "/v1/projects/{}/domains/{}",
        alice.project,
        claimed["id"].as_str().unwrap()
    );
    s.delete(&path, &alice.token).await.assert_status(204);
    mallory.verify(&s, &squatted).await.assert_status(200);
    eventually("the name routes to its new holder", async || {
        routed(&s).await == [(host.clone(), mallory.project.clone())]
    })
    .await;

    // Every verification is in the audit log.
    let audit = s.get("/v1/audit-events?limit=200", ADMIN_TOKEN).await;
    let verifications = audit.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"] == "domain.verify")
        .count();
    assert_eq!(verifications, 2, "{}", audit.text);
}

async fn a_verified_name_and_the_names_under_it_are_held(s: TestServer) {
    let alice = tenant(&s, "held-alice@example.com").await;
    let mallory = tenant(&s, "held-mallory@example.com").await;
    let zone = zone("held");
    let parent = alice.claim(&s, &format!("shopa.{zone}")).await;
    let parent = parent.assert_status(201).clone();
    publish(&parent);
    alice.verify(&s, &parent).await.assert_status(200);

    // Another tenant can claim neither the name nor one under it; nothing says who holds it.
    for name in ["shopa", "a.shopa", "x.y.shopa"] {
        let refused = mallory.claim(&s, &format!("{name}.{zone}")).await;
        refused.assert_problem(409, "hostname_taken");
        assert!(!refused.text.contains(&alice.project), "{}", refused.text);
        assert!(!refused.text.contains("held-alice"), "{}", refused.text);
    }
    // A sibling is not under it.
    mallory
        .claim(&s, &format!("shopb.{zone}"))
        .await
        .assert_status(201);

    // The holder's names under it are verified at once, and route.
    let child = alice.claim(&s, &format!("api.shopa.{zone}")).await;
    let child = child.assert_status(201).clone();
    assert_eq!(child["status"], "verified");
    assert!(child["challenge"].is_null());
    eventually("both of alice's names route", async || {
        let routed = routed(&s).await;
        routed.len() == 2 && routed.iter().all(|(_, project)| *project == alice.project)
    })
    .await;
}

/// DNS that does not answer: 503 with `Retry-After`, and the domain stays pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_outage_answers_503_and_changes_nothing() {
    let failing = bulkhead_simulators::dns::DnsSimulator::start()
        .await
        .unwrap();
    failing.fail(true);
    let (database_url, dir) = crate::support::database_fresh(crate::support::Backend::Sqlite)
        .await
        .unwrap();
    let s = TestServer::start_on(
        crate::support::Backend::Sqlite,
        database_url,
        dir,
        |settings| settings.dns_resolver = Some(failing.dns_addr),
    )
    .await;
    let alice = tenant(&s, "outage@example.com").await;
    let claimed = alice.claim(&s, "shop.outage.test").await;
    let claimed = claimed.assert_status(201).clone();
    failing.txt_set(
        claimed["challenge"]["name"].as_str().unwrap(),
        vec![claimed["challenge"]["value"].as_str().unwrap().to_owned()],
    );
    let refused = alice.verify(&s, &claimed).await;
    refused.assert_problem(503, "dns_unavailable");
    assert_eq!(refused.header("retry-after"), Some("5"));
    let path = format!(
        "/v1/projects/{}/domains/{}",
        alice.project,
        claimed["id"].as_str().unwrap()
    );
    assert_eq!(
        s.get(&path, &alice.token).await.assert_status(200)["status"],
        "pending"
    );
    // DNS answers again: the record is found.
    failing.fail(false);
    assert_eq!(
        alice.verify(&s, &claimed).await.assert_status(200)["status"],
        "verified"
    );
}
