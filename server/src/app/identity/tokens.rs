//! API tokens: opaque, shown once at creation, stored as a hash, limited by scopes and an
//! optional expiry, revocable. Each user manages their own.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::limits::{Holder, Limit};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::app::shared::validate::text_validate;
use crate::auth::{API_TOKEN_PREFIX, opaque_token_generate, opaque_token_hash};
use crate::authz::{Credential, OpContext, Principal, Scope};
use crate::entity::api_token;
use crate::error::{AppError, AppResult};

/// An API token, without its secret value.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenView {
    pub id: Uuid,
    pub name: String,
    /// The first characters of the token, to recognise it.
    pub prefix: String,
    pub scopes: Vec<Scope>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A token just created: the only time its value is shown.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    #[serde(flatten)]
    pub token: TokenView,
    /// The secret value; send it as `Authorization: Bearer`. It cannot be shown again.
    #[serde(rename = "secret")]
    pub secret: String,
}

/// A new API token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreate {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// At least one; a token cannot have a scope that the credential creating it lacks.
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// When the token stops working (in the future); never if absent. A token created with an
    /// API token expires no later than that token (and is revoked with it).
    pub expires_at: Option<DateTime<Utc>>,
}

impl TryFrom<api_token::Model> for TokenView {
    type Error = AppError;

    fn try_from(m: api_token::Model) -> AppResult<Self> {
        Ok(Self {
            id: m.id,
            name: m.name,
            prefix: m.prefix,
            scopes: serde_json::from_value(m.scopes).map_err(AppError::internal)?,
            expires_at: m.expires_at,
            revoked_at: m.revoked_at,
            last_used_at: m.last_used_at,
            created_at: m.created_at,
        })
    }
}

impl App {
    pub async fn token_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<TokenView>> {
        principal.require_scope(Scope::Read)?;
        let select =
            api_token::Entity::find().filter(api_token::Column::UserId.eq(principal.user_id()));
        let page = paginate(&self.db, select, api_token::Column::Id, |m| m.id, &params).await?;
        Ok(Page {
            items: page
                .items
                .into_iter()
                .map(TokenView::try_from)
                .collect::<AppResult<_>>()?,
            next_cursor: page.next_cursor,
        })
    }

    pub async fn token_view(&self, principal: &Principal, id: Uuid) -> AppResult<TokenView> {
        principal.require_scope(Scope::Read)?;
        self.token_own(principal, id).await?.try_into()
    }

