//! Native unit tests of the plugin against canned EC2 answers (the SDK's in-memory host): the
//! requests are signed and say what EC2 needs, the answers are read right, and EC2's error
//! codes map onto the contract's errors.

use std::cell::RefCell;
use std::rc::Rc;

use bulkhead_sdk::http::{Request, Response};
use bulkhead_sdk::testing;

use super::*;

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const NS: &str = "xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"";

fn configure() {
    testing::set_config("endpoint", "http://127.0.0.1:9000");
    testing::set_config("regions", "us-west-2");
    testing::set_secret("access_key_id", "AKIDTEST");
    testing::set_secret("secret_access_key", SECRET);
}

/// The parameters of a form body.
fn form(request: &Request) -> Vec<(String, String)> {
    let body = String::from_utf8(request.body.clone()).unwrap();
    body.split('&')
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap();
            (decode(name), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn param(params: &[(String, String)], name: &str) -> Option<String> {
    params
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
}

/// Answers with `answer(action, params)`, recording every request.
fn fake_ec2(
    mut answer: impl FnMut(&str, &[(String, String)]) -> Response + 'static,
) -> Rc<RefCell<Vec<Request>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let record = seen.clone();
    testing::set_http_handler(move |request| {
        record.borrow_mut().push(request.clone());
        let params = form(request);
        let action = param(&params, "Action").unwrap_or_default();
        Ok(answer(&action, &params))
    });
    seen
}

fn error_body(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>5e1d5c4a-0000-4000-8000-000000000000</RequestID></Response>"
    )
}

fn zones() -> Response {
    Response::new(
        200,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeAvailabilityZonesResponse {NS}><requestId>1</requestId><availabilityZoneInfo><item><zoneName>us-west-2a</zoneName><zoneState>available</zoneState><regionName>us-west-2</regionName></item></availabilityZoneInfo></DescribeAvailabilityZonesResponse>"
        ),
    )
}

fn instance_item(id: &str, state: &str, launch: &str, key: &str) -> String {
    format!(
        "<item><instanceId>{id}</instanceId><imageId>ami-0bulkhead</imageId><instanceState><code>16</code><name>{state}</name></instanceState><launchTime>{launch}</launchTime><privateIpAddress>10.0.0.7</privateIpAddress><tagSet><item><key>bulkhead-key</key><value>{key}</value></item><item><key>bulkhead-port</key><value>3000</value></item><item><key>bulkhead-managed</key><value>true</value></item></tagSet></item>"
    )
}

fn run_answer(item: &str) -> Response {
    Response::new(
        200,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<RunInstancesResponse {NS}><requestId>1</requestId><reservationId>r-1</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet>{item}</instancesSet></RunInstancesResponse>"
        ),
    )
}

fn describe_answer(items: &[String]) -> Response {
    let reservations: String = items
        .iter()
        .map(|item| {
            format!(
                "<item><reservationId>r-1</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet>{item}</instancesSet></item>"
            )
        })
        .collect();
    Response::new(
        200,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstancesResponse {NS}><requestId>1</requestId><reservationSet>{reservations}</reservationSet></DescribeInstancesResponse>"
        ),
    )
}

fn spec(key: &str) -> InstanceSpec {
    InstanceSpec {
        instance_key: key.into(),
        region: "us-west-2".into(),
        artifact: "shop/web:1".into(),
        port: 3000,
        env: vec![],
        labels: vec![
            ("team".into(), "shop".into()),
            ("bulkhead-key".into(), "spoofed".into()),
        ],
        health_check: None,
    }
}

#[test]
fn info_names_the_configured_regions() {
    testing::set_config("regions", "eu-west-1, us-east-2");
    let info = Aws::info();
    assert_eq!(info.name, "aws");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.regions, vec!["eu-west-1", "us-east-2"]);
}

