//! The routing-table API: signed snapshots verified with the published keys, strong ETags and
//! 304, gzip, the `routing:read` scope (and nothing more), revisions that follow domains and
//! healthy instances (not their provider's API health), `changes?since=` and its 410, a watch
//! that resumes after `Last-Event-ID`, key rotation, the Caddy export and the edges' reports.

use std::io::Read;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use bulkhead_routing::{RoutingTable, SignedSnapshot, TrustedKeys};
use bulkhead_simulators::faults::FaultState;

use crate::clouds::fault_set;
use crate::db_tests;
use crate::deployments::{deploy, deployment_wait, fixture};
use crate::support::{ADMIN_TOKEN, TestServer, platform, provider_state};

db_tests!(
    a_signed_table_follows_domains_and_healthy_instances,
    a_revision_changes_only_what_changed_and_survives_a_restart,
    changes_since_a_revision_and_410_past_the_history,
    a_watch_resumes_after_its_last_event_id,
    keys_rotate_with_old_and_new_published,
    edges_report_their_revision_and_the_fleet_shows_lag,
    an_unchanged_table_is_304_only_for_callers_that_may_read_it,
);

/// An API token of the administrator with only `routing:read`.
pub async fn routing_token(s: &TestServer) -> String {
    token_mint(s, ADMIN_TOKEN, &["routing:read"]).await
}

