//! Migrations: every migration goes up, down and up again; the records users made
//! (accounts, terms-of-service acceptances, audit events) survive every later migration, a
//! rollback of those, and a restart; and the routing table moves from its latest revision's
//! row to a row per domain and back without losing a route.

use bulkhead::entity::{audit_event, terms_acceptance};
use bulkhead_migrations::{Migrator, MigratorTrait};
use reqwest::Method;
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{ConnectionTrait, DatabaseConnection, EntityTrait};
use serde_json::json;

use crate::backend_tests;
use crate::support::{Backend, PASSWORD, TestServer, database_fresh};

/// The migration that creates the terms and audit tables (1-based position).
const TERMS_AND_AUDIT: u32 = 2;
/// The migration that stores routes by domain.
const ROUTES_BY_DOMAIN: u32 = 20;
/// The migration that turns the bundled demo provider off.
const EXAMPLE_PROVIDER_OFF: u32 = 22;

backend_tests!(
    every_migration_goes_up_down_and_up,
    user_records_survive_every_later_migration,
    routes_move_to_a_row_per_domain_and_back,
    the_demo_provider_of_an_older_database_is_turned_off
);

async fn connect(backend: Backend) -> Option<(DatabaseConnection, String, tempfile::TempDir)> {
    let (url, dir) = database_fresh(backend).await?;
    let db = bulkhead::db::connect_for_migrations(&url)
        .await
        .expect("connect")
        .db;
    Some((db, url, dir))
}

async fn applied(db: &DatabaseConnection) -> usize {
    Migrator::get_applied_migrations(db).await.unwrap().len()
}

async fn every_migration_goes_up_down_and_up(backend: Backend) {
    let Some((db, url, dir)) = connect(backend).await else {
        return;
    };
    let total = Migrator::migrations().len();
    for step in 1..=total {
        Migrator::up(&db, Some(1))
            .await
            .unwrap_or_else(|err| panic!("up to {step}: {err}"));
        assert_eq!(applied(&db).await, step);
        Migrator::down(&db, Some(1))
            .await
            .unwrap_or_else(|err| panic!("down from {step}: {err}"));
        assert_eq!(applied(&db).await, step - 1);
        Migrator::up(&db, Some(1))
            .await
            .unwrap_or_else(|err| panic!("up again to {step}: {err}"));
    }
    Migrator::down(&db, None).await.expect("everything down");
    assert_eq!(applied(&db).await, 0);
    Migrator::up(&db, None).await.expect("everything up");
    assert!(
        bulkhead::db::pending_migrations(&db)
            .await
            .unwrap()
            .is_empty()
    );
    db.close().await.unwrap();
    // The migrated schema works with the entities: the server runs a full flow on it.
    let s = TestServer::start_on(backend, url, dir, |_| {}).await;
    let token = s.user_with_session("schema@example.com").await;
    let project = s.project_create(&token, "p").await;
    let env = s
        .post(
            &format!("/v1/projects/{project}/environments"),
            &token,
            json!({ "name": "prod" }),
        )
        .await;
    env.assert_status(201);
}