#[test]
fn every_request_is_signed_for_ec2_in_the_region() {
    configure();
    let seen = fake_ec2(|_, _| zones());
    let report = Aws::health().unwrap();
    assert_eq!(report.status, HealthStatus::Healthy);
    assert!(report.message.contains("us-west-2"), "{}", report.message);

    let request = seen.borrow()[0].clone();
    assert_eq!(request.url, "http://127.0.0.1:9000/");
    assert_eq!(request.method.as_str(), "POST");
    let params = form(&request);
    assert_eq!(
        params[..2],
        [
            ("Action".to_owned(), "DescribeAvailabilityZones".to_owned()),
            ("Version".to_owned(), "2016-11-15".to_owned())
        ]
    );
    let amz_date = request.header_value("x-amz-date").unwrap().to_owned();
    assert_eq!(amz_date.len(), 16);
    assert!(amz_date.ends_with('Z'));
    let authorization = request.header_value("authorization").unwrap();
    let prefix = format!(
        "AWS4-HMAC-SHA256 Credential=AKIDTEST/{}/us-west-2/ec2/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=",
        &amz_date[..8]
    );
    assert!(authorization.starts_with(&prefix), "{authorization}");
    let signature = &authorization[prefix.len()..];
    assert_eq!(signature.len(), 64);
    assert!(signature.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        request.header_value("content-type"),
        Some("application/x-www-form-urlencoded; charset=utf-8")
    );
    assert_eq!(
        request.header_value("content-length"),
        Some(request.body.len().to_string().as_str())
    );
    // The secret goes nowhere; the host header is the host's to set.
    assert!(request.header_value("host").is_none());
    assert!(
        request
            .headers
            .iter()
            .all(|(_, value)| !value.contains(SECRET))
    );
    assert!(!String::from_utf8_lossy(&request.body).contains(SECRET));

    // The same request, signed again at its own time, gives the same signature.
    let unsigned = Request::post(&request.url)
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .body(request.body.clone());
    let credentials = Credentials {
        access_key_id: "AKIDTEST".into(),
        secret_access_key: SECRET.into(),
    };
    let at = amz_date_time(&amz_date);
    let again = sigv4::sign(unsigned, &credentials, "us-west-2", "ec2", at).unwrap();
    assert_eq!(again.header_value("authorization"), Some(authorization));
}

/// The time of an `X-Amz-Date` of today (the test ran just now).
fn amz_date_time(amz_date: &str) -> SystemTime {
    let now = SystemTime::now();
    (0..600)
        .map(|back| now - std::time::Duration::from_secs(back))
        .find(|at| sigv4::amz_timestamp(*at) == amz_date)
        .expect("signed within the last ten minutes")
}

#[test]
fn the_default_endpoint_is_the_regions_own() {
    testing::set_config("regions", "eu-central-1");
    testing::set_secret("access_key_id", "AKIDTEST");
    testing::set_secret("secret_access_key", SECRET);
    let seen = fake_ec2(|_, _| zones());
    Aws::health().unwrap();
    assert_eq!(
        seen.borrow()[0].url,
        "https://ec2.eu-central-1.amazonaws.com/"
    );
}

#[test]
fn missing_secrets_are_unauthorized_without_calling_out() {
    testing::set_config("endpoint", "http://127.0.0.1:9000");
    let seen = fake_ec2(|_, _| zones());
    assert!(matches!(Aws::health(), Err(ProviderError::Unauthorized(_))));
    assert!(matches!(
        Aws::describe("web-1".into()),
        Err(ProviderError::Unauthorized(_))
    ));
    assert!(seen.borrow().is_empty());
}

fn health_error(status: u16, body: String, retry_after: Option<&str>) -> ProviderError {
    configure();
    let retry_after = retry_after.map(str::to_owned);
    fake_ec2(move |_, _| {
        let mut response = Response::new(status, body.clone());
        if let Some(secs) = &retry_after {
            response.headers.push(("Retry-After".into(), secs.clone()));
        }
        response
    });
    Aws::health().unwrap_err()
}

