//! Users: the caller's own account (`/v1/me`) and administrators' management of all users.
//! Users are never deleted, only disabled, so that what they did (terms acceptances, audit
//! events, memberships) is kept.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, EntityTrait, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::app::shared::validate::if_match_check;
use crate::app::shared::validate::text_validate;
use crate::auth::{password_hash, password_verify};
use crate::authz::{OpContext, Principal, Scope};
use crate::entity::user;
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};

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
    #[schema(format = Email, max_length = 320)]
    pub email: String,
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// At least 12 characters (at most 1024 bytes).
    #[schema(format = Password, min_length = 12, max_length = 1024)]
    pub password: Option<String>,
    #[serde(default)]
    pub is_admin: bool,
}

/// Changes to a user by an administrator; absent fields are unchanged.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserUpdate {
    #[schema(min_length = 1, max_length = 200)]
    pub name: Option<String>,
    /// At least 12 characters (at most 1024 bytes).
    #[schema(format = Password, min_length = 12, max_length = 1024)]
    pub password: Option<String>,
    pub is_admin: Option<bool>,
    pub disabled: Option<bool>,
}

/// Changes to the caller's own account; absent fields are unchanged.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MeUpdate {
    #[schema(min_length = 1, max_length = 200)]
    pub name: Option<String>,
    /// The new password (at least 12 characters, at most 1024 bytes).
    #[schema(format = Password, min_length = 12, max_length = 1024)]
    pub password: Option<String>,
    /// Required to change a password that is already set.
    #[schema(format = Password)]
    pub current_password: Option<String>,
}

pub(crate) fn email_validate(email: &str) -> AppResult<String> {
    let email = email.trim().to_lowercase();
    if email.len() <= 320 && email_address::EmailAddress::is_valid(&email) {
        Ok(email)
    } else {
        Err(AppError::invalid("`email` is not a valid email address"))
    }
}

impl App {
    /// Checks a new password's length and hashes it (outside any transaction: a hash takes
    /// tens of milliseconds, and SQLite's write lock would stall every writer meanwhile).
    pub(crate) async fn password_hash_new(&self, password: String) -> AppResult<String> {
        if password.chars().count() < 12 || password.len() > 1024 {
            return Err(AppError::invalid(
                "`password` must be 12 to 1024 characters",
            ));
        }
        self.login
            .hash(move || password_hash(&password))
            .await?
            .map_err(AppError::internal)
    }
}

/// Ends every session of the user being saved: later access tokens of theirs are refused
/// (the epoch moves on) and their refresh tokens revoked.
async fn sessions_end(
    db: &impl sea_orm::ConnectionTrait,
    active: &mut user::ActiveModel,
    current: &user::Model,
) -> AppResult<u64> {
    active.session_epoch = Set(current.session_epoch + 1);
    crate::app::identity::sessions::sessions_revoke_all(db, current.id).await
}

impl App {
    pub async fn me_view(&self, principal: &Principal) -> AppResult<user::Model> {
        principal.require_scope(Scope::Read)?;
        Ok(principal.user.clone())
    }

    /// Changes the caller's name or password. A password is changed only from a password
    /// session (not an API token) and with the current password; a user without one gets a
    /// first password from an administrator. A new password ends every session of the user.
    pub async fn me_update(
        &self,
        ctx: &OpContext,
        if_match: Option<&str>,
        update: MeUpdate,
    ) -> AppResult<user::Model> {
        ctx.principal.require_scope(Scope::Write)?;
        let name = update
            .name
            .map(|name| text_validate("name", &name, 200))
            .transpose()?;
        let password = match update.password {
            None => None,
            Some(password) => {
                ctx.principal.require_session()?;
                let verified = self
                    .password_current_verify(ctx, update.current_password)
                    .await?;
                Some((verified, self.password_hash_new(password).await?))
            }
        };
        let txn = crate::db::begin_write(&self.db).await?;
        let current = user::Entity::find_by_id(ctx.principal.user_id())
            .one(&txn)
            .await?
            .ok_or_else(|| AppError::not_found("user"))?;
        if_match_check(if_match, current.revision)?;
        let mut active: user::ActiveModel = current.clone().into();
        if let Some(name) = name {
            active.name = Set(name);
        }
        let mut sessions_ended = None;
        if let Some((verified_against, new_hash)) = password {
            if current.password_hash.as_deref() != Some(verified_against.as_str()) {
                return Err(AppError::new(
                    ErrorCode::PasswordChanged,
                    "the password changed while this request was checked; try again",
                ));
            }
            active.password_hash = Set(Some(new_hash));
            sessions_ended = Some(sessions_end(&txn, &mut active, &current).await?);
        }
        let updated = user_save(&txn, active, current.revision).await?;
        let mut entry = user_audit("user.update_self", &updated);
        if let Some(sessions) = sessions_ended {
            entry.details["password_changed"] = true.into();
            entry.details["sessions_ended"] = sessions.into();
        }
        audit_record(&txn, ctx, entry).await?;
        txn.commit().await?;
        self.auth_changed();
        Ok(updated)
    }

