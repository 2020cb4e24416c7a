//! Users: the caller's own account (`/v1/me`) and administrators' management of all users.
//! Users are never deleted, only disabled, so that what they did (terms acceptances, audit
//! events, memberships) is kept.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, EntityTrait, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::audit::{AuditEntry, audit_record};
use super::pagination::{Page, PageParams, paginate};
use super::{App, if_match_check, text_validate};
use crate::auth::{password_hash, password_verify};
use crate::authz::{OpContext, Principal, Scope};
use crate::entity::user;
use crate::error::{ApiError, ApiResult, unique_violation_as};

/// A user account. Passwords are never shown.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UserView {
    pub id: Uuid,
    pub email: String,
    pub name: String,
    /// Bulkhead administrator (sees and manages everything).
    pub is_admin: bool,
    /// A disabled user cannot authenticate.
    pub disabled: bool,
    /// Whether a password is set (log in with `/v1/auth/login`).
    pub has_password: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_login_at: Option<DateTime<Utc>>,
}

impl From<user::Model> for UserView {
    fn from(m: user::Model) -> Self {
        Self {
            id: m.id,
            email: m.email,
            name: m.name,
            is_admin: m.is_admin,
            disabled: m.disabled,
            has_password: m.password_hash.is_some(),
            created_at: m.created_at,
            updated_at: m.updated_at,
            last_login_at: m.last_login_at,
        }
    }
}

/// A new user (administrators only).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserCreate {
    pub email: String,
    pub name: String,
    /// At least 12 characters.
    #[schema(format = Password)]
    pub password: Option<String>,
    #[serde(default)]
    pub is_admin: bool,
}

/// Changes to a user by an administrator; absent fields are unchanged.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserUpdate {
    pub name: Option<String>,
    #[schema(format = Password)]
    pub password: Option<String>,
    pub is_admin: Option<bool>,
    pub disabled: Option<bool>,
}

/// Changes to the caller's own account; absent fields are unchanged.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MeUpdate {
    pub name: Option<String>,
    /// The new password (at least 12 characters).
    #[schema(format = Password)]
    pub password: Option<String>,
    /// Required to change a password that is already set.
    #[schema(format = Password)]
    pub current_password: Option<String>,
}

fn email_validate(email: &str) -> ApiResult<String> {
    let email = email.trim().to_lowercase();
    if email.len() <= 320 && email_address::EmailAddress::is_valid(&email) {
        Ok(email)
    } else {
        Err(ApiError::invalid("`email` is not a valid email address"))
    }
}

