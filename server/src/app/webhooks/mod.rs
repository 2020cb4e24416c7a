//! Outbound webhooks: endpoints a project registers to receive its deployments' events, and
//! the messages owed to each. A message is written in the transaction of the event it
//! carries ([`messages_enqueue`]), so none is lost or sent for a change that was rolled back;
//! [`crate::app::webhooks::delivery`] sends them, signed as Standard Webhooks says.
//!
//! An endpoint's URL is `https` (or `http` to a network the operator allowed, for tests and
//! private setups), holds no user or fragment, and names no private, loopback or link-local
//! address unless the operator allowed it (`--webhook-allowed-networks`); a name is checked
//! again, as it resolves, before each attempt. Admins (and owners) of the project manage
//! endpoints with a `write` token; members and viewers read them and their messages, with each
//! URL cut to its origin ([`url_shown`]): a chat service's webhook URL carries its secret in
//! its path. The audit log keeps the cut URL too.

pub mod delivery;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::projects::scoped::scoped_find;
use crate::app::projects::write::{RevisionBump, Revisioned};
use crate::app::shared::audit::AuditEntry;
use crate::app::shared::limits::Limit;
use crate::app::shared::outbound_addresses;
use crate::app::shared::pagination::{OrderedPageParams, Page, PageParams, paginate_ordered};
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::webhook_message::WebhookEventType;
use crate::entity::webhook_message::WebhookMessageState;
use crate::entity::{deployment, webhook_endpoint, webhook_message};
use crate::error::{AppError, AppResult, ErrorKind};
use crate::ids::ProjectId;

/// How long the secret before a rotation still signs messages (beside the new one).
pub const SECRET_OVERLAP: chrono::Duration = chrono::Duration::hours(24);

/// A new endpoint.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookEndpointCreate {
    /// `https://…` (or `http://` to a network the operator allowed); no user or fragment.
    #[schema(
        min_length = 1,
        max_length = 1000,
        example = "https://hooks.example.com/bulkhead"
    )]
    pub url: String,
    /// The event types to send it; empty or absent: all.
    #[serde(default)]
    #[schema(max_items = 5)]
    pub event_types: Vec<WebhookEventType>,
}

/// Changes to an endpoint; a field left out keeps its value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookEndpointUpdate {
    #[schema(min_length = 1, max_length = 1000)]
    pub url: Option<String>,
    #[schema(max_items = 5)]
    pub event_types: Option<Vec<WebhookEventType>>,
}

/// An endpoint, without its secret.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookEndpointView {
    pub id: Uuid,
    pub project_id: Uuid,
    /// The URL messages go to. A caller below `admin` in the project sees its origin only,
    /// followed by `/…` when it has a path or query (which may carry a secret).
    pub url: String,
    /// Empty: all.
    pub event_types: Vec<WebhookEventType>,
    /// Until when its breaker holds messages back (after failures in a row).
    pub open_until: Option<DateTime<Utc>>,
    /// Failed attempts in a row.
    pub failures: i32,
    /// Until when messages are also signed with the secret before the last rotation.
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<webhook_endpoint::Model> for WebhookEndpointView {
    type Error = AppError;

    fn try_from(m: webhook_endpoint::Model) -> AppResult<Self> {
        let now = Utc::now();
        Ok(Self {
            id: m.id,
            project_id: m.project_id.into(),
            url: m.url,
            event_types: serde_json::from_value(m.event_types).map_err(AppError::internal)?,
            open_until: m.open_until.filter(|until| *until > now),
            failures: m.failures,
            previous_secret_until: m.previous_secret_until.filter(|until| *until > now),
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

/// An endpoint with its signing secret, shown once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookEndpointCreated {
    #[serde(flatten)]
    pub endpoint: WebhookEndpointView,
    /// The signing secret, `whsec_` and base64 (Standard Webhooks): verify `webhook-signature`
    /// with it. It cannot be shown again (rotate it to get a new one).
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    pub secret: String,
}

/// A message owed to an endpoint, and its delivery.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookMessageView {
    pub id: Uuid,
    /// Its `webhook-id` (the same on every attempt and replay).
    pub webhook_id: String,
    pub event_type: WebhookEventType,
    pub state: WebhookMessageState,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    /// The HTTP status of the last attempt, if it got one.
    pub last_status: Option<i32>,
    pub last_error: String,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    /// The body sent (JSON).
    pub payload: serde_json::Value,
}

impl TryFrom<webhook_message::Model> for WebhookMessageView {
    type Error = AppError;

    fn try_from(m: webhook_message::Model) -> AppResult<Self> {
        Ok(Self {
            webhook_id: webhook_id(m.id),
            id: m.id,
            event_type: m.event_type,
            state: m.state,
            attempts: m.attempts,
            next_attempt_at: m.next_attempt_at,
            last_status: m.last_status,
            last_error: m.last_error,
            created_at: m.created_at,
            delivered_at: m.delivered_at,
            payload: serde_json::from_str(&m.payload).map_err(AppError::internal)?,
        })
    }
}

impl Revisioned for webhook_endpoint::Model {
    fn revision(&self) -> i64 {
        self.revision
    }
}

impl RevisionBump for webhook_endpoint::ActiveModel {
    fn revision_bump(&mut self) {
        let next = *self.revision.as_ref() + 1;
        self.revision = Set(next);
        self.updated_at = Set(Utc::now());
    }
}

/// The `webhook-id` of message `id`.
pub fn webhook_id(id: Uuid) -> String {
    format!("msg_{}", id.simple())
}

pub(crate) fn secret_purpose(id: Uuid) -> String {
    format!("webhook-endpoint-secret:{id}")
}

/// A new signing secret: `whsec_` and 24 random bytes in base64 (as Standard Webhooks'
/// libraries make them).
fn secret_generate() -> String {
    use base64::Engine;
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 24]>())
    )
}