#[test]
fn ec2_error_codes_map_onto_contract_errors() {
    use ProviderError as E;
    type Expected = fn(&E) -> bool;
    let cases: [(u16, &str, Expected); 17] = [
        (401, "AuthFailure", |e| matches!(e, E::Unauthorized(_))),
        (403, "UnauthorizedOperation", |e| {
            matches!(e, E::Unauthorized(_))
        }),
        (403, "SignatureDoesNotMatch", |e| {
            matches!(e, E::Unauthorized(_))
        }),
        (401, "MissingAuthenticationToken", |e| {
            matches!(e, E::Unauthorized(_))
        }),
        (403, "Blocked", |e| matches!(e, E::AccountSuspended(_))),
        (401, "OptInRequired", |e| {
            matches!(e, E::AccountSuspended(_))
        }),
        (401, "PendingVerification", |e| {
            matches!(e, E::AccountSuspended(_))
        }),
        (400, "Throttling", |e| {
            matches!(
                e,
                E::RateLimited(RateLimit {
                    retry_after_secs: 5,
                    ..
                })
            )
        }),
        (500, "InsufficientInstanceCapacity", |e| {
            matches!(e, E::QuotaExceeded(_))
        }),
        (400, "InstanceLimitExceeded", |e| {
            matches!(e, E::QuotaExceeded(_))
        }),
        (400, "VcpuLimitExceeded", |e| {
            matches!(e, E::QuotaExceeded(_))
        }),
        (400, "InvalidInstanceID.NotFound", |e| {
            matches!(e, E::NotFound(_))
        }),
        (400, "InvalidAMIID.Malformed", |e| {
            matches!(e, E::InvalidSpec(_))
        }),
        (400, "MissingParameter", |e| matches!(e, E::InvalidSpec(_))),
        (500, "InternalError", |e| matches!(e, E::Unavailable(_))),
        (503, "Unavailable", |e| matches!(e, E::Unavailable(_))),
        (400, "RequestExpired", |e| matches!(e, E::Internal(_))),
    ];
    for (status, code, expected) in cases {
        let error = health_error(status, error_body(code, "because"), None);
        assert!(expected(&error), "{code}: {error:?}");
        let text = format!("{error:?}");
        assert!(text.contains(code) && text.contains("because"), "{text}");
        assert!(!text.contains(SECRET));
    }
}

#[test]
fn throttling_honours_retry_after() {
    let error = health_error(
        503,
        error_body("RequestLimitExceeded", "Request limit exceeded."),
        Some("9"),
    );
    assert!(
        matches!(
            error,
            ProviderError::RateLimited(RateLimit {
                retry_after_secs: 9,
                ..
            })
        ),
        "{error:?}"
    );
    let error = health_error(
        503,
        error_body("RequestLimitExceeded", "Request limit exceeded."),
        None,
    );
    assert!(matches!(
        error,
        ProviderError::RateLimited(RateLimit {
            retry_after_secs: 5,
            ..
        })
    ));
}

#[test]
fn answers_that_are_not_ec2_map_by_status() {
    assert!(matches!(
        health_error(502, "<html>bad gateway</html>".into(), None),
        ProviderError::Unavailable(_)
    ));
    assert!(matches!(
        health_error(404, "no such path".into(), None),
        ProviderError::Internal(_)
    ));
    assert!(matches!(
        health_error(200, "not xml".into(), None),
        ProviderError::Internal(_)
    ));
}

