//! Push intake: deliveries of a forge's push webhook (GitHub's format), accepted fast and
//! deployed durably, exactly once.
//!
//! - **Accept fast.** [`App::github_hook_receive`] checks `X-Hub-Signature-256` (HMAC-SHA256
//!   of the raw body with the installation's secret, compared in constant time) before it
//!   parses anything, stores what the push says in one insert, and answers: 202 `queued`.
//!   Nothing is deployed while the forge waits.
//! - **Never twice.** A delivery is stored once per installation by its `X-GitHub-Delivery`
//!   id and once by the SHA-256 of its body, so a redelivery, or a captured body replayed
//!   under a fresh id (the id is not signed), answers 200 `duplicate` and does nothing. A push
//!   older than [`MAX_AGE`] is refused (422 `stale_delivery`): deliveries are kept at least
//!   that long, so no replay outlives its record.
//! - **Work durably.** [`App::push_intake_run`] (on the replica that leads the deploys) turns
//!   the queued deliveries into deployments, in the order received, one transaction each:
//!   the delivery is claimed (`queued` → `deployed`) in the same transaction that inserts its
//!   deployments, and a deployment made from a delivery is unique per (delivery, service) in
//!   the database. A crash before the commit leaves the delivery queued; after it, done.
//! - **Drain by the pipeline's limits.** Deliveries wait while the deploy pipeline is paused;
//!   each push becomes one queued deployment (a newer one supersedes it), and the provider
//!   operations go at the pipeline's drain rate. A push older than the one a service already
//!   deployed from deploys nothing there (it would roll the code back).

use std::time::Duration;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sea_orm::sea_query::{Expr, LockType};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::deploys::deployments::DeploymentPush;
use crate::app::deploys::deployments::deployment_insert;
use crate::app::deploys::pipeline::deploy_control_read;
use crate::app::git::installations::{PushBinding, branch_valid, repository_valid};
use crate::app::git::statuses::status_owed;
use crate::app::projects::services::spec::ServiceSpec;
use crate::app::shared::audit::{AuditEntry, audit_record_system};
use crate::app::shared::pagination::{OrderedPageParams, Page, paginate_ordered};
use crate::authz::Principal;
use crate::entity::{deployment, git_delivery, git_installation, project, service};
use crate::error::{ApiError, ApiResult, ErrorCode};

/// The oldest push accepted, by the forge's `repository.pushed_at` (GitHub lets a delivery be
/// redelivered for three days).
pub const MAX_AGE: chrono::Duration = chrono::Duration::hours(72);
/// How long processed deliveries are kept (the delivery log; at least [`MAX_AGE`]).
pub const KEEP: chrono::Duration = chrono::Duration::days(7);
/// Deliveries read per query of the queue.
const BATCH: u64 = 100;
/// How often making a delivery's deployments is tried before it is marked `failed`.
const TRIES: u64 = 3;
/// How often the queue is read without a hint.
const INTAKE_EVERY: Duration = Duration::from_secs(1);
/// The condition of `idx_git_deliveries_queued`, word for word (SQLite uses a partial index
/// only for a query that states its condition).
const QUEUED_CONDITION: &str = "state = 'queued'";

pub const QUEUED: &str = "queued";
pub const DEPLOYED: &str = "deployed";
pub const IGNORED: &str = "ignored";
pub const FAILED: &str = "failed";

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GitDeliveryState {
    /// Stored; deploys when the pipeline takes it (not while it is paused).
    Queued,
    /// Its deployments were made (`deployment_ids`).
    Deployed,
    /// It deploys nothing (`reason` says why: not a branch, no binding, an older push).
    Ignored,
    /// Making its deployments failed (`reason`); it is not tried again.
    Failed,
}

