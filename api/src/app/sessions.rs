//! Sessions: password login, refresh-token rotation with reuse detection, logout, and turning a
//! bearer credential (JWT access token or opaque API token) into a [`Principal`].

use std::collections::BTreeSet;

use chrono::{Duration as ChronoDuration, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::App;
use super::audit::{AuditEntry, audit_record};
use crate::auth::{
    REFRESH_TOKEN_PREFIX, opaque_token_generate, opaque_token_hash, password_hash, password_verify,
};
use crate::authz::{Credential, OpContext, Principal, Scope};
use crate::entity::{api_token, refresh_token, user};
use crate::error::{ApiError, ApiResult};

/// Credentials of a password login.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub email: String,
    #[schema(format = Password)]
    pub password: String,
}

/// A refresh token, to rotate or to revoke.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefreshRequest {
    pub refresh_token: String,
}

/// Tokens of a session.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionTokens {
    /// A JWT to send as `Authorization: Bearer`.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: String,
    /// Seconds until `access_token` expires.
    pub expires_in: u64,
    /// Exchange at `/v1/auth/refresh` for new tokens; usable once.
    pub refresh_token: String,
}

fn bad_credentials() -> ApiError {
    ApiError::unauthenticated("invalid email or password")
}

fn bad_refresh_token() -> ApiError {
    ApiError::unauthenticated("the refresh token is invalid, expired or revoked")
}

impl App {
    /// Checks a password and opens a session.
    pub async fn session_login(
        &self,
        request: LoginRequest,
        request_id: &str,
    ) -> ApiResult<SessionTokens> {
        let email = request.email.trim().to_lowercase();
        let found = user::Entity::find()
            .filter(user::Column::Email.eq(&email))
            .one(&self.db)
            .await?;
        let password = request.password;
        let hash = found.as_ref().and_then(|u| u.password_hash.clone());
        // Verify against a dummy hash when there is no user, so timing does not tell which emails exist.
        let valid = tokio::task::spawn_blocking(move || match hash {
            Some(hash) => password_verify(&password, &hash),
            None => {
                let _ = password_hash(&password);
                false
            }
        })
        .await
        .map_err(ApiError::internal)?;
        let user = match found {
            Some(user) if valid && !user.disabled => user,
            _ => return Err(bad_credentials()),
        };
        let txn = crate::db::begin_write(&self.db).await?;
        let mut active: user::ActiveModel = user.clone().into();
        active.last_login_at = Set(Some(Utc::now()));
        active.update(&txn).await?;
        let tokens = self
            .session_tokens_issue(&txn, user.id, Uuid::now_v7())
            .await?;
        let ctx = OpContext {
            principal: Principal {
                user: user.clone(),
                credential: Credential::Session,
                scopes: Scope::ALL.into(),
            },
            request_id: request_id.to_owned(),
        };
        audit_record(
            &txn,
            &ctx,
            AuditEntry {
                action: "session.login",
                resource_type: "user",
                resource_id: user.id.to_string(),
                project_id: None,
                details: serde_json::json!({}),
            },
        )
        .await?;
        txn.commit().await?;
        Ok(tokens)
    }

    /// Exchanges a refresh token for new tokens. A refresh token that was already used means
    /// it was stolen or replayed: the whole session (token family) is revoked.
    pub async fn session_refresh(&self, request: RefreshRequest) -> ApiResult<SessionTokens> {
        let hash = opaque_token_hash(&request.refresh_token);
        let txn = crate::db::begin_write(&self.db).await?;
        let Some(stored) = refresh_token::Entity::find()
            .filter(refresh_token::Column::TokenHash.eq(hash))
            .one(&txn)
            .await?
        else {
            return Err(bad_refresh_token());
        };
        let now = Utc::now();
        if stored.used_at.is_some() || stored.revoked_at.is_some() {
            family_revoke(&txn, stored.family_id).await?;
            txn.commit().await?;
            tracing::warn!(user_id = %stored.user_id, "refresh token reused; session revoked");
            return Err(bad_refresh_token());
        }
        if stored.expires_at <= now {
            return Err(bad_refresh_token());
        }
        let owner = user::Entity::find_by_id(stored.user_id).one(&txn).await?;
        if owner.is_none_or(|u| u.disabled) {
            return Err(bad_refresh_token());
        }
        let marked = refresh_token::Entity::update_many()
            .col_expr(refresh_token::Column::UsedAt, Expr::value(now))
            .filter(refresh_token::Column::Id.eq(stored.id))
            .filter(refresh_token::Column::UsedAt.is_null())
            .exec(&txn)
            .await?;
        if marked.rows_affected != 1 {
            return Err(bad_refresh_token());
        }
        let tokens = self
            .session_tokens_issue(&txn, stored.user_id, stored.family_id)
            .await?;
        txn.commit().await?;
        Ok(tokens)
    }

