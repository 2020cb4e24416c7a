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
    testing::set_config("logs_endpoint", "http://127.0.0.1:9000");
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
        source: None,
        // t3.micro's baseline: 2 vCPUs at 10%.
        size: InstanceSize {
            cpu_millis: 200,
            memory_mib: 1024,
        },
    }
}

#[test]
fn the_cheapest_instance_type_that_holds_the_size_is_chosen() {
    let size = |cpu_millis, memory_mib| InstanceSize {
        cpu_millis,
        memory_mib,
    };
    for (cpu, memory, expected) in [
        (10, 16, "t3.nano"),
        (200, 1024, "t3.micro"),
        (400, 3000, "t3.medium"),
        (500, 512, "t3.large"),
        (1000, 1024, "c6i.large"),
        (2000, 6000, "m6i.large"),
        (2000, 12000, "r6i.large"),
        (4000, 4096, "c6i.xlarge"),
        (32000, 262144, "r6i.8xlarge"),
    ] {
        assert_eq!(
            instance_type_for(&size(cpu, memory)).unwrap(),
            expected,
            "{cpu} {memory}"
        );
    }
    for (cpu, memory) in [(32001, 1024), (1000, 262145)] {
        assert!(matches!(
            instance_type_for(&size(cpu, memory)),
            Err(ProviderError::InvalidSpec(message)) if message.contains("no instance type")
        ));
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

/// A fake CloudWatch Logs, written apart from the plugin: streams of (timestamp, message);
/// a forward token is `f/INDEX`, the index of the next event to read.
type FakeStreams = Rc<RefCell<std::collections::BTreeMap<String, Vec<(u64, String)>>>>;

const INSTANCE: &str = "i-0123456789abcdef0";

fn fake_logs(streams: FakeStreams) -> Rc<RefCell<Vec<Request>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let record = seen.clone();
    testing::set_http_handler(move |request| {
        record.borrow_mut().push(request.clone());
        if request.header_value("x-amz-target").is_none() {
            let item = instance_item(INSTANCE, "running", "2026-05-01T10:00:00.000Z", "web-1");
            return Ok(describe_answer(&[item]));
        }
        assert_eq!(
            request.header_value("x-amz-target"),
            Some("Logs_20140328.GetLogEvents")
        );
        assert_eq!(
            request.header_value("content-type"),
            Some("application/x-amz-json-1.1")
        );
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        if body["logGroupName"] != "bulkhead-instances" {
            return Ok(logs_error(
                "ResourceNotFoundException",
                "The specified log group does not exist.",
            ));
        }
        let streams = streams.borrow();
        let Some(events) = streams.get(body["logStreamName"].as_str().unwrap()) else {
            return Ok(logs_error(
                "ResourceNotFoundException",
                "The specified log stream does not exist.",
            ));
        };
        let limit = body["limit"].as_u64().unwrap() as usize;
        assert!((1..=10_000).contains(&limit));
        let start = match body["nextToken"].as_str() {
            Some(token) => token.strip_prefix("f/").unwrap().parse().unwrap(),
            None if body["startFromHead"] == true => {
                let since = body["startTime"].as_u64().unwrap_or(0);
                events.iter().take_while(|(at, _)| *at < since).count()
            }
            None => events.len().saturating_sub(limit),
        };
        let page: Vec<_> = events.iter().skip(start).take(limit).collect();
        let answer = serde_json::json!({
            "events": page.iter().map(|(at, message)| serde_json::json!({
                "timestamp": at, "message": message, "ingestionTime": at + 1,
            })).collect::<Vec<_>>(),
            "nextForwardToken": format!("f/{}", start + page.len()),
            "nextBackwardToken": format!("b/{start}"),
        });
        Ok(Response::new(200, answer.to_string()))
    });
    seen
}

fn logs_error(kind: &str, message: &str) -> Response {
    Response::new(
        400,
        serde_json::json!({"__type": kind, "message": message}).to_string(),
    )
}

fn streams_of(stdout: &[(u64, &str)], stderr: &[(u64, &str)]) -> FakeStreams {
    let owned = |events: &[(u64, &str)]| -> Vec<(u64, String)> {
        events
            .iter()
            .map(|(at, text)| (*at, (*text).to_owned()))
            .collect()
    };
    Rc::new(RefCell::new(std::collections::BTreeMap::from([
        (format!("{INSTANCE}/stdout"), owned(stdout)),
        (format!("{INSTANCE}/stderr"), owned(stderr)),
    ])))
}

/// Every page from `after` on, `max_lines` (and `max_bytes`) at a time.
fn read_all(after: Option<String>, max_lines: u32, max_bytes: u32) -> (Vec<String>, String) {
    let mut texts = Vec::new();
    let mut cursor = after;
    for _ in 0..100 {
        let mut request = LogRequest::new(cursor.clone(), max_lines);
        request.max_bytes = max_bytes;
        let page = Aws::logs("web-1".into(), request).unwrap();
        assert!(page.lines.len() <= max_lines as usize);
        assert!(page.lines.iter().map(|line| line.text.len()).sum::<usize>() <= max_bytes as usize);
        assert!(page.next.len() <= 1000);
        assert!(page.lines.windows(2).all(|w| w[0].time_ms <= w[1].time_ms));
        if page.lines.is_empty() {
            assert_eq!(Some(&page.next), cursor.as_ref());
            return (texts, page.next);
        }
        texts.extend(page.lines.into_iter().map(|line| line.text));
        cursor = Some(page.next);
    }
    panic!("the pages never ended");
}

#[test]
fn logs_merge_both_streams_by_time_and_page_without_repeats_or_losses() {
    configure();
    assert!(Aws::info().capabilities.contains(&"logs".to_owned()));
    let streams = streams_of(
        &[
            (1, "o1"),
            (2, "o2a"),
            (2, "o2b"),
            (3, "o3"),
            (5, "o5"),
            (8, "o8"),
        ],
        &[(2, "e2"), (4, "e4a"), (4, "e4b"), (9, "e9")],
    );
    let seen = fake_logs(streams.clone());

    // The newest three, oldest first.
    let page = Aws::logs("web-1".into(), LogRequest::new(None, 3)).unwrap();
    let texts: Vec<&str> = page.lines.iter().map(|line| line.text.as_str()).collect();
    assert_eq!(texts, ["o5", "o8", "e9"]);
    use bulkhead_sdk::LogStream::*;
    let kinds: Vec<_> = page.lines.iter().map(|line| line.stream).collect();
    assert_eq!(kinds, [Stdout, Stdout, Stderr]);
    assert_eq!(page.lines[2].time_ms, 9);
    assert_eq!(page.next, "a1|t:f/6~0|t:f/4~0");

    // The requests: signed for CloudWatch Logs in the instance's region, both streams.
    let requests: Vec<Request> = seen.borrow().iter().skip(1).cloned().collect();
    assert_eq!(requests.len(), 2);
    for (request, stream) in requests.iter().zip(["stdout", "stderr"]) {
        assert_eq!(request.url, "http://127.0.0.1:9000/");
        let authorization = request.header_value("authorization").unwrap();
        assert!(
            authorization.contains("/us-west-2/logs/aws4_request"),
            "{authorization}"
        );
        assert!(authorization.contains("x-amz-target"), "{authorization}");
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["logStreamName"], format!("{INSTANCE}/{stream}"));
        assert_eq!(body["startFromHead"], false);
        assert_eq!(body["limit"], 3);
    }

    // Nothing new: the same cursor back. Then new lines on both streams, read one page of
    // two at a time.
    let (texts, _) = read_all(Some(page.next.clone()), 2, 1000);
    assert!(texts.is_empty());
    streams
        .borrow_mut()
        .get_mut(&format!("{INSTANCE}/stdout"))
        .unwrap()
        .extend(
            [(10, "o10"), (12, "o12"), (12, "o12b"), (15, "o15")].map(|(at, t)| (at, t.to_owned())),
        );
    streams
        .borrow_mut()
        .get_mut(&format!("{INSTANCE}/stderr"))
        .unwrap()
        .extend([(11, "e11"), (12, "e12"), (20, "e20")].map(|(at, t)| (at, t.to_owned())));
    let (texts, _) = read_all(Some(page.next), 2, 1000);
    assert_eq!(texts, ["o10", "e11", "o12", "o12b", "e12", "o15", "e20"]);

    // From a time on, three at a time: every line once, in time order.
    let mut request = LogRequest::new(None, 3);
    request.since_ms = Some(4);
    let page = Aws::logs("web-1".into(), request).unwrap();
    let mut texts: Vec<String> = page.lines.into_iter().map(|line| line.text).collect();
    assert_eq!(texts, ["e4a", "e4b", "o5"]);
    let (rest, _) = read_all(Some(page.next), 3, 1000);
    texts.extend(rest);
    assert_eq!(
        texts,
        [
            "e4a", "e4b", "o5", "o8", "e9", "o10", "e11", "o12", "o12b", "e12", "o15", "e20"
        ]
    );
}

