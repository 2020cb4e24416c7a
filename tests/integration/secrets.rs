//! Secrets at rest: no secret is stored in plaintext (checked in the raw database), a wrong
//! master key fails at start without changing anything, and rotating the key loses nothing,
//! even when the rotation is interrupted.

use reqwest::Method;
use sea_orm::{ConnectionTrait, Database, EntityTrait, Statement};
use serde_json::json;

use bulkhead::entity::{data_key, service};
use bulkhead::secrets::MasterKey;

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, Backend, PASSWORD, TestServer, database_fresh, settings};

db_tests!(no_secret_is_stored_in_plaintext);

const VARIABLE_SECRET: &str = "variable-secret-7f3a9c";
const PROVIDER_SECRET: &str = "provider-secret-51be02";

/// A project with a service that has a secret variable; returns the service's id.
async fn service_with_secret(s: &TestServer, token: &str) -> String {
    let project = s.project_create(token, "vault").await;
    let environment = s.environment_create(token, &project, "production").await;
    s.service_create(
        token,
        &project,
        &environment,
        json!({
            "name": "web", "port": 8080,
            "source": { "type": "artifact", "image": "vault/web:1" },
            "variables": [{ "name": "DB_PASSWORD", "value": VARIABLE_SECRET, "secret": true }],
        }),
    )
    .await
}

/// Every text the database holds, as one string: the SQLite file and its WAL byte for byte,
/// or every row of every table of the PostgreSQL database.
async fn database_dump(s: &TestServer) -> String {
    match s.backend {
        Backend::Sqlite => {
            let path = s.database_url.trim_start_matches("sqlite://").to_owned();
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.extend(std::fs::read(format!("{path}-wal")).unwrap_or_default());
            String::from_utf8_lossy(&bytes).into_owned()
        }
        Backend::Postgres => {
            let db = &s.app().db;
            let tables = db
                .query_all_raw(Statement::from_string(
                    db.get_database_backend(),
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
                ))
                .await
                .unwrap();
            let mut dump = String::new();
            for table in tables {
                let name: String = table.try_get_by_index(0).unwrap();
                let rows = db
                    .query_all_raw(Statement::from_string(
                        db.get_database_backend(),
                        format!("SELECT t::text FROM \"{name}\" t"),
                    ))
                    .await
                    .unwrap();
                for row in rows {
                    dump.push_str(&row.try_get_by_index::<String>(0).unwrap());
                    dump.push('\n');
                }
            }
            dump
        }
    }
}

