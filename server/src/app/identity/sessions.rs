//! Sessions: password login, refresh-token rotation with reuse detection, logout, and turning a
//! bearer credential (JWT access token or opaque API token) into a [`Principal`].

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

use chrono::{Duration as ChronoDuration, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::auth::{
    REFRESH_TOKEN_PREFIX, opaque_token_generate, opaque_token_hash, password_hash, password_verify,
};
use crate::authz::{Credential, OpContext, Principal, Scope};
use crate::entity::{api_token, refresh_token, user};
use crate::error::{AppError, AppResult};

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

fn bad_credentials() -> AppError {
    AppError::unauthenticated("invalid email or password")
}

fn bad_refresh_token() -> AppError {
    AppError::unauthenticated("the refresh token is invalid, expired or revoked")
}

impl App {
    /// Checks a password and opens a session. Attempts are rate-limited per client address
    /// and per account, and the check waits for a hashing slot.
    pub async fn session_login(
        &self,
        request: LoginRequest,
        client: IpAddr,
        request_id: &str,
    ) -> AppResult<SessionTokens> {
        let email = request.email.trim().to_lowercase();
        self.login.attempt_from(client, &email)?;
        let found = user::Entity::find()
            .filter(user::Column::Email.eq(&email))
            .one(&self.db)
            .await?;
        // An unknown email is looked up like a known one, so timing does not tell them apart.
        let known = self
            .sign_in_address_known(found.as_ref().map_or(Uuid::nil(), |u| u.id), client)
            .await?;
        self.login.attempt_account_wide(&email, known)?;
        let password = request.password;
        let hash = found.as_ref().and_then(|u| u.password_hash.clone());
        // Verify against a dummy hash when there is no user, so timing does not tell which emails exist.
        let valid = self
            .login
            .hash(move || match hash {
                Some(hash) => password_verify(&password, &hash),
                None => {
                    let _ = password_hash(&password);
                    false
                }
            })
            .await?;
        let user = match found {
            Some(user) if valid && !user.disabled => user,
            _ => return Err(bad_credentials()),
        };
        self.session_open(user, client, request_id, "password")
            .await
    }

    /// Opens a session for `user`, signed in by `method` (`password`, or an identity
    /// provider's name) from `client`.
    pub(crate) async fn session_open(
        &self,
        user: user::Model,
        client: IpAddr,
        request_id: &str,
        method: &str,
    ) -> AppResult<SessionTokens> {
        let txn = crate::db::begin_write(&self.db).await?;
        let mut active: user::ActiveModel = user.clone().into();
        active.last_login_at = Set(Some(Utc::now()));
        active.update(&txn).await?;
        Self::sign_in_address_record(&txn, user.id, client).await?;
        let family = Uuid::now_v7();
        let tokens = self.session_tokens_issue(&txn, &user, family).await?;
        let ctx = OpContext {
            principal: Principal {
                user: user.clone(),
                credential: Credential::Session(family),
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
                details: serde_json::json!({ "method": method }),
            },
        )
        .await?;
        txn.commit().await?;
        self.sign_in_addresses_changed(user.id);
        Ok(tokens)
    }

    /// Exchanges a refresh token for new tokens. A refresh token that was already used means
    /// it was stolen or replayed: the whole session (token family) is revoked.
    pub async fn session_refresh(&self, request: RefreshRequest) -> AppResult<SessionTokens> {
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
            let minted = session_compromised_revoke(&txn, stored.family_id).await?;
            txn.commit().await?;
            self.auth_changed();
            tracing::warn!(user_id = %stored.user_id, minted_tokens_revoked = minted, "refresh token reused; session revoked");
            return Err(bad_refresh_token());
        }
        if stored.expires_at <= now {
            return Err(bad_refresh_token());
        }
        let owner = match user::Entity::find_by_id(stored.user_id).one(&txn).await? {
            Some(owner) if !owner.disabled => owner,
            _ => return Err(bad_refresh_token()),
        };
        let marked = refresh_token::Entity::update_many()
            .col_expr(refresh_token::Column::UsedAt, Expr::value(now))
            .filter(refresh_token::Column::Id.eq(stored.id))
            .filter(refresh_token::Column::UsedAt.is_null())
            .exec(&txn)
            .await?;
        if marked.rows_affected != 1 {
            // Another use of this token got there first (on PostgreSQL, both read it unused):
            // a second use is reuse, whichever came first.
            let minted = session_compromised_revoke(&txn, stored.family_id).await?;
            txn.commit().await?;
            self.auth_changed();
            tracing::warn!(user_id = %stored.user_id, minted_tokens_revoked = minted, "refresh token used twice at once; session revoked");
            return Err(bad_refresh_token());
        }
        let tokens = self
            .session_tokens_issue(&txn, &owner, stored.family_id)
            .await?;
        txn.commit().await?;
        Ok(tokens)
    }

    /// Revokes the session that `request.refresh_token` belongs to: its refresh tokens, and
    /// its access tokens from the next request on. API tokens minted in it stay (they are
    /// made to outlive a session). Unknown tokens are ignored, so that logout never tells
    /// whether a token existed.
    pub async fn session_logout(&self, request: RefreshRequest) -> AppResult<()> {
        let hash = opaque_token_hash(&request.refresh_token);
        let txn = crate::db::begin_write(&self.db).await?;
        let found = refresh_token::Entity::find()
            .filter(refresh_token::Column::TokenHash.eq(hash))
            .one(&txn)
            .await?;
        if let Some(stored) = &found {
            family_revoke(&txn, stored.family_id).await?;
        }
        txn.commit().await?;
        if found.is_some() {
            self.auth_changed();
        }
        Ok(())
    }

    async fn session_tokens_issue(
        &self,
        db: &impl ConnectionTrait,
        user: &user::Model,
        family_id: Uuid,
    ) -> AppResult<SessionTokens> {
        let user_id = user.id;
        let refresh = opaque_token_generate(REFRESH_TOKEN_PREFIX);
        let now = Utc::now();
        let ttl = ChronoDuration::from_std(self.settings.refresh_token_ttl)
            .map_err(AppError::internal)?;
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
            .access_token_issue(user_id, family_id, user.session_epoch, ttl)
            .map_err(AppError::internal)?;
        Ok(SessionTokens {
            access_token,
            token_type: "Bearer".into(),
            expires_in: ttl.as_secs(),
            refresh_token: refresh,
        })
    }

    /// Authenticates a bearer credential: a JWT (three dot-separated parts) or an API token.
    /// A credential verified in the last few seconds is taken from the [`crate::app::identity::auth_cache`]
    /// (its expiry is still checked on every use).
    /// The principal of `bearer` when the auth cache holds it, unexpired, and its use needs
    /// no recording now: what [`Self::principal_from_bearer`] would answer without a read.
    pub fn principal_cached(&self, bearer: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(bearer.as_bytes()).into();
        let now = Utc::now().timestamp();
        let cached = self.auth_cache.principal(&digest)?;
        if cached.expires_at.is_some_and(|at| at <= now) {
            return None;
        }
        if cached.principal.token_id().is_some()
            && now - cached.last_used_recorded.load(Ordering::Relaxed) > TOKEN_USE_RECORD_SECS
        {
            return None;
        }
        Some(cached.principal.clone())
    }

    pub async fn principal_from_bearer(&self, bearer: &str) -> AppResult<Principal> {
        let digest: [u8; 32] = Sha256::digest(bearer.as_bytes()).into();
        let now = Utc::now().timestamp();
        if let Some(cached) = self.auth_cache.principal(&digest) {
            if cached.expires_at.is_some_and(|at| at <= now) {
                return Err(credential_expired(&cached.principal));
            }
            if let Some(token_id) = cached.principal.token_id() {
                let last = cached.last_used_recorded.load(Ordering::Relaxed);
                if now - last > TOKEN_USE_RECORD_SECS
                    && cached
                        .last_used_recorded
                        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    self.token_use_record(token_id).await?;
                }
            }
            return Ok(cached.principal.clone());
        }
        let generation = self.auth_cache.generation();
        let (principal, expires_at, last_used) = if bearer.split('.').count() == 3 {
            self.session_principal(bearer).await?
        } else {
            self.token_principal(&hex::encode(digest), now).await?
        };
        self.auth_cache.principal_insert(
            digest,
            generation,
            principal.clone(),
            expires_at,
            last_used,
        );
        Ok(principal)
    }

    /// A JWT access token's principal and expiry.
    async fn session_principal(&self, bearer: &str) -> AppResult<(Principal, Option<i64>, i64)> {
        let claims = self.jwt.access_token_verify(bearer).map_err(|err| {
            tracing::debug!(error = %err, "access token refused");
            AppError::unauthenticated("the access token is invalid or expired")
        })?;
        // A token from before sessions had ids names none: its holder would share one
        // idempotency namespace with every other such holder.
        if claims.sid.is_nil() {
            return Err(AppError::unauthenticated(
                "this access token predates session ids; log in again",
            ));
        }
        let user = self.active_user(claims.sub).await?;
        if claims.sep != user.session_epoch {
            return Err(AppError::unauthenticated(
                "the session has ended (the password changed or the user was disabled); log in again",
            ));
        }
        if !session_open(&self.db, claims.sid).await? {
            return Err(session_ended());
        }
        let principal = Principal {
            user,
            credential: Credential::Session(claims.sid),
            scopes: Scope::ALL.into(),
        };
        Ok((principal, Some(claims.exp), 0))
    }

    /// An API token's principal, its expiry and when its use was last recorded, by the hex
    /// SHA-256 of the token.
    async fn token_principal(
        &self,
        token_hash: &str,
        now: i64,
    ) -> AppResult<(Principal, Option<i64>, i64)> {
        // The token and its user in one query.
        let (token, user) = api_token::Entity::find()
            .filter(api_token::Column::TokenHash.eq(token_hash))
            .find_also_related(user::Entity)
            .one(&self.db)
            .await?
            .ok_or_else(|| AppError::unauthenticated("the API token is invalid"))?;
        let expires_at = token.expires_at.map(|at| at.timestamp());
        if token.revoked_at.is_some() || expires_at.is_some_and(|at| at <= now) {
            return Err(AppError::unauthenticated(
                "the API token is revoked or expired",
            ));
        }
        let scopes: BTreeSet<Scope> =
            serde_json::from_value(token.scopes.clone()).map_err(AppError::internal)?;
        let user = match user {
            Some(user) if !user.disabled => user,
            _ => return Err(user_gone()),
        };
        let mut last_used = token.last_used_at.map_or(0, |at| at.timestamp());
        if now - last_used > TOKEN_USE_RECORD_SECS {
            self.token_use_record(token.id).await?;
            last_used = now;
        }
        let principal = Principal {
            user,
            credential: Credential::ApiToken(token.id),
            scopes,
        };
        Ok((principal, expires_at, last_used))
    }

    /// Records that a token was used now. It costs a write, so it is done at most once every
    /// [`TOKEN_USE_RECORD_SECS`] a token: precise enough to spot unused tokens.
    async fn token_use_record(&self, token_id: Uuid) -> AppResult<()> {
        api_token::Entity::update_many()
            .col_expr(api_token::Column::LastUsedAt, Expr::value(Utc::now()))
            .filter(api_token::Column::Id.eq(token_id))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    async fn active_user(&self, id: Uuid) -> AppResult<user::Model> {
        match user::Entity::find_by_id(id).one(&self.db).await? {
            Some(user) if !user.disabled => Ok(user),
            _ => Err(user_gone()),
        }
    }
}