#[test]
fn logs_respect_the_bounds_and_lose_nothing() {
    configure();
    let out: Vec<(u64, String)> = (0..30).map(|n| (n * 2, format!("out-{n:02}"))).collect();
    let err: Vec<(u64, String)> = (0..30)
        .map(|n| (n * 2 + 1, format!("err-{n:02}")))
        .collect();
    let streams: FakeStreams = Rc::new(RefCell::new(std::collections::BTreeMap::from([
        (format!("{INSTANCE}/stdout"), out),
        (format!("{INSTANCE}/stderr"), err),
    ])));
    fake_logs(streams);
    let mut expected = Vec::new();
    for n in 0..30 {
        expected.push(format!("out-{n:02}"));
        expected.push(format!("err-{n:02}"));
    }
    // Byte-bound pages (three lines of six bytes fit in 20) and line-bound ones.
    for (lines, bytes) in [(100, 20), (7, 1000), (1, 1000), (1000, 1 << 20)] {
        let (texts, _) = read_all(Some("a1|s:0~0|s:0~0".into()), lines, bytes);
        assert_eq!(texts, expected, "{lines} lines, {bytes} bytes");
    }
    // The newest that fit: counted from the newest.
    let mut newest = LogRequest::new(None, 100);
    newest.max_bytes = 20;
    let page = Aws::logs("web-1".into(), newest.clone()).unwrap();
    let texts: Vec<&str> = page.lines.iter().map(|line| line.text.as_str()).collect();
    assert_eq!(texts, ["err-28", "out-29", "err-29"]);
    newest.max_bytes = 3;
    let page = Aws::logs("web-1".into(), newest).unwrap();
    assert_eq!(page.lines.len(), 1);
    assert_eq!(page.lines[0].text, "err");
}