/// The secret of a new API token that `bearer` mints with `scopes`.
async fn token_mint(s: &TestServer, bearer: &str, scopes: &[&str]) -> String {
    let created = s
        .post(
            "/v1/tokens",
            bearer,
            json!({ "name": format!("t-{}", uuid::Uuid::new_v4().simple()), "scopes": scopes }),
        )
        .await;
    created.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The table as served, verified with the published keys.
pub async fn table_fetch(s: &TestServer, token: &str) -> (RoutingTable, Vec<u8>) {
    let keys = s.get("/v1/routing-table/keys", token).await;
    let trusted = TrustedKeys::from_document(keys.assert_status(200).to_string().as_bytes())
        .expect("a keys document");
    let response = s
        .request(Method::GET, "/v1/routing-table", Some(token))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let document = response.bytes().await.unwrap().to_vec();
    let table = SignedSnapshot::verify(&document, &trusted).expect("a valid signature");
    (table, document)
}

/// Waits until the table satisfies `check`; returns it.
pub async fn table_wait(
    s: &TestServer,
    token: &str,
    what: &str,
    check: impl Fn(&RoutingTable) -> bool,
) -> RoutingTable {
    let started = Instant::now();
    loop {
        let (table, _) = table_fetch(s, token).await;
        if check(&table) {
            return table;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{what}: not within 40 s; table: {table:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A project with a service (not deployed) bound to `hostname`; the domain's path.
async fn domain_create(
    s: &TestServer,
    owner: &str,
    project: &str,
    service_id: &str,
    hostname: &str,
) -> String {
    let verified = crate::support::domain_bind(s, owner, project, service_id, hostname).await;
    let id = verified["id"].as_str().unwrap();
    format!("/v1/projects/{project}/domains/{id}")
}

fn service_id(service_path: &str) -> &str {
    service_path.rsplit('/').next().unwrap()
}

async fn a_signed_table_follows_domains_and_healthy_instances(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let token = routing_token(&s).await;
    let (empty, _) = table_fetch(&s, &token).await;
    assert!(empty.routes.is_empty(), "{empty:?}");

    // Strong ETag, 304, gzip.
    let first = s.get("/v1/routing-table", &token).await;
    let etag = first.header("etag").unwrap().to_owned();
    assert!(etag.starts_with('"'), "a strong ETag: {etag}");
    assert_eq!(first.header("cache-control"), Some("no-cache"));
    let unchanged = s
        .request(Method::GET, "/v1/routing-table", Some(&token))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), 304);
    // Compressed once per revision, in the background: identity until it is ready.
    let started = Instant::now();
    let zipped = loop {
        let zipped = s
            .http
            .get(s.url("/v1/routing-table"))
            .bearer_auth(&token)
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        if zipped.headers().contains_key("content-encoding") {
            break zipped;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "never gzip");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    assert_eq!(zipped.headers()["etag"].to_str().unwrap(), etag);
    let mut unzipped = String::new();
    flate2::read::GzDecoder::new(&zipped.bytes().await.unwrap()[..])
        .read_to_string(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, first.text);

    // The scope reads routing tables and nothing else; other scopes do not read them.
    s.get("/v1/projects", &token)
        .await
        .assert_problem(403, "insufficient_scope");
    s.post("/v1/projects", &token, json!({ "name": "x" }))
        .await
        .assert_status(403);
    let reader = token_mint(&s, ADMIN_TOKEN, &["read"]).await;
    s.get("/v1/routing-table", &reader)
        .await
        .assert_problem(403, "insufficient_scope");
    s.get("/v1/routing-table", "bh_not-a-token")
        .await
        .assert_status(401);
    // The table names every tenant's domains and workloads: a user who is not an
    // administrator may mint a `routing:read` token, but it reads nothing with it.
    let user = s.user_with_session("curious@example.com").await;
    let minted = token_mint(&s, &user, &["routing:read"]).await;
    for path in [
        "/v1/routing-table",
        "/v1/routing-table/keys",
        "/v1/routing-table/watch",
        "/v1/edges",
        "/v1/routing-table/changes?since=0",
    ] {
        s.get(path, &minted).await.assert_status(403);
    }
    s.post("/v1/edges/spy/status", &minted, json!({ "revision": 0 }))
        .await
        .assert_status(403);

    // A domain makes a route (no upstream yet); a healthy deployment fills it.
    let fixture = fixture(&s, 2, &["aws"]).await;
    let domain = domain_create(
        &s,
        &fixture.owner,
        &fixture.project,
        service_id(&fixture.service),
        "shop.example.test",
    )
    .await;
    let table = table_wait(&s, &token, "the domain's route", |t| t.routes.len() == 1).await;
    assert!(table.revision > empty.revision);
    assert_eq!(table.routes[0].domain, "shop.example.test");
    assert!(table.routes[0].upstreams.is_empty());
    assert!(table.drop_intended);
    let made = deploy(&s, &fixture.owner, &fixture.service).await;
    let id = made["id"].as_str().unwrap();
    deployment_wait(&s, &fixture.service, id, "healthy", Duration::from_secs(60)).await;
    let table = table_wait(&s, &token, "two upstreams", |t| {
        t.routes.first().is_some_and(|r| r.upstreams.len() == 2)
    })
    .await;
    let instances = s
        .get(&format!("{}/instances", fixture.service), ADMIN_TOKEN)
        .await;
    let keys: Vec<&str> = instances.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["instance_key"].as_str().unwrap())
        .collect();
    for upstream in &table.routes[0].upstreams {
        assert!(
            keys.contains(&upstream.instance_key.as_str()),
            "{upstream:?} in {keys:?}"
        );
        assert_eq!(upstream.provider, "aws");
        assert_eq!(upstream.weight, 1);
        crate::support::get(format!("http://{}/", upstream.address))
            .await
            .expect("the upstream answers");
    }

    // The Caddy export.
    let caddy = s.get("/v1/routing-table/caddy?listen=:8443", &token).await;
    let server = &caddy.assert_status(200)["apps"]["http"]["servers"]["bulkhead"];
    assert_eq!(server["listen"], json!([":8443"]));
    assert_eq!(
        server["routes"][0]["match"][0]["host"],
        json!(["shop.example.test"])
    );
    assert_eq!(
        server["routes"][0]["handle"][0]["upstreams"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        s.get("/v1/routing-table/caddy", &token)
            .await
            .assert_status(200)["apps"]["http"]["servers"]["bulkhead"]["listen"],
        json!([":80"])
    );
    for bad in [
        "/v1/routing-table?format=caddy",
        "/v1/routing-table/caddy?listen=nowhere",
        "/v1/routing-table/caddy?listen=:0",
        "/v1/routing-table/caddy?listen=:65536",
        "/v1/routing-table?listen=:80",
        "/v1/routing-table?surprise=1",
        "/v1/routing-table/caddy?surprise=1",
    ] {
        s.get(bad, &token)
            .await
            .assert_problem(400, "invalid_query");
    }

    // The cloud's API failing does not take its healthy workloads out of the table.
    fault_set(
        &platform.aws.url(),
        FaultState {
            failing: true,
            ..Default::default()
        },
    )
    .await;
    let started = Instant::now();
    while provider_state(&s, "aws").await != "unavailable" {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "aws never became unavailable"
        );
        s.call(
            Method::POST,
            "/v1/providers/aws/probe",
            Some(ADMIN_TOKEN),
            Some(json!({})),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (during, _) = table_fetch(&s, &token).await;
    assert_eq!(during.routes[0].upstreams.len(), 2, "{during:?}");
    fault_set(&platform.aws.url(), FaultState::default()).await;

    // Deleting the domain removes its route, on purpose.
    s.delete(&domain, &fixture.owner).await.assert_status(204);
    let gone = table_wait(&s, &token, "the route removed", |t| t.routes.is_empty()).await;
    assert!(gone.drop_intended);
}

/// A revision carries, and writes, only the routes of the service whose instances changed;
/// a restarted server serves the same revision, byte for byte, from the stored routes.
async fn a_revision_changes_only_what_changed_and_survives_a_restart(s: TestServer) {
    use bulkhead::entity::route;
    use sea_orm::EntityTrait;

    let (_platform, _dir) = platform(&s).await;
    let token = routing_token(&s).await;
    let a = fixture(&s, 1, &["aws"]).await;
    let b = fixture(&s, 1, &["aws"]).await;
    for (owner, project, service, hosts) in [
        (
            &a.owner,
            &a.project,
            &a.service,
            ["a1.example.test", "a2.example.test"],
        ),
        (
            &b.owner,
            &b.project,
            &b.service,
            ["b1.example.test", "b2.example.test"],
        ),
    ] {
        for host in hosts {
            domain_create(&s, owner, project, service_id(service), host).await;
        }
    }
    let served = |t: &RoutingTable, prefix: char| {
        let routes: Vec<_> = t
            .routes
            .iter()
            .filter(|r| r.domain.starts_with(prefix))
            .collect();
        routes.len() == 2 && routes.iter().all(|r| r.upstreams.len() == 1)
    };
    let made = deploy(&s, &a.owner, &a.service).await;
    let id = made["id"].as_str().unwrap();
    deployment_wait(&s, &a.service, id, "healthy", Duration::from_secs(60)).await;
    let before = table_wait(&s, &token, "a's upstreams", |t| served(t, 'a')).await;
    let made = deploy(&s, &b.owner, &b.service).await;
    let id = made["id"].as_str().unwrap();
    deployment_wait(&s, &b.service, id, "healthy", Duration::from_secs(60)).await;
    let after = table_wait(&s, &token, "b's upstreams", |t| served(t, 'b')).await;

    // Every revision since changed b's routes only, and a's are as they were.
    let since = s
        .get(
            &format!("/v1/routing-table/changes?since={}", before.revision),
            &token,
        )
        .await;
    let revisions = since.assert_status(200)["revisions"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!revisions.is_empty());
    for revision in &revisions {
        for change in revision["changes"].as_array().unwrap() {
            let domain = change["route"]["domain"].as_str().unwrap_or_default();
            assert!(domain.starts_with('b'), "{revision:#}");
        }
    }
    let of = |t: &RoutingTable, prefix: char| -> Vec<bulkhead_routing::Route> {
        t.routes
            .iter()
            .filter(|r| r.domain.starts_with(prefix))
            .cloned()
            .collect()
    };
    assert_eq!(of(&after, 'a'), of(&before, 'a'));
    // a's routes were not written again: their rows keep the revision that set them.
    let rows = route::Entity::find().all(&s.app().db).await.unwrap();
    assert_eq!(rows.len(), 4);
    for row in &rows {
        if row.domain.starts_with('a') {
            assert!(row.revision <= before.revision, "{row:?}");
        } else {
            assert!(row.revision > before.revision, "{row:?}");
        }
    }

    // A restart loads the stored routes: the same revision, signed into the same bytes.
    let (latest, document) = table_fetch(&s, &token).await;
    let s = s.restart().await;
    let (again, document_again) = table_fetch(&s, &token).await;
    assert_eq!(again.revision, latest.revision);
    assert!(
        document_again == document,
        "the same document after a restart"
    );
}

/// A service with no deployment and `count` domains made one by one: each a revision.
async fn domains_made(s: &TestServer, count: usize) -> (String, String, Vec<String>) {
    let fixture = fixture(s, 1, &["aws"]).await;
    let mut domains = Vec::new();
    for n in 0..count {
        domains.push(
            domain_create(
                s,
                &fixture.owner,
                &fixture.project,
                service_id(&fixture.service),
                &format!("d{n}.example.test"),
            )
            .await,
        );
        // Each its own revision: wait for the route before the next.
        let token = ADMIN_TOKEN;
        table_wait(s, token, "the route", |t| t.routes.len() == n + 1).await;
    }
    (fixture.owner, fixture.project, domains)
}

async fn changes_since_a_revision_and_410_past_the_history(s: TestServer) {
    let token = routing_token(&s).await;
    let (start, _) = table_fetch(&s, &token).await;
    domains_made(&s, 7).await;
    let (latest, _) = table_fetch(&s, &token).await;
    assert!(latest.revision >= start.revision + 7);

    let recent = s
        .get(
            &format!("/v1/routing-table/changes?since={}", latest.revision - 2),
            &token,
        )
        .await;
    let recent = recent.assert_status(200).clone();
    assert_eq!(recent["revision"], latest.revision);
    let revisions = recent["revisions"].as_array().unwrap();
    assert_eq!(revisions.len(), 2, "{recent:#}");
    assert_eq!(revisions[0]["revision"], latest.revision - 1);
    assert_eq!(revisions[1]["changes"][0]["op"], "set");
    assert_eq!(recent["more"], false);
    let one = s
        .get(
            &format!(
                "/v1/routing-table/changes?since={}&limit=1",
                latest.revision - 2
            ),
            &token,
        )
        .await;
    assert_eq!(one.assert_status(200)["more"], true);
    let none = s
        .get(
            &format!("/v1/routing-table/changes?since={}", latest.revision),
            &token,
        )
        .await;
    assert_eq!(none.assert_status(200)["revisions"], json!([]));

    // The test server keeps 5 revisions: the start is gone, and so is the future.
    s.get(
        &format!("/v1/routing-table/changes?since={}", start.revision),
        &token,
    )
    .await
    .assert_problem(410, "routing_history_gone");
    s.get(
        &format!("/v1/routing-table/changes?since={}", latest.revision + 5),
        &token,
    )
    .await
    .assert_problem(410, "routing_history_gone");
    // The client recovers by fetching the whole table.
    let (whole, _) = table_fetch(&s, &token).await;
    assert_eq!(whole.routes.len(), 7);
    for bad in [
        "since=-1",
        "since=x",
        "since=1&limit=0",
        "since=1&limit=1001",
        "",
    ] {
        s.get(&format!("/v1/routing-table/changes?{bad}"), &token)
            .await
            .assert_problem(400, "invalid_query");
    }
}

/// Reads a watch until `count` events with ids arrived: each event's (id, kind, data).
async fn watch_read(
    s: &TestServer,
    token: &str,
    last_event_id: Option<i64>,
    count: usize,
) -> Vec<(i64, String, String)> {
    let mut request = s
        .http
        .get(s.url("/v1/routing-table/watch"))
        .bearer_auth(token)
        .header("accept", "text/event-stream");
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last.to_string());
    }
    let mut response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut events = Vec::new();
    let mut buffer = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while events.len() < count {
        let chunk = tokio::time::timeout_at(deadline.into(), response.chunk())
            .await
            .expect("the watch goes on")
            .unwrap()
            .expect("the watch does not end");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(|v| v.trim_start().to_owned())
            };
            if let (Some(id), Some(kind)) = (field("id:"), field("event:")) {
                events.push((
                    id.parse().unwrap(),
                    kind,
                    field("data:").unwrap_or_default(),
                ));
            }
        }
    }
    events
}

async fn a_watch_resumes_after_its_last_event_id(s: TestServer) {
    let token = routing_token(&s).await;
    let (start, document) = table_fetch(&s, &token).await;
    let opening = watch_read(&s, &token, None, 2).await;
    assert_eq!(opening[0].0, start.revision);
    assert_eq!(opening[0].1, "snapshot");
    assert_eq!(
        opening[0].2.as_bytes(),
        &document[..],
        "the snapshot is the signed document"
    );
    assert_eq!(opening[1].1, "end-of-snapshot");

    // A change arrives while watching.
    let watching = {
        let s_url = s.url("/v1/routing-table/watch");
        let token = token.clone();
        let http = s.http.clone();
        tokio::spawn(async move {
            let response = http
                .get(s_url)
                .bearer_auth(token)
                .header("accept", "text/event-stream")
                .header("last-event-id", start.revision.to_string())
                .send()
                .await
                .unwrap();
            let mut buffer = String::new();
            let mut response = response;
            while !buffer.contains("event: change") && !buffer.contains("event:change") {
                let chunk = response.chunk().await.unwrap().unwrap();
                buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
            buffer
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (owner, project, domains) = domains_made(&s, 1).await;
    let seen = tokio::time::timeout(Duration::from_secs(20), watching)
        .await
        .expect("the change is streamed")
        .unwrap();
    assert!(seen.contains("d0.example.test"), "{seen}");
    let (after_first, _) = table_fetch(&s, &token).await;

    // Disconnected meanwhile: two more changes; resuming sends exactly those, no snapshot.
    s.delete(&domains[0], &owner).await.assert_status(204);
    table_wait(&s, &token, "removed", |t| t.routes.is_empty()).await;
    let fixture_service = s
        .get(&format!("/v1/projects/{project}/services"), &owner)
        .await;
    let service = fixture_service.assert_status(200)["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    domain_create(&s, &owner, &project, &service, "again.example.test").await;
    let latest = table_wait(&s, &token, "added again", |t| t.routes.len() == 1).await;
    let resumed = watch_read(&s, &token, Some(after_first.revision), 2).await;
    let ids: Vec<i64> = resumed.iter().map(|e| e.0).collect();
    assert_eq!(
        ids,
        vec![after_first.revision + 1, latest.revision],
        "{resumed:?}"
    );
    assert!(resumed.iter().all(|e| e.1 == "change"));
    let first: Value = serde_json::from_str(&resumed[0].2).unwrap();
    assert_eq!(
        first["changes"][0],
        json!({ "op": "remove", "domain": "d0.example.test" })
    );

    // Too far behind for the history (5 revisions here): the whole table again.
    for n in 0..5 {
        domain_create(
            &s,
            &owner,
            &project,
            &service,
            &format!("more{n}.example.test"),
        )
        .await;
        table_wait(&s, &token, "one more", |t| t.routes.len() == n + 2).await;
    }
    let (latest, _) = table_fetch(&s, &token).await;
    let behind = watch_read(&s, &token, Some(after_first.revision), 2).await;
    assert_eq!(behind[0].1, "snapshot");
    assert_eq!(behind[0].0, latest.revision);
    assert_eq!(behind[1].1, "end-of-snapshot");
}

async fn keys_rotate_with_old_and_new_published(s: TestServer) {
    let token = routing_token(&s).await;
    let keys = s.get("/v1/routing-table/keys", &token).await;
    let keys = keys.assert_status(200)["keys"].as_array().unwrap().clone();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0]["state"], "active");
    assert!(!keys.iter().any(|k| k.to_string().contains("private")));
    let old = keys[0]["id"].as_str().unwrap().to_owned();

    // Only administrators rotate.
    let writer = s
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            json!({ "name": "w", "scopes": ["write"] }),
        )
        .await;
    let writer = writer.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    for who in [&token, &writer] {
        s.call(Method::POST, "/v1/routing-table/keys", Some(who), None)
            .await
            .assert_status(403);
    }
    let next = s
        .call(
            Method::POST,
            "/v1/routing-table/keys",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    let next = next.assert_status(201)["id"].as_str().unwrap().to_owned();
    let (table, document) = table_fetch(&s, &token).await;
    let signed_by = |document: &[u8]| {
        serde_json::from_slice::<Value>(document).unwrap()["key_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(signed_by(&document), old, "a next key does not sign yet");

    s.call(
        Method::POST,
        &format!("/v1/routing-table/keys/{next}/activate"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await
    .assert_status(200);
    let (resigned, document) = table_fetch(&s, &token).await;
    assert_eq!(signed_by(&document), next);
    assert_eq!(
        resigned.revision, table.revision,
        "the same table, signed anew"
    );
    let keys = s.get("/v1/routing-table/keys", &token).await;
    let states: Vec<(String, String)> = keys.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["id"].as_str().unwrap().to_owned(),
                k["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        states.contains(&(old.clone(), "retired".into())),
        "{states:?}"
    );
    assert!(
        states.contains(&(next.clone(), "active".into())),
        "{states:?}"
    );

    s.delete(&format!("/v1/routing-table/keys/{next}"), ADMIN_TOKEN)
        .await
        .assert_problem(409, "routing_key_active");
    s.delete(&format!("/v1/routing-table/keys/{old}"), ADMIN_TOKEN)
        .await
        .assert_status(204);
    s.delete(&format!("/v1/routing-table/keys/{old}"), ADMIN_TOKEN)
        .await
        .assert_status(404);
    // Survives a restart: still signed by the new key.
    let s = s.restart().await;
    let (_, document) = table_fetch(&s, &token).await;
    assert_eq!(signed_by(&document), next);
}

async fn edges_report_their_revision_and_the_fleet_shows_lag(s: TestServer) {
    let token = routing_token(&s).await;
    let (table, _) = table_fetch(&s, &token).await;
    let report = s
        .post(
            "/v1/edges/edge-1/status",
            &token,
            json!({ "revision": table.revision, "snapshot_age_seconds": 1.5, "agent_version": "0.1.0" }),
        )
        .await;
    let report = report.assert_status(200).clone();
    assert_eq!(report["lag"], 0);
    domains_made(&s, 1).await;
    let listed = s.get("/v1/edges", &token).await;
    let edge = &listed.assert_status(200)["items"][0];
    assert_eq!(edge["id"], "edge-1");
    assert_eq!(edge["revision"], table.revision);
    assert_eq!(edge["lag"], 1);
    assert_eq!(edge["agent_version"], "0.1.0");

    // Another token may not report as this edge; the owner reports a refusal.
    let other = routing_token(&s).await;
    s.post("/v1/edges/edge-1/status", &other, json!({ "revision": 1 }))
        .await
        .assert_problem(403, "edge_owned");
    let refused = s
        .post(
            "/v1/edges/edge-1/status",
            &token,
            json!({ "revision": table.revision, "last_refusal": { "revision": 99, "reason": "bad_signature" } }),
        )
        .await;
    assert_eq!(
        refused.assert_status(200)["last_refusal"]["reason"],
        "bad_signature"
    );

    // Bad reports.
    for (body, status) in [
        (json!({ "revision": 1, "surprise": true }), 422),
        (json!({ "revision": "one" }), 422),
        (json!({ "revision": table.revision + 100 }), 422),
        (json!({ "revision": 1, "snapshot_age_seconds": -1 }), 422),
        (
            json!({ "revision": 1, "last_refusal": { "revision": -1, "reason": "x" } }),
            422,
        ),
        (
            json!({ "revision": 1, "agent_version": "x".repeat(65) }),
            422,
        ),
    ] {
        let reply = s
            .post("/v1/edges/edge-2/status", &token, body.clone())
            .await;
        assert_eq!(reply.status, status, "{body}: {}", reply.text);
    }
    s.post(
        "/v1/edges/Not_An_Id/status",
        &token,
        json!({ "revision": 1 }),
    )
    .await
    .assert_status(422);
    // A password session, or a token without the scope, does not report.
    s.post(
        "/v1/edges/edge-3/status",
        ADMIN_TOKEN,
        json!({ "revision": 1 }),
    )
    .await
    .assert_status(200);
    let session = s.user_with_session("edgy@example.com").await;
    s.post(
        "/v1/edges/edge-4/status",
        &session,
        json!({ "revision": 1 }),
    )
    .await
    .assert_status(403);

    // Administrators forget an edge; nobody else does.
    s.delete("/v1/edges/edge-1", &token)
        .await
        .assert_status(403);
    s.delete("/v1/edges/edge-1", ADMIN_TOKEN)
        .await
        .assert_status(204);
    let listed = s.get("/v1/edges", &token).await;
    assert!(!listed.text.contains("edge-1"));
}

/// An edge's poll of an unchanged table is answered before the general middleware (counted by
/// the server), with the same headers as the general path's 304, and only for a caller the
/// general path would let read it: a narrower scope, a user who is not an administrator, a
/// revoked token and a stale tag all go the general way.
async fn an_unchanged_table_is_304_only_for_callers_that_may_read_it(s: TestServer) {
    let created = s
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            json!({ "name": "edge-lean", "scopes": ["routing:read"] }),
        )
        .await;
    let created = created.assert_status(201);
    let token = created["secret"].as_str().unwrap().to_owned();
    let token_id = created["id"].as_str().unwrap().to_owned();
    let first = s.get("/v1/routing-table", &token).await;
    let revision = first.assert_status(200)["table"]["revision"]
        .as_i64()
        .unwrap();
    let etag = first.header("etag").unwrap().to_owned();
    let poll = |token: &str, tag: &str, path: &str| {
        s.request(Method::GET, path, Some(token))
            .header("if-none-match", tag)
            .send()
    };
    // The first reads put the credential in the auth cache (on PostgreSQL, once the change
    // feed listens: until then the cache is not used), after which the lean path answers.
    let lean = || {
        s.app()
            .routing
            .not_modified_lean
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let started = Instant::now();
    loop {
        let before = lean();
        let unchanged = poll(&token, &etag, "/v1/routing-table").await.unwrap();
        assert_eq!(unchanged.status(), 304);
        if lean() > before {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the lean path never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut lean_headers = None;
    for _ in 0..3 {
        let before = lean();
        let unchanged = poll(&token, &etag, "/v1/routing-table").await.unwrap();
        assert_eq!(unchanged.status(), 304);
        assert_eq!(lean(), before + 1);
        assert_eq!(unchanged.headers()["etag"].to_str().unwrap(), etag);
        assert_eq!(
            unchanged.headers()["bulkhead-routing-revision"]
                .to_str()
                .unwrap(),
            revision.to_string()
        );
        assert!(unchanged.headers().contains_key("x-request-id"));
        lean_headers = Some(unchanged.headers().clone());
        assert!(unchanged.bytes().await.unwrap().is_empty());
    }
    // A stale tag gets the table; a query goes the general way (and still gets its 304).
    let stale = poll(&token, "\"stale\"", "/v1/routing-table")
        .await
        .unwrap();
    assert_eq!(stale.status(), 200);
    let before = lean();
    let general = poll(&token, &etag, "/v1/routing-table?").await.unwrap();
    assert_eq!(general.status(), 304);
    assert_eq!(lean(), before);
    // Both ways' 304s carry the tag, the revision and the cache headers (as OpenAPI says).
    let lean_headers = lean_headers.unwrap();
    for name in ["etag", "bulkhead-routing-revision", "cache-control"] {
        assert_eq!(
            general.headers().get(name),
            lean_headers.get(name),
            "{name}"
        );
    }

    // Callers that may not read it get what the general path says, tag or not.
    let reader = token_mint(&s, ADMIN_TOKEN, &["read"]).await;
    s.get("/v1/projects", &reader).await.assert_status(200);
    let user = s.user_with_session("lean@example.com").await;
    let minted = token_mint(&s, &user, &["routing:read"]).await;
    for (caller, status) in [
        (&reader, 403),
        (&minted, 403),
        (&"bh_not-a-token".to_owned(), 401),
    ] {
        for _ in 0..2 {
            let refused = poll(caller, &etag, "/v1/routing-table").await.unwrap();
            assert_eq!(refused.status(), status);
            assert_eq!(
                refused.headers()["content-type"].to_str().unwrap(),
                "application/problem+json"
            );
        }
    }
    // Revoked while known to the cache: refused at once.
    s.delete(&format!("/v1/tokens/{token_id}"), ADMIN_TOKEN)
        .await
        .assert_status(204);
    let revoked = poll(&token, &etag, "/v1/routing-table").await.unwrap();
    assert_eq!(revoked.status(), 401);
}