async fn no_secret_is_stored_in_plaintext(s: TestServer) {
    let owner = s.user_with_session("vault-owner@example.com").await;
    let service_id = service_with_secret(&s, &owner).await;
    s.patch(
        "/v1/providers/aws",
        ADMIN_TOKEN,
        json!({ "secrets": { "access_key_id": "AKIDEXAMPLE", "secret_access_key": PROVIDER_SECRET } }),
    )
    .await
    .assert_status(200);
    // A value in the sealed form is refused, not stored as if it were sealed.
    s.patch(
        "/v1/providers/aws",
        ADMIN_TOKEN,
        json!({ "secrets": { "secret_access_key": format!("bhsealed:v1:{}", "x".repeat(20_000)) } }),
    )
    .await
    .assert_problem(422, "invalid_request");
    // A new token's value, in a response stored for idempotent replay.
    let token = TestServer::send(
        s.request(Method::POST, "/v1/tokens", Some(&owner))
            .header("idempotency-key", "vault-token")
            .json(&json!({ "name": "ci", "scopes": ["read"] })),
    )
    .await;
    let token_secret = token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();

    // The signing key's private half: the base64 body of its PEM.
    let signing_key = bulkhead::entity::signing_key::Entity::find()
        .one(&s.app().db)
        .await
        .unwrap()
        .unwrap();
    let private_pem =
        bulkhead::auth::signing_key_private_pem(&s.app().secrets, &signing_key).unwrap();
    let private_body: String = private_pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    assert!(private_body.len() > 40);

    let dump = database_dump(&s).await;
    assert!(
        dump.contains("DB_PASSWORD"),
        "the dump is not the database's"
    );
    for secret in [
        VARIABLE_SECRET,
        PROVIDER_SECRET,
        token_secret.as_str(),
        private_body.as_str(),
    ] {
        assert!(!dump.contains(secret), "`{secret}` is stored in plaintext");
    }
    // Sealed is not lost: the deploy pipeline gets the value back.
    let model = service::Entity::find_by_id(uuid::Uuid::parse_str(&service_id).unwrap())
        .one(&s.app().db)
        .await
        .unwrap()
        .unwrap();
    let environment = s.app().service_environment(&model).unwrap();
    assert_eq!(environment["DB_PASSWORD"], VARIABLE_SECRET);
    // And the replay still answers with the token's value.
    let replay = TestServer::send(
        s.request(Method::POST, "/v1/tokens", Some(&owner))
            .header("idempotency-key", "vault-token")
            .json(&json!({ "name": "ci", "scopes": ["read"] })),
    )
    .await;
    assert_eq!(replay.assert_status(201)["secret"], token_secret.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_fails_at_start_and_changes_nothing() {
    let (url, dir) = database_fresh(Backend::Sqlite).await.unwrap();
    let first = bulkhead::server::start(settings(&url, dir.path()))
        .await
        .unwrap();
    let expected_id = first.app.secrets.master_key_id.clone();
    first.shutdown().await.unwrap();
    assert!(
        dir.path().join("secret.key").exists(),
        "the key was generated"
    );
    let db = Database::connect(&url).await.unwrap();
    let before = data_key::Entity::find().all(&db).await.unwrap();

    let mut wrong = settings(&url, dir.path());
    wrong.secret_key = Some(MasterKey::generate().1.into());
    let err = match bulkhead::server::start(wrong).await {
        Ok(_) => panic!("a server started with the wrong secret key"),
        Err(err) => format!("{err:#}"),
    };
    assert!(err.contains(&format!("(id {expected_id})")), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(data_key::Entity::find().all(&db).await.unwrap(), before);
    db.close().await.unwrap();
    // The right key still opens it.
    let again = bulkhead::server::start(settings(&url, dir.path()))
        .await
        .unwrap();
    again.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_key_loses_nothing_even_when_interrupted() {
    let (url, dir) = database_fresh(Backend::Sqlite).await.unwrap();
    let s = TestServer::start_on(Backend::Sqlite, url.clone(), dir, |_| {}).await;
    let owner = s.user_with_session("rotate@example.com").await;
    let service_id = uuid::Uuid::parse_str(&service_with_secret(&s, &owner).await).unwrap();
    let old_id = s.app().secrets.master_key_id.clone();
    let data_dir = s.app().settings.data_dir.clone();
    // Rotated while the server runs: the data keys are re-wrapped in one transaction, and a
    // running server keeps the keys it unwrapped at start.
    let report = bulkhead::secrets::master_key_rotate_command(&s.app().settings, None)
        .await
        .unwrap();
    assert!(report.contains(&format!("was {old_id}")), "{report}");
    let s = s.restart().await;
    let new_id = s.app().secrets.master_key_id.clone();
    assert_ne!(new_id, old_id);
    let model = service::Entity::find_by_id(service_id)
        .one(&s.app().db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.app().service_environment(&model).unwrap()["DB_PASSWORD"],
        VARIABLE_SECRET
    );
    // The signing key opened too: a new session is signed.
    s.login("rotate@example.com").await;

    // Interrupted after the database was re-wrapped but before the new key file replaced
    // the old one: the next start finishes the rotation.
    let current = MasterKey::read_file(&data_dir.join("secret.key")).unwrap();
    let (next, text) = MasterKey::generate();
    bulkhead::secrets::key_file_write(&data_dir.join("secret.key.new"), &text).unwrap();
    bulkhead::secrets::master_key_rotate(&s.app().db, &current, &next)
        .await
        .unwrap();
    let s = s.restart().await;
    assert_eq!(s.app().secrets.master_key_id, next.id);
    assert_eq!(
        MasterKey::read_file(&data_dir.join("secret.key"))
            .unwrap()
            .id,
        next.id
    );
    assert!(!data_dir.join("secret.key.new").exists());
    let session = s
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({ "email": "rotate@example.com", "password": PASSWORD })),
        )
        .await;
    session.assert_status(200);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_and_the_key_are_private_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let url = format!("sqlite://{}", data_dir.join("bulkhead.db").display());
    let server = bulkhead::server::start(settings(&url, &data_dir))
        .await
        .unwrap();
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data_dir), 0o700);
    for file in ["bulkhead.db", "bulkhead.db-wal", "secret.key"] {
        assert_eq!(mode(&data_dir.join(file)), 0o600, "{file}");
    }
    // The compiled-code cache of the bundled plugins: trusted as code, so private too.
    let cache = data_dir.join("plugin-cache");
    assert_eq!(mode(&cache), 0o700);
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(
        !entries.is_empty(),
        "the bundled plugins are compiled into the cache"
    );
    for entry in entries {
        assert_eq!(mode(&entry), 0o600, "{}", entry.display());
    }
    server.shutdown().await.unwrap();
}