/// A delivery an installation received.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GitDeliveryView {
    pub id: Uuid,
    pub installation_id: Uuid,
    /// The forge's id of it (`X-GitHub-Delivery`).
    pub forge_delivery_id: String,
    pub repository: String,
    pub branch: String,
    pub commit: String,
    /// The first line of the head commit's message (at most 200 characters).
    pub message: String,
    pub pusher: String,
    pub pushed_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
    pub state: GitDeliveryState,
    pub reason: String,
    /// The deployments it made.
    pub deployment_ids: Vec<Uuid>,
    pub processed_at: Option<DateTime<Utc>>,
}

impl TryFrom<git_delivery::Model> for GitDeliveryView {
    type Error = ApiError;

    fn try_from(m: git_delivery::Model) -> ApiResult<Self> {
        let state = serde_json::from_value(serde_json::Value::String(m.state.clone()))
            .map_err(ApiError::internal)?;
        Ok(Self {
            id: m.id,
            installation_id: m.installation_id,
            forge_delivery_id: m.delivery_id,
            repository: m.repository,
            branch: m.branch,
            commit: m.commit_sha,
            message: m.commit_message,
            pusher: m.pusher,
            pushed_at: m.pushed_at,
            received_at: m.received_at,
            state,
            reason: m.reason,
            deployment_ids: serde_json::from_value(m.deployment_ids).map_err(ApiError::internal)?,
            processed_at: m.processed_at,
        })
    }
}

/// What became of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookOutcome {
    /// A new push, stored (202): it deploys once the pipeline takes it.
    Queued,
    /// The same delivery, or the same body, was received before (200): nothing was done.
    Duplicate,
    /// A push that deploys nothing (a tag, a deleted branch), stored as such, or an event
    /// other than `push` and `ping`, not stored (200).
    Ignored,
    /// GitHub's `ping` (200).
    Pong,
}

/// The answer to a delivery.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HookReceipt {
    pub outcome: HookOutcome,
    /// The stored delivery (for `queued`, `duplicate` and stored `ignored`).
    pub delivery_id: Option<Uuid>,
    pub detail: String,
}

/// A delivery as received: the installation named in the query, the forge's headers and the
/// raw body (checked before anything of it is read).
pub struct HookDelivery<'a> {
    pub installation: Uuid,
    pub event: Option<&'a str>,
    pub delivery: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

/// The part of GitHub's `push` event that intake reads (the forge sends much more).
#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubPushEvent {
    /// `refs/heads/<branch>` (other refs deploy nothing).
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The commit the ref points to after the push (40 or 64 hexadecimal digits).
    pub after: String,
    /// Whether the push deleted the ref.
    #[serde(default)]
    pub deleted: bool,
    pub repository: GithubRepository,
    pub head_commit: Option<GithubCommit>,
    pub pusher: Option<GithubPusher>,
}

/// GitHub's form of a delivery (its default content type).
#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubPushForm {
    /// The event's JSON ([`GithubPushEvent`]).
    pub payload: String,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubRepository {
    /// `owner/name`.
    pub full_name: String,
    /// When the push happened, in seconds since the epoch (as GitHub sends it in `push`
    /// events).
    pub pushed_at: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubCommit {
    pub message: String,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubPusher {
    pub name: String,
}

/// One answer for every delivery that cannot be shown to come from the installation's forge:
/// an unknown installation is not told apart from a wrong signature.
fn signature_refused() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNAUTHORIZED,
        ErrorCode::InvalidSignature,
        "`X-Hub-Signature-256` is missing or does not sign this body with the secret of the installation named by `installation`",
    )
}

/// Whether `header` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under one of `secrets`,
/// compared in constant time.
pub fn signature_valid(secrets: &[String], header: &str, body: &[u8]) -> bool {
    let Some(expected) = header
        .strip_prefix("sha256=")
        .and_then(|hex| hex::decode(hex).ok())
    else {
        return false;
    };
    secrets.iter().any(|secret| {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
        mac.update(body);
        mac.verify_slice(&expected).is_ok()
    })
}