async fn user_records_survive_every_later_migration(backend: Backend) {
    let Some((db, url, dir)) = connect(backend).await else {
        return;
    };
    Migrator::up(&db, Some(TERMS_AND_AUDIT)).await.unwrap();
    let user_id = uuid::Uuid::now_v7();
    let terms_id = uuid::Uuid::now_v7();
    let acceptance_id = uuid::Uuid::now_v7();
    let event_id = uuid::Uuid::now_v7();
    let now = chrono::Utc::now();
    let hash = bulkhead::auth::password_hash(PASSWORD).unwrap();
    let inserts = [
        Query::insert()
            .into_table("users")
            .columns([
                "id",
                "email",
                "name",
                "password_hash",
                "is_admin",
                "disabled",
                "revision",
                "created_at",
                "updated_at",
            ])
            .values_panic([
                user_id.into(),
                "early@example.com".into(),
                "Early".into(),
                hash.into(),
                false.into(),
                false.into(),
                1i64.into(),
                now.into(),
                now.into(),
            ])
            .to_owned(),
        Query::insert()
            .into_table("terms_versions")
            .columns([
                "id",
                "version",
                "url",
                "summary",
                "published_by",
                "published_at",
            ])
            .values_panic([
                terms_id.into(),
                "2026-01".into(),
                "https://example.com/t".into(),
                "".into(),
                user_id.into(),
                now.into(),
            ])
            .to_owned(),
        Query::insert()
            .into_table("terms_acceptances")
            .columns([
                "id",
                "user_id",
                "terms_version_id",
                "request_id",
                "accepted_at",
            ])
            .values_panic([
                acceptance_id.into(),
                user_id.into(),
                terms_id.into(),
                "req-early".into(),
                now.into(),
            ])
            .to_owned(),
        Query::insert()
            .into_table("audit_events")
            .columns([
                "id",
                "occurred_at",
                "actor_user_id",
                "action",
                "resource_type",
                "resource_id",
                "request_id",
                "details",
            ])
            .values_panic([
                event_id.into(),
                now.into(),
                user_id.into(),
                "terms.accept".into(),
                "terms_acceptance".into(),
                acceptance_id.to_string().into(),
                "req-early".into(),
                json!({"version": "2026-01"}).into(),
            ])
            .to_owned(),
    ];
    for insert in &inserts {
        db.execute(insert).await.unwrap();
    }

    let check = |db: DatabaseConnection, stage: String| async move {
        let email = db
            .query_one(
                &Query::select()
                    .column("email")
                    .from("users")
                    .and_where(Expr::col("id").eq(user_id))
                    .to_owned(),
            )
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{stage}: the user is gone"));
        assert_eq!(
            email.try_get_by_index::<String>(0).unwrap(),
            "early@example.com",
            "{stage}"
        );
        let acceptance = terms_acceptance::Entity::find_by_id(acceptance_id)
            .one(&db)
            .await
            .unwrap();
        assert_eq!(
            acceptance
                .unwrap_or_else(|| panic!("{stage}: the acceptance is gone"))
                .user_id,
            user_id
        );
        let event = audit_event::Entity::find_by_id(event_id)
            .one(&db)
            .await
            .unwrap();
        assert_eq!(
            event
                .unwrap_or_else(|| panic!("{stage}: the audit event is gone"))
                .request_id,
            "req-early"
        );
        db
    };
    let mut db = check(db, "before later migrations".into()).await;
    let later = Migrator::migrations().len() as u32 - TERMS_AND_AUDIT;
    for step in 1..=later {
        Migrator::up(&db, Some(1)).await.unwrap();
        db = check(db, format!("after later migration {step}")).await;
    }
    // Rolling the later migrations back and applying them again loses nothing either.
    Migrator::down(&db, Some(later)).await.unwrap();
    db = check(db, "after rolling back the later migrations".into()).await;
    Migrator::up(&db, None).await.unwrap();
    db = check(db, "after applying them again".into()).await;
    db.close().await.unwrap();

    // Through the API, after start-up and after a restart: the acceptance still counts.
    let s = TestServer::start_on(backend, url, dir, |_| {}).await;
    let login = s
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({ "email": "early@example.com", "password": PASSWORD })),
        )
        .await;
    let token = login.assert_status(200)["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let status = s.get("/v1/me/terms", &token).await;
    assert_eq!(status.body["must_accept"], false, "{}", status.text);
    let s = s.restart().await;
    let status = s.get("/v1/me/terms", &token).await;
    assert_eq!(
        status.body["must_accept"], false,
        "after restart: {}",
        status.text
    );
    // The early user's own audit events include the one written before the later migrations.
    let events = s.get("/v1/audit-events", &token).await;
    assert!(
        events.text.contains("req-early"),
        "the early audit event is listed after a restart: {}",
        events.text
    );
}

