//! A service's logs: lines its instances print on the host agent reach a reader (a page, paged
//! with a cursor without repeats or losses, filtered by instance and deployment) and a
//! follower (Server-Sent Events, resumable), and nobody else.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use bulkhead_simulators::faults::FaultState;

use crate::clouds::fault_set;
use crate::db_tests;
use crate::deployments::{deploy, deployment_wait};
use crate::revocation::{ended_by, stream_open};
use crate::support::{TestServer, eventually, platform};

db_tests!(
    a_service_s_lines_reach_its_readers_and_followers_only,
    logs_of_three_clouds_degrade_per_provider_and_lose_nothing,
);

/// A project with a service of `replicas` instances of `bulkhead hello` on `providers`.
async fn hello_service(s: &TestServer, replicas: u32, providers: &[&str]) -> (String, String) {
    let made = s
        .project_with_service_of(
            "logs",
            json!({
                "name": "web",
                "source": { "type": "command", "command": [env!("CARGO_BIN_EXE_bulkhead"), "hello"] },
                "port": 8080,
                "replicas": replicas,
                "placement": { "providers": providers.iter().map(|p| json!({ "name": p })).collect::<Vec<_>>() },
                "health_check": { "path": "/", "interval_ms": 1000, "timeout_ms": 1000, "start_timeout_secs": 30 },
            }),
        )
        .await;
    (
        made.owner,
        format!("/v1/projects/{}/services/{}", made.id, made.service),
    )
}