/// The JSON of a delivery: the body itself, or its `payload` field when the webhook posts a
/// form (GitHub's default content type).
fn payload_of(content_type: Option<&str>, body: &[u8]) -> ApiResult<Vec<u8>> {
    let essence = content_type
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some("application/json") => Ok(body.to_vec()),
        Some("application/x-www-form-urlencoded") => {
            serde_urlencoded::from_bytes::<GithubPushForm>(body)
                .map(|form| form.payload.into_bytes())
                .map_err(|err| {
                    ApiError::bad_request(
                        ErrorCode::InvalidBody,
                        format!("the form has no `payload` field: {err}"),
                    )
                })
        }
        _ => Err(ApiError::new(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            "a delivery is `application/json` or `application/x-www-form-urlencoded`",
        )),
    }
}

/// A header's value that must be there.
fn header_required<'a>(value: Option<&'a str>, name: &str) -> ApiResult<&'a str> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| {
        ApiError::bad_request(ErrorCode::InvalidHeader, format!("`{name}` is missing"))
    })
}

fn first_line(text: &str, max: usize) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(max)
        .collect()
}

/// Whether `sha` is a commit id (SHA-1 or SHA-256, lowercase hex).
fn commit_valid(sha: &str) -> bool {
    matches!(sha.len(), 40 | 64) && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl App {
    /// Receives one delivery of GitHub's webhook for `hook.installation`: see the module's
    /// documentation. Answers within one read and one insert.
    pub async fn github_hook_receive(&self, hook: HookDelivery<'_>) -> ApiResult<HookReceipt> {
        let installation = git_installation::Entity::find_by_id(hook.installation)
            .one(&self.db)
            .await?;
        let (Some(installation), Some(signature)) = (installation, hook.signature) else {
            metrics::counter!("git_deliveries_total", "outcome" => "refused").increment(1);
            return Err(signature_refused());
        };
        let secrets = self.git_installation_secrets(&installation)?;
        if !signature_valid(&secrets, signature, hook.body) {
            metrics::counter!("git_deliveries_total", "outcome" => "refused").increment(1);
            return Err(signature_refused());
        }
        let event = header_required(hook.event, "X-GitHub-Event")?;
        let forge_id = header_required(hook.delivery, "X-GitHub-Delivery")?;
        if forge_id.len() > 100 {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidHeader,
                "`X-GitHub-Delivery` is longer than 100 characters",
            ));
        }
        let receipt = |outcome, delivery_id, detail: String| {
            metrics::counter!("git_deliveries_total", "outcome" => outcome_label(outcome))
                .increment(1);
            HookReceipt {
                outcome,
                delivery_id,
                detail,
            }
        };
        match event {
            "ping" => return Ok(receipt(HookOutcome::Pong, None, "pong".into())),
            "push" => {}
            other => {
                return Ok(receipt(
                    HookOutcome::Ignored,
                    None,
                    format!("`{}` events deploy nothing", first_line(other, 50)),
                ));
            }
        }
        let payload = payload_of(hook.content_type, hook.body)?;
        let push: GithubPushEvent = serde_json::from_slice(&payload).map_err(|err| {
            ApiError::bad_request(
                ErrorCode::InvalidBody,
                format!("not a GitHub `push` event: {err}"),
            )
        })?;
        let digest = hex::encode(Sha256::digest(hook.body));
        if let Some(earlier) =
            delivery_earlier(&self.db, installation.id, forge_id, &digest).await?
        {
            return Ok(receipt(
                HookOutcome::Duplicate,
                Some(earlier.id),
                format!(
                    "received before, at {} ({})",
                    earlier.received_at, earlier.state
                ),
            ));
        }
        let stored = push_check(&push)?;
        let now = Utc::now();
        if now - stored.pushed_at > MAX_AGE {
            return Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::StaleDelivery,
                format!(
                    "the push is from {}, older than the {} hours a delivery is accepted for",
                    stored.pushed_at,
                    MAX_AGE.num_hours()
                ),
            ));
        }
        let (state, reason) = match &stored.ignored {
            Some(reason) => (IGNORED, reason.clone()),
            None => (QUEUED, String::new()),
        };
        let inserted = git_delivery::ActiveModel {
            id: Set(Uuid::now_v7()),
            installation_id: Set(installation.id),
            project_id: Set(installation.project_id),
            delivery_id: Set(forge_id.to_owned()),
            payload_digest: Set(digest.clone()),
            repository: Set(stored.repository),
            branch: Set(stored.branch),
            commit_sha: Set(stored.commit),
            commit_message: Set(stored.message),
            pusher: Set(stored.pusher),
            pushed_at: Set(stored.pushed_at),
            received_at: Set(now),
            state: Set(state.into()),
            reason: Set(reason.clone()),
            deployment_ids: Set(serde_json::json!([])),
            processed_at: Set((state == IGNORED).then_some(now)),
        }
        .insert(&self.db)
        .await;
        let inserted = match inserted {
            Ok(inserted) => inserted,
            // The same delivery, received twice at once: the other insert won.
            Err(err)
                if matches!(
                    err.sql_err(),
                    Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
                ) =>
            {
                let earlier = delivery_earlier(&self.db, installation.id, forge_id, &digest)
                    .await?
                    .ok_or_else(|| ApiError::internal("a delivery's unique row vanished"))?;
                return Ok(receipt(
                    HookOutcome::Duplicate,
                    Some(earlier.id),
                    "received at the same time by another request".into(),
                ));
            }
            Err(err) => return Err(err.into()),
        };
        if state == IGNORED {
            return Ok(receipt(HookOutcome::Ignored, Some(inserted.id), reason));
        }
        self.deployments_changed();
        Ok(receipt(
            HookOutcome::Queued,
            Some(inserted.id),
            "queued: it deploys the services bound to its branch".into(),
        ))
    }

    /// The deliveries of an installation.
    pub async fn git_delivery_list(
        &self,
        principal: &Principal,
        project_id: Uuid,
        installation_id: Uuid,
        params: OrderedPageParams,
    ) -> ApiResult<Page<git_delivery::Model>> {
        self.git_installation_view(principal, project_id, installation_id)
            .await?;
        let (page, order) = params.split();
        let select = git_delivery::Entity::find()
            .filter(git_delivery::Column::InstallationId.eq(installation_id));
        paginate_ordered(
            &self.db,
            select,
            git_delivery::Column::Id,
            |m| m.id,
            &page,
            order,
        )
        .await
    }

    /// Turns queued deliveries into deployments while this replica leads the deploys.
    pub async fn push_intake_run(self, stop: watch::Receiver<bool>) {
        self.deploy_leader_loop(stop, INTAKE_EVERY, "push intake", async |app| {
            app.push_intake_pass().await
        })
        .await;
    }

    /// Deploys the queued deliveries, oldest first, until none is left or the pipeline is
    /// paused; returns how many it processed.
    pub async fn push_intake_pass(&self) -> ApiResult<usize> {
        let mut processed = 0;
        loop {
            if self.deploy_control().await?.paused {
                break;
            }
            let head = git_delivery::Entity::find()
                .filter(Expr::cust(QUEUED_CONDITION))
                .order_by_asc(git_delivery::Column::Id)
                .limit(BATCH)
                .all(&self.db)
                .await?;
            let read = head.len();
            for delivery in head {
                match self.push_deploy_tries(delivery).await? {
                    Claim::Processed => processed += 1,
                    Claim::TakenElsewhere => {}
                    Claim::Paused => return Ok(processed),
                }
            }
            if read < BATCH as usize {
                break;
            }
        }
        metrics::gauge!("git_deliveries_queued").set(self.git_deliveries_queued().await? as f64);
        Ok(processed)
    }

    /// [`Self::push_deploy`], tried [`TRIES`] times (a deadlock, a busy database) before the
    /// delivery is marked `failed`; an unreachable database ends the pass instead, leaving
    /// the delivery queued.
    async fn push_deploy_tries(&self, delivery: git_delivery::Model) -> ApiResult<Claim> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.push_deploy(delivery.clone()).await {
                Ok(done) => return Ok(done),
                Err(err) if err.code == ErrorCode::NotReady => return Err(err),
                Err(err) if tries < TRIES => {
                    tracing::warn!(delivery = %delivery.id, error = %err, "push intake: trying the delivery again");
                    tokio::time::sleep(Duration::from_millis(100 * tries)).await;
                }
                Err(err) => {
                    tracing::error!(delivery = %delivery.id, error = %err, "push intake: the delivery failed");
                    self.push_fail(delivery.id, &err).await?;
                    return Ok(Claim::Processed);
                }
            }
        }
    }

    /// Makes the deployments of one delivery, in one transaction with its claim, unless
    /// another replica took it first or the pipeline is paused. The pause is read in the
    /// claim's transaction: a delivery received after a pause was answered is never deployed
    /// by a pass that began before it.
    async fn push_deploy(&self, delivery: git_delivery::Model) -> ApiResult<Claim> {
        let txn = crate::db::begin_write(&self.db).await?;
        let now = Utc::now();
        let claimed = git_delivery::Entity::update_many()
            .col_expr(git_delivery::Column::State, Expr::value(DEPLOYED))
            .col_expr(git_delivery::Column::ProcessedAt, Expr::value(now))
            .filter(git_delivery::Column::Id.eq(delivery.id))
            .filter(git_delivery::Column::State.eq(QUEUED))
            .exec(&txn)
            .await?
            .rows_affected;
        if claimed == 0 {
            return Ok(Claim::TakenElsewhere);
        }
        if deploy_control_read(&txn).await?.paused {
            txn.rollback().await?;
            return Ok(Claim::Paused);
        }
        // Writes in a project queue on its row, as the API's do (deployment numbers).
        project::Entity::find_by_id(delivery.project_id)
            .lock(LockType::NoKeyUpdate)
            .one(&txn)
            .await?;
        let installation = git_installation::Entity::find_by_id(delivery.installation_id)
            .one(&txn)
            .await?
            .ok_or_else(|| ApiError::internal("a delivery outlived its installation"))?;
        let bindings: Vec<PushBinding> =
            serde_json::from_value(installation.bindings.clone()).map_err(ApiError::internal)?;
        let push = DeploymentPush {
            delivery_id: delivery.id,
            repository: delivery.repository.clone(),
            branch: delivery.branch.clone(),
            commit: delivery.commit_sha.clone(),
            message: delivery.commit_message.clone(),
            pushed_at: delivery.pushed_at,
        };
        let mut made = Vec::new();
        let mut skipped = Vec::new();
        let mut services = Vec::new();
        for binding in bindings.iter().filter(|b| {
            b.branch == delivery.branch && b.repository.eq_ignore_ascii_case(&delivery.repository)
        }) {
            let Some(found) = service::Entity::find_by_id(binding.service_id)
                .filter(service::Column::ProjectId.eq(delivery.project_id))
                .one(&txn)
                .await?
            else {
                skipped.push(format!("service {} no longer exists", binding.service_id));
                continue;
            };
            if let Some(newer) = push_deployed_since(&txn, found.id, delivery.pushed_at).await? {
                skipped.push(format!(
                    "{} deployed a newer push already (commit {})",
                    found.name,
                    newer.commit.chars().take(12).collect::<String>()
                ));
                continue;
            }
            let spec = ServiceSpec::of(&found)?;
            let created = deployment_insert(&txn, None, &found, spec, None, Some(&push)).await?;
            status_owed(
                &txn,
                &installation,
                &created,
                &delivery.repository,
                &delivery.commit_sha,
            )
            .await?;
            audit_record_system(
                &txn,
                AuditEntry {
                    action: "deployment.create",
                    resource_type: "deployment",
                    resource_id: created.id.to_string(),
                    project_id: Some(created.project_id),
                    details: serde_json::json!({
                        "service_id": created.service_id,
                        "number": created.number,
                        "state": created.state,
                        "push": push,
                    }),
                },
            )
            .await?;
            services.push(found.id);
            made.push(created.id);
        }
        let (state, reason) = if made.is_empty() {
            let reason = if skipped.is_empty() {
                format!(
                    "no binding deploys branch `{}` of {}",
                    delivery.branch, delivery.repository
                )
            } else {
                skipped.join("; ")
            };
            (IGNORED, reason)
        } else {
            (DEPLOYED, skipped.join("; "))
        };
        git_delivery::Entity::update_many()
            .col_expr(git_delivery::Column::State, Expr::value(state))
            .col_expr(git_delivery::Column::Reason, Expr::value(reason))
            .col_expr(
                git_delivery::Column::DeploymentIds,
                Expr::value(serde_json::json!(made)),
            )
            .filter(git_delivery::Column::Id.eq(delivery.id))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        metrics::counter!("git_push_deployments_total").increment(made.len() as u64);
        if !services.is_empty() {
            self.changes.routes_changed(services);
            self.deployments_changed();
        }
        Ok(Claim::Processed)
    }

    /// Marks a delivery whose deployments could not be made `failed`, so that it does not
    /// block the queue.
    async fn push_fail(&self, id: Uuid, err: &ApiError) -> ApiResult<()> {
        git_delivery::Entity::update_many()
            .col_expr(git_delivery::Column::State, Expr::value(FAILED))
            .col_expr(
                git_delivery::Column::Reason,
                Expr::value(format!("making its deployments failed: {}", err.detail)),
            )
            .col_expr(git_delivery::Column::ProcessedAt, Expr::value(Utc::now()))
            .filter(git_delivery::Column::Id.eq(id))
            .filter(git_delivery::Column::State.eq(QUEUED))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Removes the deliveries processed more than [`KEEP`] ago; returns how many.
    pub async fn git_deliveries_purge(&self) -> ApiResult<u64> {
        Ok(git_delivery::Entity::delete_many()
            .filter(git_delivery::Column::State.ne(QUEUED))
            .filter(git_delivery::Column::ReceivedAt.lt(Utc::now() - KEEP))
            .exec(&self.db)
            .await?
            .rows_affected)
    }

    /// How many deliveries wait (for `/metrics` and the pipeline's status).
    pub async fn git_deliveries_queued(&self) -> ApiResult<u64> {
        use sea_orm::PaginatorTrait;
        Ok(git_delivery::Entity::find()
            .filter(Expr::cust(QUEUED_CONDITION))
            .count(&self.db)
            .await?)
    }
}

