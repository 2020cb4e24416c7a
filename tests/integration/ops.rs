//! Operations endpoints: liveness, readiness, metrics and the API reference page.

use bulkhead_migrations::MigratorTrait;
use reqwest::Method;

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, TestServer};

db_tests!(health_readiness_metrics_and_reference);

async fn health_readiness_metrics_and_reference(s: TestServer) {
    let health = s.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(health.assert_status(200)["status"], "ok");
    let ready = s.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(ready.assert_status(200)["status"], "ready");

    s.get("/v1/projects", ADMIN_TOKEN).await.assert_status(200);
    let metrics = s.call(Method::GET, "/metrics", None, None).await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .text
            .contains(r#"http_requests_total{method="GET",route="/v1/projects",status="200"}"#),
        "{}",
        metrics.text
    );
    assert!(
        metrics
            .text
            .contains("http_request_duration_seconds_bucket")
    );
    assert!(metrics.text.contains("db_pool_connections"));
    assert!(!metrics.text.contains(ADMIN_TOKEN));

    let page = s.call(Method::GET, "/docs/", None, None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("swagger"),
        "the reference page is served"
    );
    let script = s
        .call(Method::GET, "/docs/swagger-ui-bundle.js", None, None)
        .await;
    assert_eq!(
        script.status, 200,
        "the reference page's script is served locally (no CDN)"
    );
    let doc = s.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(doc.body["openapi"], "3.1.0");

    // Readiness follows the database: with migrations rolled back it is not ready.
    let migrator = bulkhead::db::connect_for_migrations(&s.database_url)
        .await
        .unwrap();
    bulkhead_migrations::Migrator::down(&migrator.db, Some(1))
        .await
        .unwrap();
    let not_ready = s.call(Method::GET, "/readyz", None, None).await;
    not_ready.assert_problem(503, "not_ready");
}