/// The texts of a page's lines.
fn texts(page: &Value) -> Vec<String> {
    page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Reads pages of `limit` lines from `first` on, until one is empty or `enough` lines came
/// (health checks print lines all the time); returns their lines.
async fn page_through(
    s: &TestServer,
    token: &str,
    first: &str,
    limit: u32,
    enough: usize,
) -> Vec<Value> {
    let mut lines = Vec::new();
    let mut url = format!("{first}&limit={limit}");
    loop {
        let page = s.get(&url, token).await;
        let page = page.assert_status(200).clone();
        let got = page["lines"].as_array().unwrap().clone();
        assert!(got.len() <= limit as usize);
        if got.is_empty() {
            return lines;
        }
        lines.extend(got);
        if lines.len() >= enough {
            return lines;
        }
        let cursor = page["next_cursor"].as_str().unwrap();
        url = format!(
            "{}?cursor={cursor}&limit={limit}",
            first.split('?').next().unwrap()
        );
    }
}

async fn a_service_s_lines_reach_its_readers_and_followers_only(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let started = chrono::Utc::now() - chrono::Duration::seconds(5);
    let (owner, service) = hello_service(&s, 2, &["metal"]).await;
    let made = deploy(&s, &owner, &service).await;
    let deployment = made["id"].as_str().unwrap().to_owned();
    let healthy = deployment_wait(
        &s,
        &service,
        &deployment,
        "healthy",
        Duration::from_secs(60),
    )
    .await;
    let instances: Vec<(String, String)> = healthy["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|instance| {
            (
                instance["instance_key"].as_str().unwrap().to_owned(),
                instance["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(instances.len(), 2);
    let logs = format!("{service}/logs");

    // The newest lines: each instance started (the agent's note) and said so (its stdout).
    eventually("both instances' first lines", async || {
        let page = s.get(&logs, &owner).await;
        let page = page.assert_status(200);
        instances.iter().all(|(key, _)| {
            page["lines"].as_array().unwrap().iter().any(|line| {
                line["instance_key"] == key.as_str()
                    && line["stream"] == "stdout"
                    && line["text"].as_str().unwrap().contains("listening on port")
            }) && page["lines"].as_array().unwrap().iter().any(|line| {
                line["instance_key"] == key.as_str()
                    && line["stream"] == "system"
                    && line["text"].as_str().unwrap().starts_with("started ")
            })
        })
    })
    .await;
    let page = s.get(&logs, &owner).await;
    let page = page.assert_status(200).clone();
    assert_eq!(page["missing"], json!([]), "{page}");
    assert!(page["lines"].as_array().unwrap().iter().all(|line| {
        line["deployment_id"] == deployment.as_str() && line["time"].as_str().is_some()
    }));

    // What each instance prints in answer to a request reaches a reader after the cursor, on
    // its stream, in time order.
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    for (n, (_, address)) in instances.iter().enumerate() {
        for path in [format!("/visit-{n}"), format!("/fail-{n}")] {
            let _ = crate::support::get(format!("http://{address}{path}")).await;
        }
    }
    let after = format!("{logs}?cursor={cursor}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let fresh = loop {
        let fresh = page_through(&s, &owner, &after, 1000, usize::MAX).await;
        let printed = |text: &str| fresh.iter().any(|line| line["text"] == text);
        if printed("GET /fail-0 500") && printed("GET /fail-1 500") {
            break fresh;
        }
        assert!(Instant::now() < deadline, "the requests' lines: {fresh:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for (n, (key, _)) in instances.iter().enumerate() {
        let of = |text: &str| {
            fresh
                .iter()
                .find(|line| line["instance_key"] == key.as_str() && line["text"] == text)
                .unwrap_or_else(|| panic!("no `{text}` of {key}: {fresh:#?}"))
                .clone()
        };
        assert_eq!(of(&format!("GET /visit-{n} 200"))["stream"], "stdout");
        assert_eq!(of(&format!("GET /fail-{n} 500"))["stream"], "stderr");
    }
    let times: Vec<&str> = fresh
        .iter()
        .map(|line| line["time"].as_str().unwrap())
        .collect();
    let mut sorted = times.clone();
    sorted.sort();
    assert_eq!(times, sorted, "merged in time order");

    // Paged two lines at a time from a time, the lines are those of one big page: none
    // repeated, none lost.
    let since = format!(
        "{logs}?since={}",
        started.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    let one_page = s.get(&format!("{since}&limit=1000"), &owner).await;
    let one_page = texts(one_page.assert_status(200));
    let paged: Vec<String> = page_through(&s, &owner, &since, 2, one_page.len())
        .await
        .iter()
        .map(|line| line["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paged[..one_page.len()], one_page[..], "paged as one page");
    assert!(one_page.iter().any(|text| text == "GET /visit-0 200"));

    // Filters: one instance, one deployment.
    let (key, _) = &instances[0];
    let only = s
        .get(&format!("{logs}?instance={key}&limit=1000"), &owner)
        .await;
    assert!(
        only.assert_status(200)["lines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|line| line["instance_key"] == key.as_str())
    );
    let of_deployment = s
        .get(&format!("{logs}?deployment={deployment}"), &owner)
        .await;
    assert!(!texts(of_deployment.assert_status(200)).is_empty());
    let other_deployment = s
        .get(
            &format!("{logs}?deployment={}", uuid::Uuid::new_v4()),
            &owner,
        )
        .await;
    assert!(texts(other_deployment.assert_status(200)).is_empty());

    // A follower gets a line as it is printed, then resumes after the last event it saw.
    let mut follower = follow(&s, &logs, &owner, None).await;
    assert_eq!(follower.status(), 200);
    assert_eq!(follower.headers()["content-type"], "text/event-stream");
    let printed = Instant::now();
    let _ = crate::support::get(format!("http://{}/followed", instances[1].1)).await;
    let (last_id, event) = event_with(&mut follower, "GET /followed 200").await;
    let latency = printed.elapsed();
    assert!(latency < Duration::from_secs(5), "{latency:?}");
    let followed = event["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|line| line["text"] == "GET /followed 200")
        .unwrap();
    assert_eq!(followed["instance_key"], instances[1].0.as_str());
    drop(follower);
    let _ = crate::support::get(format!("http://{}/after-reconnect", instances[0].1)).await;
    let mut resumed = follow(&s, &logs, &owner, Some(&last_id)).await;
    let (_, event) = event_with(&mut resumed, "GET /after-reconnect 200").await;
    assert!(
        !texts(&event).iter().any(|text| text == "GET /followed 200"),
        "a resumed follower gets nothing twice: {event}"
    );
    drop(resumed);

    // Nobody else: another tenant, no credential, bad values.
    let stranger = s.user_with_session("stranger-logs@example.com").await;
    s.get(&logs, &stranger)
        .await
        .assert_problem(404, "not_found");
    let anonymous = s.http.get(s.url(&logs)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    for (query, code) in [
        ("limit=0", "invalid_request"),
        ("limit=1001", "invalid_request"),
        ("cursor=not-a-cursor", "invalid_cursor"),
        ("instance=NOT_A_KEY", "invalid_request"),
        ("since=3026-01-01T00:00:00Z", "invalid_request"),
        ("since=yesterday", "invalid_query"),
        ("colour=blue", "invalid_query"),
    ] {
        let refused = s.get(&format!("{logs}?{query}"), &owner).await;
        assert!(
            refused.status == 400 || refused.status == 422,
            "{query}: {}",
            refused.text
        );
        assert_eq!(refused.body["code"], code, "{query}: {}", refused.text);
    }
    let bad_resume = follow(&s, &logs, &owner, Some("garbage")).await;
    assert_eq!(bad_resume.status(), 400);

    // A follower removed from the project is cut off within a second.
    let project = service.split('/').nth(3).unwrap().to_owned();
    s.user_create("viewer-logs@example.com").await;
    s.member_add(&project, "viewer-logs@example.com", "viewer")
        .await;
    let viewer = s.login("viewer-logs@example.com").await;
    let viewer_access = viewer["access_token"].as_str().unwrap().to_owned();
    let viewer_id = s.get("/v1/me", &viewer_access).await.assert_status(200)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let stream = stream_open(&s, &logs, &viewer_access).await;
    ended_by(
        stream,
        async || {
            s.delete(
                &format!("/v1/projects/{project}/members/{viewer_id}"),
                &owner,
            )
            .await
            .assert_status(204);
        },
        "a removed member",
    )
    .await;
    s.get(&logs, &viewer_access)
        .await
        .assert_problem(404, "not_found");

    // A project's followers are bounded.
    let mut open = Vec::new();
    for _ in 0..20 {
        let follower = follow(&s, &logs, &owner, None).await;
        assert_eq!(follower.status(), 200);
        open.push(follower);
    }
    let one_more = follow(&s, &logs, &owner, None).await;
    assert_eq!(one_more.status(), 409);
    let refused: Value = one_more.json().await.unwrap();
    assert_eq!(refused["code"], "limit_reached");
    drop(open);
    eventually("a follower's place given back", async || {
        let follower = follow(&s, &logs, &owner, None).await;
        follower.status() == 200
    })
    .await;
}

/// A service on gcp, aws and metal: a line each instance prints reaches a follower; with gcp's
/// account suspended, the follower is told which instance is missing and why while the aws and
/// metal lines keep coming; once gcp is back, what its instance printed meanwhile comes too.
async fn logs_of_three_clouds_degrade_per_provider_and_lose_nothing(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let providers = ["gcp", "aws", "metal"];
    let (owner, service) = hello_service(&s, 3, &providers).await;
    let made = deploy(&s, &owner, &service).await;
    let healthy = deployment_wait(
        &s,
        &service,
        made["id"].as_str().unwrap(),
        "healthy",
        Duration::from_secs(60),
    )
    .await;
    let on = |provider: &str| -> (String, String) {
        let instance = healthy["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|instance| instance["provider"] == provider)
            .unwrap_or_else(|| panic!("no instance on {provider}: {healthy:#}"));
        (
            instance["instance_key"].as_str().unwrap().to_owned(),
            instance["address"].as_str().unwrap().to_owned(),
        )
    };
    let logs = format!("{service}/logs");
    let mut follower = follow(&s, &logs, &owner, None).await;
    assert_eq!(follower.status(), 200);
    for provider in providers {
        let (key, address) = on(provider);
        let path = format!("/hello-{provider}");
        let printed = Instant::now();
        let _ = crate::support::get(format!("http://{address}{path}")).await;
        let (_, event) = event_with(&mut follower, &format!("GET {path} 200")).await;
        let line = event["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|line| line["text"] == format!("GET {path} 200"))
            .unwrap()
            .clone();
        assert_eq!(line["instance_key"], key.as_str(), "{provider}");
        assert_eq!(line["stream"], "stdout", "{provider}");
        println!(
            "# {provider}: printed → follower in {:?}",
            printed.elapsed()
        );
    }

    fault_set(
        &platform.gcp.url(),
        FaultState {
            suspended: true,
            ..Default::default()
        },
    )
    .await;
    let (gcp_key, gcp_address) = on("gcp");
    let _ = crate::support::get(format!("http://{gcp_address}/during-outage")).await;
    let (_, event) = event_where(&mut follower, "gcp named missing", |page| {
        page["missing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|missing| missing["instance_key"] == gcp_key.as_str())
    })
    .await;
    let missing = event["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{event}");
    assert_eq!(missing[0]["provider"], "gcp");
    // What the cloud answered names the platform's account: operators only.
    let detail = missing[0]["detail"].as_str().unwrap();
    assert!(
        !detail.contains(bulkhead::dev::GCP_PROJECT) && !detail.contains("HTTP"),
        "{detail}"
    );
    assert!(detail.starts_with("provider `gcp` "), "{detail}");
    assert!(
        ["provider_account_suspended", "provider_unavailable"]
            .contains(&missing[0]["code"].as_str().unwrap()),
        "{event}"
    );
    for provider in ["aws", "metal"] {
        let (_, address) = on(provider);
        let path = format!("/while-gcp-is-out-{provider}");
        let _ = crate::support::get(format!("http://{address}{path}")).await;
        event_with(&mut follower, &format!("GET {path} 200")).await;
    }
    let page = s.get(&logs, &owner).await;
    assert_eq!(
        page.assert_status(200)["missing"][0]["instance_key"],
        gcp_key.as_str()
    );

    fault_set(&platform.gcp.url(), FaultState::default()).await;
    let (_, event) = event_with(&mut follower, "GET /during-outage 200").await;
    assert_eq!(event["missing"], json!([]), "{event}");
    platform.shutdown().await;
}

/// Opens a follower of `logs` as `token`, resuming after `last_event_id`.
async fn follow(
    s: &TestServer,
    logs: &str,
    token: &str,
    last_event_id: Option<&str>,
) -> reqwest::Response {
    let mut request = s
        .http
        .get(s.url(logs))
        .bearer_auth(token)
        .header("accept", "text/event-stream");
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last);
    }
    request.send().await.unwrap()
}

/// Reads `stream` until a `logs` event holds a line `text`; returns its id and data.
async fn event_with(stream: &mut reqwest::Response, text: &str) -> (String, Value) {
    event_where(stream, text, |page| {
        texts(page).iter().any(|line| line == text)
    })
    .await
}

/// Reads `stream` until a `logs` event's page passes `wanted`; returns its id and data.
async fn event_where(
    stream: &mut reqwest::Response,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> (String, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buffer = String::new();
    loop {
        let chunk = tokio::time::timeout_at(deadline.into(), stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("no `{what}` within 30 s: {buffer}"))
            .unwrap()
            .expect("the stream goes on");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(|value| value.trim().to_owned())
            };
            let (Some(id), Some(data)) = (field("id:"), field("data:")) else {
                continue;
            };
            assert_eq!(field("event:").as_deref(), Some("logs"), "{frame}");
            let data: Value = serde_json::from_str(&data).unwrap();
            if wanted(&data) {
                return (id, data);
            }
        }
    }
}