/// What became of a delivery a pass tried to claim.
enum Claim {
    /// Its deployments were made (or it was marked `failed` or `ignored`).
    Processed,
    /// Another replica claimed it first.
    TakenElsewhere,
    /// The pipeline is paused: it stays queued, and the pass ends.
    Paused,
}

fn outcome_label(outcome: HookOutcome) -> &'static str {
    match outcome {
        HookOutcome::Queued => "queued",
        HookOutcome::Duplicate => "duplicate",
        HookOutcome::Ignored => "ignored",
        HookOutcome::Pong => "pong",
    }
}

/// The delivery received before with the same forge id or the same body.
async fn delivery_earlier(
    db: &impl ConnectionTrait,
    installation_id: Uuid,
    forge_id: &str,
    digest: &str,
) -> ApiResult<Option<git_delivery::Model>> {
    Ok(git_delivery::Entity::find()
        .filter(git_delivery::Column::InstallationId.eq(installation_id))
        .filter(
            sea_orm::Condition::any()
                .add(git_delivery::Column::DeliveryId.eq(forge_id))
                .add(git_delivery::Column::PayloadDigest.eq(digest)),
        )
        .one(db)
        .await?)
}

/// The push a deployment of `service_id` was last made from, if it was pushed after
/// `pushed_at`.
async fn push_deployed_since(
    db: &impl ConnectionTrait,
    service_id: Uuid,
    pushed_at: DateTime<Utc>,
) -> ApiResult<Option<DeploymentPush>> {
    let last = deployment::Entity::find()
        .filter(deployment::Column::ServiceId.eq(service_id))
        .filter(deployment::Column::PushDeliveryId.is_not_null())
        .order_by_desc(deployment::Column::Number)
        .one(db)
        .await?;
    let Some(push) = last.and_then(|d| d.push) else {
        return Ok(None);
    };
    let push: DeploymentPush = serde_json::from_value(push).map_err(ApiError::internal)?;
    Ok((push.pushed_at > pushed_at).then_some(push))
}