#[test]
fn provision_runs_an_instance_with_the_key_as_client_token_and_tags() {
    configure();
    testing::set_config("image_id", "ami-0abc");
    let seen = fake_ec2(|action, params| {
        assert_eq!(action, "RunInstances");
        assert_eq!(
            param(params, "ClientToken").as_deref(),
            Some("web-1"),
            "{params:?}"
        );
        run_answer(&instance_item(
            "i-0123456789abcdef0",
            "pending",
            "2026-01-01T00:00:00.000Z",
            "web-1",
        ))
    });
    let made = Aws::provision(spec("web-1")).unwrap();
    assert_eq!(made.instance_key, "web-1");
    assert_eq!(made.provider_id, "i-0123456789abcdef0");
    assert_eq!(made.region, "us-west-2");
    assert_eq!(made.state, InstanceState::Pending);
    assert_eq!(made.address.as_deref(), Some("10.0.0.7:3000"));
    // Provisioning again is the same request: EC2 answers with the same instance.
    let again = Aws::provision(spec("web-1")).unwrap();
    assert_eq!(again.provider_id, made.provider_id);
    let requests = seen.borrow();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);

    let params = form(&requests[0]);
    for (name, value) in [
        ("ImageId", "ami-0abc"),
        ("InstanceType", "t3.micro"),
        ("MinCount", "1"),
        ("MaxCount", "1"),
        ("TagSpecification.1.ResourceType", "instance"),
    ] {
        assert_eq!(param(&params, name).as_deref(), Some(value), "{name}");
    }
    let tags: Vec<(String, String)> = (1..)
        .map_while(|n| {
            Some((
                param(&params, &format!("TagSpecification.1.Tag.{n}.Key"))?,
                param(&params, &format!("TagSpecification.1.Tag.{n}.Value"))?,
            ))
        })
        .collect();
    let tag = |key: &str| {
        tags.iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(tag("bulkhead-key"), ["web-1"], "a label cannot override it");
    assert_eq!(tag("bulkhead-managed"), ["true"]);
    assert_eq!(tag("bulkhead-port"), ["3000"]);
    assert_eq!(tag("bulkhead-artifact"), ["shop/web:1"]);
    assert_eq!(tag("team"), ["shop"]);
}

#[test]
fn provision_truncates_the_artifact_tag_and_checks_the_region() {
    configure();
    let seen = fake_ec2(|_, _| {
        run_answer(&instance_item(
            "i-0123456789abcdef0",
            "pending",
            "2026-01-01T00:00:00.000Z",
            "web-1",
        ))
    });
    let mut long = spec("web-1");
    long.artifact = "x".repeat(400);
    Aws::provision(long).unwrap();
    let params = form(&seen.borrow()[0]);
    assert_eq!(
        param(&params, "TagSpecification.1.Tag.4.Value").map(|v| v.len()),
        Some(255)
    );
    let mut elsewhere = spec("web-1");
    elsewhere.region = "mars-1".into();
    assert!(matches!(
        Aws::provision(elsewhere),
        Err(ProviderError::InvalidSpec(_))
    ));
}

#[test]
fn provision_after_deprovision_moves_to_the_next_client_token() {
    configure();
    let seen = fake_ec2(|_, params| match param(params, "ClientToken").as_deref() {
        // The key's first token made an instance that was terminated since.
        Some("web-1") => run_answer(&instance_item(
            "i-00000000000000001",
            "terminated",
            "2026-01-01T00:00:00.000Z",
            "web-1",
        )),
        Some("web-1.1") => run_answer(&instance_item(
            "i-00000000000000002",
            "pending",
            "2026-01-01T01:00:00.000Z",
            "web-1",
        )),
        other => panic!("unexpected token {other:?}"),
    });
    let made = Aws::provision(spec("web-1")).unwrap();
    assert_eq!(made.provider_id, "i-00000000000000002");
    assert_eq!(seen.borrow().len(), 2);
}

#[test]
fn provision_with_other_parameters_returns_the_instance_already_made() {
    configure();
    fake_ec2(|action, _| match action {
        "RunInstances" => Response::new(
            400,
            error_body("IdempotentParameterMismatch", "different parameters"),
        ),
        "DescribeInstances" => describe_answer(&[instance_item(
            "i-00000000000000003",
            "running",
            "2026-01-01T00:00:00.000Z",
            "web-1",
        )]),
        other => panic!("unexpected {other}"),
    });
    let made = Aws::provision(spec("web-1")).unwrap();
    assert_eq!(made.provider_id, "i-00000000000000003");
    assert_eq!(made.state, InstanceState::Running);
}