/// The routes of the latest revision become a row per domain, with that revision; down puts
/// them back into the revision's row.
async fn routes_move_to_a_row_per_domain_and_back(backend: Backend) {
    use bulkhead_routing::{Route, Upstream};

    let Some((db, _url, _dir)) = connect(backend).await else {
        return;
    };
    Migrator::up(&db, Some(ROUTES_BY_DOMAIN - 1)).await.unwrap();
    let service = uuid::Uuid::now_v7();
    let routes: Vec<Route> = ["a.example.test", "b.example.test"]
        .into_iter()
        .map(|domain| Route {
            domain: domain.into(),
            project_id: uuid::Uuid::now_v7(),
            service_id: service,
            upstreams: vec![Upstream {
                address: "10.0.0.7:8080".into(),
                provider: "gcp".into(),
                region: "europe-west1-b".into(),
                instance_key: format!("web-1-{domain}"),
                weight: 1,
            }],
        })
        .collect();
    for (revision, stored) in [
        (1i64, None),
        (2, Some(serde_json::to_string(&routes).unwrap())),
    ] {
        db.execute(
            &Query::insert()
                .into_table("routing_revisions")
                .columns([
                    "revision",
                    "content_hash",
                    "changes",
                    "drop_intended",
                    "routes",
                    "created_at",
                ])
                .values_panic([
                    revision.into(),
                    format!("{revision:064}").into(),
                    "[]".into(),
                    true.into(),
                    stored.into(),
                    chrono::Utc::now().into(),
                ])
                .to_owned(),
        )
        .await
        .unwrap();
    }
    Migrator::up(&db, Some(1)).await.unwrap();
    let rows = db
        .query_all(
            &Query::select()
                .columns(["domain", "revision", "route"])
                .from("routes")
                .order_by("domain", sea_orm::Order::Asc)
                .to_owned(),
        )
        .await
        .unwrap();
    let moved: Vec<(String, i64, Route)> = rows
        .iter()
        .map(|row| {
            let route: String = row.try_get_by_index(2).unwrap();
            (
                row.try_get_by_index(0).unwrap(),
                row.try_get_by_index(1).unwrap(),
                serde_json::from_str(&route).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        moved,
        routes
            .iter()
            .map(|route| (route.domain.clone(), 2, route.clone()))
            .collect::<Vec<_>>()
    );

    Migrator::down(&db, Some(1)).await.unwrap();
    let back = db
        .query_one(
            &Query::select()
                .column("routes")
                .from("routing_revisions")
                .and_where(Expr::col("revision").eq(2))
                .to_owned(),
        )
        .await
        .unwrap()
        .unwrap();
    let back: String = back.try_get_by_index(0).unwrap();
    assert_eq!(serde_json::from_str::<Vec<Route>>(&back).unwrap(), routes);
    db.close().await.unwrap();
}

/// A database from when servers bundled the `example` demo provider keeps it enabled, and
/// default placement would use it: the upgrade turns it off, and only it.
async fn the_demo_provider_of_an_older_database_is_turned_off(backend: Backend) {
    use bulkhead::entity::provider;
    use sea_orm::Set;

    let Some((db, _url, _dir)) = connect(backend).await else {
        return;
    };
    Migrator::up(&db, Some(EXAMPLE_PROVIDER_OFF - 1))
        .await
        .unwrap();
    let now = chrono::Utc::now();
    for name in ["example", "gcp"] {
        provider::Entity::insert(provider::ActiveModel {
            name: Set(name.into()),
            plugin_digest: Set(None),
            previous_digest: Set(None),
            config: Set(json!({})),
            secrets: Set(json!({})),
            allowlist: Set(json!([])),
            limits: Set(json!({})),
            enabled: Set(true),
            health: Set(bulkhead::entity::provider::ProviderHealth::Healthy),
            health_reason: Set(String::new()),
            health_changed_at: Set(None),
            drained: Set(false),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        })
        .exec(&db)
        .await
        .unwrap();
    }
    Migrator::up(&db, Some(1)).await.unwrap();
    let enabled = |name: &'static str| {
        let db = db.clone();
        async move {
            let found = provider::Entity::find_by_id(name.to_owned())
                .one(&db)
                .await
                .unwrap()
                .unwrap();
            (found.enabled, found.revision)
        }
    };
    assert_eq!(enabled("example").await, (false, 2));
    assert_eq!(enabled("gcp").await, (true, 1));
    db.close().await.unwrap();
}
