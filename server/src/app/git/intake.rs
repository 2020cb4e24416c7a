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
//!   that long, so no replay outlives its record. A push more than [`MAX_AHEAD`] ahead of the
//!   server's clock is refused too (422 `future_delivery`): it would never turn stale.
//! - **Work durably.** [`App::push_intake_run`] (on the replica that leads the deploys) turns
//!   the queued deliveries into deployments, in the order received, one transaction each:
//!   the delivery is claimed (`queued` → `deployed`) in the same transaction that inserts its
//!   deployments, and a deployment made from a delivery is unique per (delivery, service) in
//!   the database. A crash before the commit leaves the delivery queued; after it, done.
//! - **Drain by the pipeline's limits.** Deliveries wait while the deploy pipeline is paused;
//!   each push becomes one queued deployment (a newer one supersedes it), and the provider
//!   operations go at the pipeline's drain rate. A push older than the one a service already
//!   deployed from deploys nothing there (it would roll the code back).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::git::github::{
    GithubPushEvent, first_line, payload_of, push_check, signature_valid,
};
use crate::app::shared::pagination::{OrderedPageParams, Page, paginate_ordered};
use crate::authz::Principal;
use crate::entity::git_delivery::GitDeliveryState;
use crate::entity::{git_delivery, git_installation};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::ProjectId;

/// The oldest push accepted, by the forge's `repository.pushed_at` (GitHub lets a delivery be
/// redelivered for three days).
pub const MAX_AGE: chrono::Duration = chrono::Duration::hours(72);
/// How far ahead of this server's clock a push's `repository.pushed_at` may be (the forge's
/// clock and ours differ a little). A push from further ahead would stay "newest" and never
/// stale: every genuine push after it would be ignored, and it could be replayed once its
/// delivery record is purged.
pub const MAX_AHEAD: chrono::Duration = chrono::Duration::minutes(5);
/// How long processed deliveries are kept (the delivery log; at least [`MAX_AGE`]).
pub const KEEP: chrono::Duration = chrono::Duration::days(7);
/// The condition of `idx_git_deliveries_queued`, word for word (SQLite uses a partial index
/// only for a query that states its condition).
pub(crate) const QUEUED_CONDITION: &str = "state = 'queued'";

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
    type Error = AppError;

    fn try_from(m: git_delivery::Model) -> AppResult<Self> {
        let state = m.state;
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
            deployment_ids: serde_json::from_value(m.deployment_ids).map_err(AppError::internal)?,
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

/// One answer for every delivery that cannot be shown to come from the installation's forge:
/// an unknown installation is not told apart from a wrong signature.
fn signature_refused() -> AppError {
    AppError::new(
        ErrorCode::InvalidSignature,
        "`X-Hub-Signature-256` is missing or does not sign this body with the secret of the installation named by `installation`",
    )
}

/// A header's value that must be there.
fn header_required<'a>(value: Option<&'a str>, name: &str) -> AppResult<&'a str> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| AppError::new(ErrorCode::InvalidHeader, format!("`{name}` is missing")))
}

impl App {
    /// Receives one delivery of GitHub's webhook for `hook.installation`: see the module's
    /// documentation. Answers within one read and one insert.
    pub async fn github_hook_receive(&self, hook: HookDelivery<'_>) -> AppResult<HookReceipt> {
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
            return Err(AppError::new(
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
            AppError::malformed(
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
            return Err(AppError::new(
                ErrorCode::StaleDelivery,
                format!(
                    "the push is from {}, older than the {} hours a delivery is accepted for",
                    stored.pushed_at,
                    MAX_AGE.num_hours()
                ),
            ));
        }
        if stored.pushed_at - now > MAX_AHEAD {
            return Err(AppError::new(
                ErrorCode::FutureDelivery,
                format!(
                    "the push is from {}, more than {} minutes ahead of this server's clock ({now})",
                    stored.pushed_at,
                    MAX_AHEAD.num_minutes()
                ),
            ));
        }
        let (state, reason) = match &stored.ignored {
            Some(reason) => (GitDeliveryState::Ignored, reason.clone()),
            None => (GitDeliveryState::Queued, String::new()),
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
            state: Set(state),
            reason: Set(reason.clone()),
            deployment_ids: Set(serde_json::json!([])),
            processed_at: Set((state == GitDeliveryState::Ignored).then_some(now)),
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
                    .ok_or_else(|| AppError::internal("a delivery's unique row vanished"))?;
                return Ok(receipt(
                    HookOutcome::Duplicate,
                    Some(earlier.id),
                    "received at the same time by another request".into(),
                ));
            }
            Err(err) => return Err(err.into()),
        };
        if state == GitDeliveryState::Ignored {
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
        project_id: ProjectId,
        installation_id: Uuid,
        params: OrderedPageParams,
    ) -> AppResult<Page<git_delivery::Model>> {
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

    /// How many deliveries wait (for `/metrics` and the pipeline's status).
    pub async fn git_deliveries_queued(&self) -> AppResult<u64> {
        use sea_orm::PaginatorTrait;
        Ok(git_delivery::Entity::find()
            .filter(Expr::cust(QUEUED_CONDITION))
            .count(&self.db)
            .await?)
    }
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
) -> AppResult<Option<git_delivery::Model>> {
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