    /// Revokes the session that `request.refresh_token` belongs to. Unknown tokens are ignored,
    /// so that logout never tells whether a token existed.
    pub async fn session_logout(&self, request: RefreshRequest) -> ApiResult<()> {
        let hash = opaque_token_hash(&request.refresh_token);
        let txn = crate::db::begin_write(&self.db).await?;
        if let Some(stored) = refresh_token::Entity::find()
            .filter(refresh_token::Column::TokenHash.eq(hash))
            .one(&txn)
            .await?
        {
            family_revoke(&txn, stored.family_id).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    async fn session_tokens_issue(
        &self,
        db: &impl ConnectionTrait,
        user_id: Uuid,
        family_id: Uuid,
    ) -> ApiResult<SessionTokens> {
        let refresh = opaque_token_generate(REFRESH_TOKEN_PREFIX);
        let now = Utc::now();
        let ttl = ChronoDuration::from_std(self.settings.refresh_token_ttl)
            .map_err(ApiError::internal)?;
        refresh_token::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(user_id),
            family_id: Set(family_id),
            token_hash: Set(opaque_token_hash(&refresh)),
            expires_at: Set(now + ttl),
            used_at: Set(None),
            revoked_at: Set(None),
            created_at: Set(now),
        }
        .insert(db)
        .await?;
        let ttl = self.settings.access_token_ttl;
        let access_token = self
            .jwt
            .access_token_issue(user_id, ttl)
            .map_err(ApiError::internal)?;
        Ok(SessionTokens {
            access_token,
            token_type: "Bearer".into(),
            expires_in: ttl.as_secs(),
            refresh_token: refresh,
        })
    }

    /// Authenticates a bearer credential: a JWT (three dot-separated parts) or an API token.
    pub async fn principal_from_bearer(&self, bearer: &str) -> ApiResult<Principal> {
        if bearer.split('.').count() == 3 {
            let claims = self.jwt.access_token_verify(bearer).map_err(|err| {
                tracing::debug!(error = %err, "access token refused");
                ApiError::unauthenticated("the access token is invalid or expired")
            })?;
            let user = self.active_user(claims.sub).await?;
            return Ok(Principal {
                user,
                credential: Credential::Session,
                scopes: Scope::ALL.into(),
            });
        }
        // The token and its user in one query: this runs on every request.
        let (token, user) = api_token::Entity::find()
            .filter(api_token::Column::TokenHash.eq(opaque_token_hash(bearer)))
            .find_also_related(user::Entity)
            .one(&self.db)
            .await?
            .ok_or_else(|| ApiError::unauthenticated("the API token is invalid"))?;
        let now = Utc::now();
        if token.revoked_at.is_some() || token.expires_at.is_some_and(|at| at <= now) {
            return Err(ApiError::unauthenticated(
                "the API token is revoked or expired",
            ));
        }
        let scopes: BTreeSet<Scope> =
            serde_json::from_value(token.scopes.clone()).map_err(ApiError::internal)?;
        let user = match user {
            Some(user) if !user.disabled => user,
            _ => return Err(user_gone()),
        };
        // Recording use costs a write; once a minute is precise enough to spot unused tokens.
        if token
            .last_used_at
            .is_none_or(|at| now - at > ChronoDuration::seconds(60))
        {
            api_token::Entity::update_many()
                .col_expr(api_token::Column::LastUsedAt, Expr::value(now))
                .filter(api_token::Column::Id.eq(token.id))
                .exec(&self.db)
                .await?;
        }
        Ok(Principal {
            user,
            credential: Credential::ApiToken(token.id),
            scopes,
        })
    }

    async fn active_user(&self, id: Uuid) -> ApiResult<user::Model> {
        match user::Entity::find_by_id(id).one(&self.db).await? {
            Some(user) if !user.disabled => Ok(user),
            _ => Err(user_gone()),
        }
    }
}

fn user_gone() -> ApiError {
    ApiError::unauthenticated("the user of this credential is disabled or gone")
}

async fn family_revoke(db: &impl ConnectionTrait, family_id: Uuid) -> ApiResult<()> {
    refresh_token::Entity::update_many()
        .col_expr(refresh_token::Column::RevokedAt, Expr::value(Utc::now()))
        .filter(refresh_token::Column::FamilyId.eq(family_id))
        .filter(refresh_token::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    Ok(())
}