    /// Checks the caller's `current_password` and returns the hash it matched.
    async fn password_current_verify(
        &self,
        ctx: &OpContext,
        given: Option<String>,
    ) -> AppResult<String> {
        let stored = user::Entity::find_by_id(ctx.principal.user_id())
            .one(&self.db)
            .await?
            .and_then(|user| user.password_hash)
            .ok_or_else(|| {
                AppError::forbidden(
                    "you have no password yet: an administrator sets the first one (PATCH /v1/users/{id})",
                )
            })?;
        let Some(given) = given else {
            return Err(AppError::invalid(
                "`current_password` is required to change the password",
            ));
        };
        // Guessing the current password through a stolen session counts as login attempts.
        self.login.attempt_account(&ctx.principal.user.email)?;
        let against = stored.clone();
        if self
            .login
            .hash(move || password_verify(&given, &against))
            .await?
        {
            Ok(stored)
        } else {
            Err(AppError::forbidden("`current_password` is wrong"))
        }
    }

    pub async fn user_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<user::Model>> {
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

    pub async fn user_view(&self, principal: &Principal, id: Uuid) -> AppResult<user::Model> {
        principal.require_admin()?;
        user::Entity::find_by_id(id)
            .one(&self.db)
            .await?
            .ok_or_else(|| AppError::not_found("user"))
    }

    pub async fn user_create(&self, ctx: &OpContext, create: UserCreate) -> AppResult<user::Model> {
        ctx.principal.require_admin()?;
        let email = email_validate(&create.email)?;
        let name = text_validate("name", &create.name, 200)?;
        let password_hash = match create.password {
            Some(password) => Some(self.password_hash_new(password).await?),
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
            session_epoch: Set(0),
        }
        .insert(&txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::EmailTaken,
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
    ) -> AppResult<user::Model> {
        ctx.principal.require_admin()?;
        let name = update
            .name
            .map(|name| text_validate("name", &name, 200))
            .transpose()?;
        let password_hash = match update.password {
            Some(password) => Some(self.password_hash_new(password).await?),
            None => None,
        };
        let txn = crate::db::begin_write(&self.db).await?;
        let current = user::Entity::find_by_id(id)
            .one(&txn)
            .await?
            .ok_or_else(|| AppError::not_found("user"))?;
        if_match_check(if_match, current.revision)?;
        if id == ctx.principal.user_id()
            && (update.disabled == Some(true) || update.is_admin == Some(false))
        {
            return Err(AppError::invalid(
                "administrators cannot disable or demote themselves",
            ));
        }
        let mut active: user::ActiveModel = current.clone().into();
        if let Some(name) = name {
            active.name = Set(name);
        }
        let ends_sessions = password_hash.is_some() || update.disabled == Some(true);
        if let Some(password_hash) = password_hash {
            active.password_hash = Set(Some(password_hash));
        }
        if let Some(is_admin) = update.is_admin {
            active.is_admin = Set(is_admin);
        }
        if let Some(disabled) = update.disabled {
            active.disabled = Set(disabled);
        }
        let sessions_ended = if ends_sessions {
            Some(sessions_end(&txn, &mut active, &current).await?)
        } else {
            None
        };
        let updated = user_save(&txn, active, current.revision).await?;
        let mut entry = user_audit("user.update", &updated);
        if let Some(sessions) = sessions_ended {
            entry.details["sessions_ended"] = sessions.into();
        }
        audit_record(&txn, ctx, entry).await?;
        txn.commit().await?;
        self.auth_changed();
        Ok(updated)
    }
}

async fn user_save(
    db: &impl sea_orm::ConnectionTrait,
    mut active: user::ActiveModel,
    revision: i64,
) -> AppResult<user::Model> {
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