#[test]
fn describe_filters_by_key_and_picks_the_newest_live_instance() {
    configure();
    let seen = fake_ec2(|action, _| {
        assert_eq!(action, "DescribeInstances");
        describe_answer(&[
            instance_item(
                "i-0000000000000000a",
                "running",
                "2026-01-01T00:00:00.000Z",
                "web-1",
            ),
            instance_item(
                "i-0000000000000000b",
                "pending",
                "2026-01-02T00:00:00.000Z",
                "web-1",
            ),
            instance_item(
                "i-0000000000000000c",
                "terminated",
                "2026-01-03T00:00:00.000Z",
                "web-1",
            ),
        ])
    });
    let found = Aws::describe("web-1".into()).unwrap();
    assert_eq!(found.provider_id, "i-0000000000000000b");
    assert_eq!(found.state, InstanceState::Pending);
    let params = form(&seen.borrow()[0]);
    assert_eq!(
        param(&params, "Filter.1.Name").as_deref(),
        Some("tag:bulkhead-key")
    );
    assert_eq!(param(&params, "Filter.1.Value.1").as_deref(), Some("web-1"));
    assert_eq!(
        param(&params, "Filter.2.Name").as_deref(),
        Some("instance-state-name")
    );
    assert!(
        !params
            .iter()
            .any(|(name, value)| name.starts_with("Filter.2.Value") && value == "terminated")
    );

    fake_ec2(|_, _| describe_answer(&[]));
    assert!(matches!(
        Aws::describe("web-2".into()),
        Err(ProviderError::NotFound(_))
    ));
}

#[test]
fn deprovision_terminates_what_describe_finds_and_is_idempotent() {
    configure();
    let seen = fake_ec2(|action, params| match action {
        "DescribeInstances" => describe_answer(&[instance_item(
            "i-0000000000000000a",
            "running",
            "2026-01-01T00:00:00.000Z",
            "web-1",
        )]),
        "TerminateInstances" => {
            assert_eq!(
                param(params, "InstanceId.1").as_deref(),
                Some("i-0000000000000000a")
            );
            Response::new(
                400,
                error_body(
                    "InvalidInstanceID.NotFound",
                    "The instance ID 'i-0000000000000000a' does not exist",
                ),
            )
        }
        other => panic!("unexpected {other}"),
    });
    // Terminated meanwhile: still done.
    Aws::deprovision("web-1".into()).unwrap();
    assert_eq!(seen.borrow().len(), 2);

    let seen = fake_ec2(|action, _| {
        assert_eq!(action, "DescribeInstances", "nothing to terminate");
        describe_answer(&[])
    });
    Aws::deprovision("web-1".into()).unwrap();
    assert_eq!(seen.borrow().len(), 1);

    fake_ec2(|_, _| Response::new(403, error_body("Blocked", "blocked")));
    assert!(matches!(
        Aws::deprovision("web-1".into()),
        Err(ProviderError::AccountSuspended(_))
    ));
}

#[test]
fn list_returns_the_managed_instances() {
    configure();
    let seen = fake_ec2(|_, _| {
        describe_answer(&[
            instance_item(
                "i-0000000000000000a",
                "running",
                "2026-01-01T00:00:00.000Z",
                "web-1",
            ),
            instance_item(
                "i-0000000000000000b",
                "stopped",
                "2026-01-02T00:00:00.000Z",
                "web-2",
            ),
        ])
    });
    let listed = Aws::list().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].instance_key, "web-1");
    assert_eq!(listed[0].address.as_deref(), Some("10.0.0.7:3000"));
    assert_eq!(listed[1].state, InstanceState::Stopped);
    assert_eq!(listed[1].address, None);
    let params = form(&seen.borrow()[0]);
    assert_eq!(
        param(&params, "Filter.1.Name").as_deref(),
        Some("tag:bulkhead-managed")
    );
    assert_eq!(param(&params, "Filter.1.Value.1").as_deref(), Some("true"));
}