/// What is stored of a push, checked.
struct StoredPush {
    repository: String,
    branch: String,
    commit: String,
    message: String,
    pusher: String,
    pushed_at: DateTime<Utc>,
    /// Why it deploys nothing, when that is clear from the push alone.
    ignored: Option<String>,
}

fn push_check(push: &GithubPushEvent) -> ApiResult<StoredPush> {
    let invalid = |detail: &str| ApiError::bad_request(ErrorCode::InvalidBody, detail.to_owned());
    if !repository_valid(&push.repository.full_name) {
        return Err(invalid("`repository.full_name` must be `owner/name`"));
    }
    if push.git_ref.len() > 266 {
        return Err(invalid("`ref` is longer than 266 characters"));
    }
    let deleted = push.deleted || push.after.bytes().all(|b| b == b'0');
    if !deleted && !commit_valid(&push.after) {
        return Err(invalid(
            "`after` must be a commit id: 40 or 64 lowercase hexadecimal digits",
        ));
    }
    let pushed_at = DateTime::<Utc>::from_timestamp(push.repository.pushed_at, 0)
        .ok_or_else(|| invalid("`repository.pushed_at` is not a time"))?;
    let branch = push.git_ref.strip_prefix("refs/heads/");
    let ignored = match branch {
        None => Some(format!(
            "`{}` is not a branch",
            first_line(&push.git_ref, 100)
        )),
        Some(_) if deleted => Some("the push deleted the branch".to_owned()),
        Some(branch) if !branch_valid(branch) => Some("no binding can name this branch".to_owned()),
        Some(_) => None,
    };
    Ok(StoredPush {
        repository: push.repository.full_name.clone(),
        branch: branch.unwrap_or(&push.git_ref).chars().take(255).collect(),
        commit: push.after.chars().take(64).collect(),
        message: push
            .head_commit
            .as_ref()
            .map(|c| first_line(&c.message, 200))
            .unwrap_or_default(),
        pusher: push
            .pusher
            .as_ref()
            .map(|p| p.name.chars().take(100).collect())
            .unwrap_or_default(),
        pushed_at,
        ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's documented example: the secret "It's a Secret to Everybody" and the payload
    /// "Hello, World!" give this signature.
    #[test]
    fn signatures_match_githubs_example() {
        let secrets = vec!["It's a Secret to Everybody".to_owned()];
        let header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(signature_valid(&secrets, header, b"Hello, World!"));
        assert!(!signature_valid(&secrets, header, b"Hello, World?"));
        assert!(!signature_valid(
            &secrets,
            &header.replace("sha256=", "sha1="),
            b"Hello, World!"
        ));
        assert!(!signature_valid(&secrets, "sha256=zz", b"Hello, World!"));
        let rotated = vec!["new".to_owned(), "It's a Secret to Everybody".to_owned()];
        assert!(signature_valid(&rotated, header, b"Hello, World!"));
    }

    #[test]
    fn forms_carry_the_payload() {
        let body = b"payload=%7B%22a%22%3A1%7D";
        assert_eq!(
            payload_of(Some("application/x-www-form-urlencoded"), body).unwrap(),
            br#"{"a":1}"#
        );
        assert_eq!(
            payload_of(Some("application/json; charset=utf-8"), b"{}").unwrap(),
            b"{}"
        );
        assert_eq!(
            payload_of(Some("text/plain"), b"{}").unwrap_err().status,
            415
        );
    }
}