#[test]
fn logs_errors_map_like_the_other_calls() {
    configure();
    // Streams not made yet read as empty.
    fake_logs(Rc::new(RefCell::new(std::collections::BTreeMap::new())));
    let page = Aws::logs("web-1".into(), LogRequest::new(None, 10)).unwrap();
    assert!(page.lines.is_empty());
    let (texts, _) = read_all(Some(page.next), 10, 1000);
    assert!(texts.is_empty());
    // Another log group, which does not exist.
    testing::set_config("log_group", "elsewhere");
    assert!(matches!(
        Aws::logs("web-1".into(), LogRequest::new(None, 10)),
        Err(ProviderError::NotFound(m)) if m.contains("log group")
    ));
    testing::set_config("log_group", "");

    let answer_with = |status: u16, kind: &str, message: &str| {
        let body = serde_json::json!({"__type": kind, "message": message}).to_string();
        testing::set_http_handler(move |request| {
            if request.header_value("x-amz-target").is_none() {
                let item = instance_item(INSTANCE, "running", "2026-05-01T10:00:00.000Z", "web-1");
                return Ok(describe_answer(&[item]));
            }
            let mut response = Response::new(status, body.clone());
            response.headers.push(("retry-after".into(), "12".into()));
            Ok(response)
        });
        Aws::logs("web-1".into(), LogRequest::new(None, 10)).unwrap_err()
    };
    use ProviderError as E;
    let blocked = answer_with(
        400,
        "AccessDeniedException",
        "This account is currently blocked and not recognized as a valid account.",
    );
    assert!(matches!(blocked, E::AccountSuspended(_)), "{blocked:?}");
    let denied = answer_with(
        400,
        "AccessDeniedException",
        "User is not authorized to perform: logs:GetLogEvents",
    );
    assert!(matches!(denied, E::Unauthorized(_)), "{denied:?}");
    for kind in [
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "com.amazonaws.logs#MissingAuthenticationTokenException",
    ] {
        let refused = answer_with(400, kind, "no");
        assert!(matches!(refused, E::Unauthorized(_)), "{kind}: {refused:?}");
    }
    let throttled = answer_with(400, "ThrottlingException", "Rate exceeded");
    assert!(
        matches!(&throttled, E::RateLimited(limit) if limit.retry_after_secs == 12),
        "{throttled:?}"
    );
    let down = answer_with(500, "ServiceUnavailableException", "later");
    assert!(matches!(down, E::Unavailable(_)), "{down:?}");
    let invalid = answer_with(400, "InvalidParameterException", "bad token");
    assert!(matches!(invalid, E::InvalidSpec(_)), "{invalid:?}");
    testing::set_http_handler(|request| {
        if request.header_value("x-amz-target").is_none() {
            let item = instance_item(INSTANCE, "running", "2026-05-01T10:00:00.000Z", "web-1");
            return Ok(describe_answer(&[item]));
        }
        Ok(Response::new(502, "<html>bad gateway</html>"))
    });
    assert!(matches!(
        Aws::logs("web-1".into(), LogRequest::new(None, 10)),
        Err(E::Unavailable(_))
    ));

    // No instance: not found, without reading logs. A cursor not of aws's: invalid.
    let seen = fake_ec2(|_, _| describe_answer(&[]));
    assert!(matches!(
        Aws::logs("web-9".into(), LogRequest::new(None, 10)),
        Err(E::NotFound(_))
    ));
    assert!(
        seen.borrow()
            .iter()
            .all(|r| r.header_value("x-amz-target").is_none())
    );
    assert!(matches!(
        Aws::logs("web-1".into(), LogRequest::new(Some("g1".into()), 10)),
        Err(E::InvalidSpec(_))
    ));
}

#[test]
fn the_default_logs_endpoint_is_the_regions_own() {
    configure();
    testing::set_config("endpoint", "");
    testing::set_config("logs_endpoint", "");
    let seen = fake_logs(streams_of(&[], &[]));
    Aws::logs("web-1".into(), LogRequest::new(None, 10)).unwrap();
    let urls: Vec<String> = seen.borrow().iter().map(|r| r.url.clone()).collect();
    assert_eq!(urls[0], "https://ec2.us-west-2.amazonaws.com/");
    assert_eq!(urls[1], "https://logs.us-west-2.amazonaws.com/");
    testing::set_config("logs_endpoint", "http://127.0.0.1:9001/");
    Aws::logs("web-1".into(), LogRequest::new(None, 10)).unwrap();
    assert_eq!(seen.borrow().last().unwrap().url, "http://127.0.0.1:9001/");
    testing::set_config("logs_endpoint", "");
}