/// Checks an endpoint's URL as far as it can without resolving its name.
fn url_check(settings: &crate::config::Settings, text: &str) -> AppResult<String> {
    outbound_addresses::url_check(&settings.webhook_allowed_networks, "url", text, 1000)
        .map(String::from)
}

fn event_types_value(types: Vec<WebhookEventType>) -> AppResult<serde_json::Value> {
    let mut types = types;
    types.dedup();
    serde_json::to_value(types).map_err(AppError::internal)
}

/// `url` as shown to a caller who may not manage the endpoint: its origin, and `/…` in place
/// of a path or query.
pub fn url_shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) if parsed.path() == "/" && parsed.query().is_none() => url.to_owned(),
        Ok(parsed) => format!("{}/…", parsed.origin().ascii_serialization()),
        Err(_) => "…".to_owned(),
    }
}

fn endpoint_audit(action: &'static str, m: &webhook_endpoint::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "webhook_endpoint",
        resource_id: m.id.to_string(),
        project_id: Some(m.project_id),
        details: serde_json::json!({ "url": url_shown(&m.url), "event_types": m.event_types }),
    }
}

/// Writes, in the caller's transaction, a message of event `event_type` of `deployment` for each
/// endpoint of its project that receives that type.
pub(crate) async fn messages_enqueue(
    db: &impl ConnectionTrait,
    deployment: &deployment::Model,
    event_type: WebhookEventType,
    message: &str,
) -> AppResult<()> {
    let endpoints = webhook_endpoint::Entity::find()
        .filter(webhook_endpoint::Column::ProjectId.eq(deployment.project_id))
        .all(db)
        .await?;
    if endpoints.is_empty() {
        return Ok(());
    }
    let now = Utc::now();
    let payload = serde_json::json!({
        "type": event_type.as_str(),
        "timestamp": now,
        "data": {
            "project_id": deployment.project_id,
            "service_id": deployment.service_id,
            "deployment_id": deployment.id,
            "number": deployment.number,
            "state": deployment.state,
            "message": message,
            "push": deployment.push,
        },
    })
    .to_string();
    for endpoint in endpoints {
        let types: Vec<WebhookEventType> =
            serde_json::from_value(endpoint.event_types).map_err(AppError::internal)?;
        if !types.is_empty() && !types.contains(&event_type) {
            continue;
        }
        webhook_message::ActiveModel {
            id: Set(Uuid::now_v7()),
            endpoint_id: Set(endpoint.id),
            event_type: Set(event_type),
            payload: Set(payload.clone()),
            state: Set(WebhookMessageState::Pending),
            attempts: Set(0),
            next_attempt_at: Set(now),
            last_status: Set(None),
            last_error: Set(String::new()),
            created_at: Set(now),
            delivered_at: Set(None),
        }
        .insert(db)
        .await?;
    }
    Ok(())
}

impl App {
    pub async fn webhook_endpoint_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<Page<webhook_endpoint::Model>> {
        let mut page = self
            .scoped_list::<webhook_endpoint::Entity>(principal, project_id, params)
            .await?;
        if !self.webhook_urls_whole(principal, project_id).await? {
            for endpoint in &mut page.items {
                endpoint.url = url_shown(&endpoint.url);
            }
        }
        Ok(page)
    }

    /// Whether `principal` sees endpoints' URLs whole: those who manage the endpoints do.
    async fn webhook_urls_whole(
        &self,
        principal: &Principal,
        project_id: ProjectId,
    ) -> AppResult<bool> {
        match self
            .project_authorize(principal, project_id, ProjectRole::Admin, Scope::Read)
            .await
        {
            Ok(_) => Ok(true),
            Err(err) if err.kind == ErrorKind::Forbidden => Ok(false),
            Err(err) => Err(err),
        }
    }

    pub async fn webhook_endpoint_view(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        id: Uuid,
    ) -> AppResult<webhook_endpoint::Model> {
        let mut endpoint = self
            .scoped_view::<webhook_endpoint::Entity>(principal, project_id, id)
            .await?;
        if !self.webhook_urls_whole(principal, project_id).await? {
            endpoint.url = url_shown(&endpoint.url);
        }
        Ok(endpoint)
    }