const TOKEN_USE_RECORD_SECS: i64 = 60;

fn credential_expired(principal: &Principal) -> AppError {
    match principal.credential {
        Credential::Session(_) => {
            AppError::unauthenticated("the access token is invalid or expired")
        }
        Credential::ApiToken(_) => AppError::unauthenticated("the API token is revoked or expired"),
    }
}

fn user_gone() -> AppError {
    AppError::unauthenticated("the user of this credential is disabled or gone")
}

/// Revokes every refresh token of `user_id` (all their sessions); returns how many sessions
/// were still open.
pub(crate) async fn sessions_revoke_all(
    db: &impl ConnectionTrait,
    user_id: Uuid,
) -> AppResult<u64> {
    let open = refresh_token::Entity::update_many()
        .col_expr(refresh_token::Column::RevokedAt, Expr::value(Utc::now()))
        .filter(refresh_token::Column::UserId.eq(user_id))
        .filter(refresh_token::Column::RevokedAt.is_null())
        .filter(refresh_token::Column::UsedAt.is_null())
        .exec(db)
        .await?
        .rows_affected;
    refresh_token::Entity::update_many()
        .col_expr(refresh_token::Column::RevokedAt, Expr::value(Utc::now()))
        .filter(refresh_token::Column::UserId.eq(user_id))
        .filter(refresh_token::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    Ok(open)
}

/// The refusal of an access token whose session was logged out or revoked.
pub(crate) fn session_ended() -> AppError {
    AppError::unauthenticated("the session has ended (logged out or revoked); log in again")
}

/// Whether the session (refresh-token family) `family_id` is open: none of its refresh tokens
/// was revoked (logout, reuse and password changes revoke them all).
async fn session_open(db: &impl ConnectionTrait, family_id: Uuid) -> AppResult<bool> {
    let revoked = refresh_token::Entity::find()
        .select_only()
        .column(refresh_token::Column::Id)
        .filter(refresh_token::Column::FamilyId.eq(family_id))
        .filter(refresh_token::Column::RevokedAt.is_not_null())
        .into_tuple::<Uuid>()
        .one(db)
        .await?;
    Ok(revoked.is_none())
}

/// [`session_open`], inside a write transaction, keeping one of the session's rows locked
/// until it ends: a revocation of the session at the same moment waits for it, or is waited
/// for. One row is enough, and costs the same however long the session has been refreshed: a
/// revocation updates every row of the session at once (logout, reuse, a password change),
/// so it meets the lock, and that row's state is the session's.
pub(crate) async fn session_open_lock(
    db: &impl ConnectionTrait,
    family_id: Uuid,
) -> AppResult<bool> {
    let first: Option<(Uuid, Option<chrono::DateTime<Utc>>)> = refresh_token::Entity::find()
        .select_only()
        .column(refresh_token::Column::Id)
        .column(refresh_token::Column::RevokedAt)
        .filter(refresh_token::Column::FamilyId.eq(family_id))
        .order_by_asc(refresh_token::Column::Id)
        .limit(1)
        .lock_exclusive()
        .into_tuple()
        .one(db)
        .await?;
    Ok(first.is_some_and(|(_, revoked_at)| revoked_at.is_none()))
}

/// Revokes a session caught reusing a refresh token (a stolen session), with every API token
/// minted in it and their descendants; returns how many tokens that revoked.
async fn session_compromised_revoke(db: &impl ConnectionTrait, family_id: Uuid) -> AppResult<u64> {
    family_revoke(db, family_id).await?;
    let minted: Vec<Uuid> = api_token::Entity::find()
        .select_only()
        .column(api_token::Column::Id)
        .filter(api_token::Column::SessionId.eq(family_id))
        .into_tuple()
        .all(db)
        .await?;
    crate::app::identity::tokens::tokens_revoke_tree(db, minted).await
}

async fn family_revoke(db: &impl ConnectionTrait, family_id: Uuid) -> AppResult<()> {
    refresh_token::Entity::update_many()
        .col_expr(refresh_token::Column::RevokedAt, Expr::value(Utc::now()))
        .filter(refresh_token::Column::FamilyId.eq(family_id))
        .filter(refresh_token::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    Ok(())
}