    pub async fn token_create(
        &self,
        ctx: &OpContext,
        create: TokenCreate,
    ) -> AppResult<TokenCreated> {
        ctx.principal.require_scope(Scope::Write)?;
        let name = text_validate("name", &create.name, 200)?;
        let scopes: BTreeSet<Scope> = create.scopes.into_iter().collect();
        if scopes.is_empty() {
            return Err(AppError::invalid("`scopes` must name at least one scope"));
        }
        if let Some(scope) = scopes
            .iter()
            .find(|scope| !ctx.principal.has_scope(**scope))
        {
            return Err(AppError::forbidden(format!(
                "cannot create a token with scope `{}`, which this credential lacks",
                serde_json::to_value(scope)
                    .unwrap_or_default()
                    .as_str()
                    .unwrap_or("?")
            )));
        }
        if create.expires_at.is_some_and(|at| at <= Utc::now()) {
            return Err(AppError::invalid("`expires_at` must be in the future"));
        }
        let secret = opaque_token_generate(API_TOKEN_PREFIX);
        let txn = crate::db::begin_write(&self.db).await?;
        // A token minted by a token lives no longer than its parent, and dies with it. The
        // parent's row (or the session's) stays locked until this commits: a revocation at the
        // same moment either waits and then finds this token, or is waited for and refuses it.
        let (parent, session_id) = match ctx.principal.credential {
            Credential::ApiToken(id) => {
                let parent = api_token::Entity::find_by_id(id)
                    .lock_exclusive()
                    .one(&txn)
                    .await?
                    .filter(|parent| parent.revoked_at.is_none())
                    .ok_or_else(|| AppError::unauthenticated("the API token is revoked"))?;
                (Some(parent), None)
            }
            Credential::Session(family) => {
                if !crate::app::identity::sessions::session_open_lock(&txn, family).await? {
                    return Err(crate::app::identity::sessions::session_ended());
                }
                (None, Some(family))
            }
        };
        // The user's row, locked: one user's creates queue here, within the cap.
        let user_id = ctx.principal.user_id();
        crate::db::row_lock::<crate::entity::user::Entity>(&txn, user_id).await?;
        self.settings
            .limits
            .room_check_held(&txn, Limit::TokensPerUser, Holder::User(user_id))
            .await?;
        let expires_at = match (
            create.expires_at,
            parent.as_ref().and_then(|p| p.expires_at),
        ) {
            (Some(asked), Some(limit)) => Some(asked.min(limit)),
            (asked, limit) => asked.or(limit),
        };
        let created = api_token::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(ctx.principal.user_id()),
            name: Set(name),
            token_hash: Set(opaque_token_hash(&secret)),
            prefix: Set(secret.chars().take(7).collect()),
            scopes: Set(serde_json::to_value(&scopes).map_err(AppError::internal)?),
            expires_at: Set(expires_at),
            revoked_at: Set(None),
            last_used_at: Set(None),
            created_at: Set(Utc::now()),
            parent_token_id: Set(parent.map(|p| p.id)),
            session_id: Set(session_id),
        }
        .insert(&txn)
        .await?;
        audit_record(&txn, ctx, token_audit("token.create", &created)).await?;
        txn.commit().await?;
        Ok(TokenCreated {
            token: created.try_into()?,
            secret,
        })
    }

    /// Revokes a token and every token minted from it, at any depth; revoking a revoked
    /// token changes nothing.
    pub async fn token_revoke(&self, ctx: &OpContext, id: Uuid) -> AppResult<()> {
        ctx.principal.require_scope(Scope::Write)?;
        let token = self.token_own(&ctx.principal, id).await?;
        if token.revoked_at.is_some() {
            return Ok(());
        }
        let txn = crate::db::begin_write(&self.db).await?;
        let revoked = tokens_revoke_tree(&txn, vec![token.id]).await?;
        let mut entry = token_audit("token.revoke", &token);
        entry.details["revoked_with_it"] = revoked.saturating_sub(1).into();
        audit_record(&txn, ctx, entry).await?;
        txn.commit().await?;
        self.auth_changed();
        Ok(())
    }

    async fn token_own(&self, principal: &Principal, id: Uuid) -> AppResult<api_token::Model> {
        api_token::Entity::find_by_id(id)
            .filter(api_token::Column::UserId.eq(principal.user_id()))
            .one(&self.db)
            .await?
            .ok_or_else(|| AppError::not_found("token"))
    }
}

/// Revokes `roots` and every token minted from them, at any depth; returns how many it revoked.
///
/// Level by level, each level is revoked (its rows locked) before its children are read: a
/// token being minted from one of them at that moment holds its parent's lock
/// ([`App::token_create`]), so it has either committed, and is found as a child, or it waits
/// and then reads its parent revoked.
pub(crate) async fn tokens_revoke_tree(
    db: &impl ConnectionTrait,
    roots: Vec<Uuid>,
) -> AppResult<u64> {
    let now = Utc::now();
    let mut revoked = 0;
    let mut level = roots;
    while !level.is_empty() {
        revoked += api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now))
            .filter(api_token::Column::Id.is_in(level.clone()))
            .filter(api_token::Column::RevokedAt.is_null())
            .exec(db)
            .await?
            .rows_affected;
        level = api_token::Entity::find()
            .select_only()
            .column(api_token::Column::Id)
            .filter(api_token::Column::ParentTokenId.is_in(level))
            .filter(api_token::Column::RevokedAt.is_null())
            .into_tuple()
            .all(db)
            .await?;
    }
    Ok(revoked)
}

fn token_audit(action: &'static str, token: &api_token::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "token",
        resource_id: token.id.to_string(),
        project_id: None,
        details: serde_json::json!({ "name": token.name, "scopes": token.scopes }),
    }
}