    /// Registers an endpoint with a new secret (returned once).
    pub async fn webhook_endpoint_create(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        create: WebhookEndpointCreate,
    ) -> AppResult<(webhook_endpoint::Model, String)> {
        let url = url_check(&self.settings, &create.url)?;
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        write
            .room_check(&self.settings.limits, Limit::WebhookEndpointsPerProject)
            .await?;
        let id = Uuid::now_v7();
        let secret = secret_generate();
        let now = Utc::now();
        let created = webhook_endpoint::ActiveModel {
            id: Set(id),
            project_id: Set(project_id),
            url: Set(url),
            event_types: Set(event_types_value(create.event_types)?),
            secret: Set(self.secrets.seal(&secret_purpose(id), &secret)),
            previous_secret: Set(None),
            previous_secret_until: Set(None),
            failures: Set(0),
            open_until: Set(None),
            created_by: Set(Some(ctx.principal.user_id())),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&write.txn)
        .await?;
        write
            .commit(endpoint_audit("webhook_endpoint.create", &created))
            .await?;
        Ok((created, secret))
    }

    pub async fn webhook_endpoint_update(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
        if_match: Option<&str>,
        update: WebhookEndpointUpdate,
    ) -> AppResult<webhook_endpoint::Model> {
        let url = update
            .url
            .map(|url| url_check(&self.settings, &url))
            .transpose()?;
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let found = write.precondition(
            scoped_find::<webhook_endpoint::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        let mut active = found.into_active_model();
        if let Some(url) = url {
            active.url = Set(url);
            // A new address starts with a closed breaker.
            active.failures = Set(0);
            active.open_until = Set(None);
        }
        if let Some(types) = update.event_types {
            active.event_types = Set(event_types_value(types)?);
        }
        let saved = write.save(active).await?;
        write
            .commit(endpoint_audit("webhook_endpoint.update", &saved))
            .await?;
        Ok(saved)
    }

    pub async fn webhook_endpoint_delete(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
        if_match: Option<&str>,
    ) -> AppResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let found = write.precondition(
            scoped_find::<webhook_endpoint::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        webhook_endpoint::Entity::delete_by_id(found.id)
            .exec(&write.txn)
            .await?;
        write
            .commit(endpoint_audit("webhook_endpoint.delete", &found))
            .await
    }

    /// A new signing secret (returned once); messages are signed with the previous one too
    /// for [`SECRET_OVERLAP`].
    pub async fn webhook_endpoint_secret_rotate(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
    ) -> AppResult<(webhook_endpoint::Model, String)> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let found = scoped_find::<webhook_endpoint::Entity>(&write.txn, project_id, id).await?;
        let secret = secret_generate();
        let mut active = found.clone().into_active_model();
        active.previous_secret = Set(Some(found.secret));
        active.previous_secret_until = Set(Some(Utc::now() + SECRET_OVERLAP));
        active.secret = Set(self.secrets.seal(&secret_purpose(id), &secret));
        let saved = write.save(active).await?;
        write
            .commit(endpoint_audit("webhook_endpoint.secret_rotate", &saved))
            .await?;
        Ok((saved, secret))
    }

    /// The messages of an endpoint (its delivery log).
    pub async fn webhook_message_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        endpoint_id: Uuid,
        params: OrderedPageParams,
    ) -> AppResult<Page<webhook_message::Model>> {
        self.webhook_endpoint_view(principal, project_id, endpoint_id)
            .await?;
        let (page, order) = params.split();
        let select = webhook_message::Entity::find()
            .filter(webhook_message::Column::EndpointId.eq(endpoint_id));
        paginate_ordered(
            &self.db,
            select,
            webhook_message::Column::Id,
            |m| m.id,
            &page,
            order,
        )
        .await
    }

    /// Sends a message again (same `webhook-id`, a fresh timestamp and signature), now,
    /// whatever became of it.
    pub async fn webhook_message_replay(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        endpoint_id: Uuid,
        id: Uuid,
    ) -> AppResult<webhook_message::Model> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        scoped_find::<webhook_endpoint::Entity>(&write.txn, project_id, endpoint_id).await?;
        let found = webhook_message::Entity::find_by_id(id)
            .filter(webhook_message::Column::EndpointId.eq(endpoint_id))
            .one(&write.txn)
            .await?
            .ok_or_else(|| AppError::not_found("webhook message"))?;
        webhook_message::Entity::update_many()
            .col_expr(
                webhook_message::Column::State,
                Expr::value(WebhookMessageState::Pending),
            )
            .col_expr(webhook_message::Column::Attempts, Expr::value(0))
            .col_expr(
                webhook_message::Column::NextAttemptAt,
                Expr::value(Utc::now()),
            )
            .filter(webhook_message::Column::Id.eq(found.id))
            .exec(&write.txn)
            .await?;
        let replayed = webhook_message::Entity::find_by_id(found.id)
            .one(&write.txn)
            .await?
            .ok_or_else(|| AppError::not_found("webhook message"))?;
        write
            .commit(AuditEntry {
                action: "webhook_message.replay",
                resource_type: "webhook_message",
                resource_id: found.id.to_string(),
                project_id: Some(project_id),
                details: serde_json::json!({ "endpoint_id": endpoint_id, "event_type": found.event_type }),
            })
            .await?;
        self.deployments_changed();
        Ok(replayed)
    }
}