#[test]
fn client_tokens_fit_ec2s_limit() {
    assert_eq!(client_token("web-1", 0), "web-1");
    assert_eq!(client_token("web-1", 3), "web-1.3");
    let long = "a".repeat(63);
    for attempt in [0, 15] {
        let token = client_token(&long, attempt);
        assert!(token.len() <= 64, "{token}");
        assert_eq!(token, client_token(&long, attempt), "deterministic");
    }
}

/// EC2's answers as AWS documents them: pretty-printed, in EC2's namespace, with every field
/// EC2 sends (nested `privateIpAddress`es, `groupSet`s, `stateReason`s, ...).
mod documented_answers {
    use super::*;

    const RUN_INSTANCES: &str = include_str!("../tests/fixtures/run_instances.xml");
    const DESCRIBE_INSTANCES: &str = include_str!("../tests/fixtures/describe_instances.xml");
    const TERMINATE_INSTANCES: &str = include_str!("../tests/fixtures/terminate_instances.xml");
    const ZONES: &str = include_str!("../tests/fixtures/describe_availability_zones.xml");
    const ERROR: &str = include_str!("../tests/fixtures/error.xml");

    #[test]
    fn health_counts_the_available_zones() {
        configure();
        fake_ec2(|_, _| Response::new(200, ZONES));
        let report = Aws::health().unwrap();
        assert_eq!(report.status, HealthStatus::Healthy);
        assert_eq!(
            report.message,
            "EC2 in us-west-2: 2 availability zones available"
        );
    }

    #[test]
    fn provision_reads_the_instance_run() {
        configure();
        fake_ec2(|_, _| Response::new(200, RUN_INSTANCES));
        let made = Aws::provision(spec("web-1")).unwrap();
        assert_eq!(made.instance_key, "web-1");
        assert_eq!(made.provider_id, "i-1234567890abcdef0");
        assert_eq!(made.region, "us-west-2");
        assert_eq!(made.state, InstanceState::Pending);
        // The instance's own address, not its network interface's, at the tagged port.
        assert_eq!(made.address.as_deref(), Some("192.168.1.88:3000"));
    }

    #[test]
    fn list_reads_every_reservation() {
        configure();
        fake_ec2(|_, _| Response::new(200, DESCRIBE_INSTANCES));
        let listed = Aws::list().unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert_eq!(listed[0].instance_key, "web-1");
        assert_eq!(listed[0].provider_id, "i-1234567890abcdef0");
        assert_eq!(listed[0].state, InstanceState::Running);
        assert_eq!(listed[0].address.as_deref(), Some("192.168.1.88:3000"));
        assert_eq!(listed[1].instance_key, "web-2");
        assert_eq!(listed[1].provider_id, "i-0598c7d356eba48d7");
        assert_eq!(listed[1].state, InstanceState::Stopped);
        assert_eq!(listed[1].address, None);
    }

    #[test]
    fn deprovision_terminates_what_it_found() {
        configure();
        let seen = fake_ec2(|action, _| match action {
            "DescribeInstances" => Response::new(200, DESCRIBE_INSTANCES),
            "TerminateInstances" => Response::new(200, TERMINATE_INSTANCES),
            other => panic!("unexpected {other}"),
        });
        Aws::deprovision("web-1".into()).unwrap();
        let requests = seen.borrow();
        assert_eq!(requests.len(), 2);
        // The fake does not filter: both instances of the answer are terminated, in order.
        let params = form(&requests[1]);
        assert_eq!(
            param(&params, "Action").as_deref(),
            Some("TerminateInstances")
        );
        assert_eq!(
            param(&params, "InstanceId.1").as_deref(),
            Some("i-1234567890abcdef0")
        );
        assert_eq!(
            param(&params, "InstanceId.2").as_deref(),
            Some("i-0598c7d356eba48d7")
        );
    }

    #[test]
    fn the_error_body_maps_onto_the_contract() {
        let error = health_error(400, ERROR.into(), None);
        let ProviderError::NotFound(message) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(
            message,
            "EC2 DescribeAvailabilityZones in us-west-2: InvalidInstanceID.NotFound (HTTP 400): The instance ID 'i-1a2b3c4d' does not exist"
        );
    }
}