async fn password_hash_checked(password: String) -> ApiResult<String> {
    if password.chars().count() < 12 || password.len() > 1024 {
        return Err(ApiError::invalid(
            "`password` must be 12 to 1024 characters",
        ));
    }
    tokio::task::spawn_blocking(move || password_hash(&password))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

impl App {
    pub async fn me_view(&self, principal: &Principal) -> ApiResult<user::Model> {
        principal.require_scope(Scope::Read)?;
        Ok(principal.user.clone())
    }

    pub async fn me_update(
        &self,
        ctx: &OpContext,
        if_match: Option<&str>,
        update: MeUpdate,
    ) -> ApiResult<user::Model> {
        ctx.principal.require_scope(Scope::Write)?;
        let txn = crate::db::begin_write(&self.db).await?;
        let current = user::Entity::find_by_id(ctx.principal.user_id())
            .one(&txn)
            .await?
            .ok_or_else(|| ApiError::not_found("user"))?;
        if_match_check(if_match, current.revision)?;
        let mut active: user::ActiveModel = current.clone().into();
        if let Some(name) = update.name {
            active.name = Set(text_validate("name", &name, 200)?);
        }
        if let Some(password) = update.password {
            if let Some(existing) = &current.password_hash {
                let given = update.current_password.unwrap_or_default();
                let existing = existing.clone();
                let ok = tokio::task::spawn_blocking(move || password_verify(&given, &existing))
                    .await
                    .map_err(ApiError::internal)?;
                if !ok {
                    return Err(ApiError::forbidden("`current_password` is wrong"));
                }
            }
            active.password_hash = Set(Some(password_hash_checked(password).await?));
        }
        let updated = user_save(&txn, active, current.revision).await?;
        audit_record(&txn, ctx, user_audit("user.update_self", &updated)).await?;
        txn.commit().await?;
        Ok(updated)
    }

    pub async fn user_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> ApiResult<Page<user::Model>> {
        principal.require_admin()?;
        paginate(
            &self.db,
            user::Entity::find(),
            user::Column::Id,
            |m| m.id,
            &params,
        )
        .await
    }

    pub async fn user_view(&self, principal: &Principal, id: Uuid) -> ApiResult<user::Model> {
        principal.require_admin()?;
        user::Entity::find_by_id(id)
            .one(&self.db)
            .await?
            .ok_or_else(|| ApiError::not_found("user"))
    }

    pub async fn user_create(&self, ctx: &OpContext, create: UserCreate) -> ApiResult<user::Model> {
        ctx.principal.require_admin()?;
        let email = email_validate(&create.email)?;
        let name = text_validate("name", &create.name, 200)?;
        let password_hash = match create.password {
            Some(password) => Some(password_hash_checked(password).await?),
            None => None,
        };
        let now = Utc::now();
        let txn = crate::db::begin_write(&self.db).await?;
        let created = user::ActiveModel {
            id: Set(Uuid::now_v7()),
            email: Set(email),
            name: Set(name),
            password_hash: Set(password_hash),
            is_admin: Set(create.is_admin),
            disabled: Set(false),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
            last_login_at: Set(None),
        }
        .insert(&txn)
        .await
        .map_err(unique_violation_as(
            "email_taken",
            "a user with this email already exists",
        ))?;
        audit_record(&txn, ctx, user_audit("user.create", &created)).await?;
        txn.commit().await?;
        Ok(created)
    }

    pub async fn user_update(
        &self,
        ctx: &OpContext,
        id: Uuid,
        if_match: Option<&str>,
        update: UserUpdate,
    ) -> ApiResult<user::Model> {
        ctx.principal.require_admin()?;
        let txn = crate::db::begin_write(&self.db).await?;
        let current = user::Entity::find_by_id(id)
            .one(&txn)
            .await?
            .ok_or_else(|| ApiError::not_found("user"))?;
        if_match_check(if_match, current.revision)?;
        if id == ctx.principal.user_id()
            && (update.disabled == Some(true) || update.is_admin == Some(false))
        {
            return Err(ApiError::invalid(
                "administrators cannot disable or demote themselves",
            ));
        }
        let mut active: user::ActiveModel = current.clone().into();
        if let Some(name) = update.name {
            active.name = Set(text_validate("name", &name, 200)?);
        }
        if let Some(password) = update.password {
            active.password_hash = Set(Some(password_hash_checked(password).await?));
        }
        if let Some(is_admin) = update.is_admin {
            active.is_admin = Set(is_admin);
        }
        if let Some(disabled) = update.disabled {
            active.disabled = Set(disabled);
        }
        let updated = user_save(&txn, active, current.revision).await?;
        audit_record(&txn, ctx, user_audit("user.update", &updated)).await?;
        txn.commit().await?;
        Ok(updated)
    }
}

async fn user_save(
    db: &impl sea_orm::ConnectionTrait,
    mut active: user::ActiveModel,
    revision: i64,
) -> ApiResult<user::Model> {
    active.revision = Set(revision + 1);
    active.updated_at = Set(Utc::now());
    Ok(active.update(db).await?)
}

fn user_audit(action: &'static str, user: &user::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "user",
        resource_id: user.id.to_string(),
        project_id: None,
        details: serde_json::json!({ "email": user.email, "is_admin": user.is_admin, "disabled": user.disabled }),
    }
}
