//! First start: on a database without users, create the administrator, its API token and,
//! when one is given, its password.

use chrono::Utc;
use sea_orm::{ActiveModelTrait, EntityTrait, PaginatorTrait, Set};
use secrecy::ExposeSecret;
use uuid::Uuid;

use crate::app::App;
use crate::auth::{API_TOKEN_PREFIX, opaque_token_generate, opaque_token_hash};
use crate::authz::Scope;
use crate::entity::{api_token, user};

/// What bootstrap did, for the caller to tell the operator.
pub enum Bootstrap {
    /// Users existed already; nothing was created.
    AlreadyDone,
    /// The administrator was created with the token from `BULKHEAD_BOOTSTRAP_TOKEN`.
    CreatedWithGivenToken,
    /// The administrator was created with this generated token, to be shown once.
    CreatedWithGeneratedToken(String),
}

impl App {
    /// Creates the first administrator if there are no users yet.
    pub async fn bootstrap(&self) -> anyhow::Result<Bootstrap> {
        // Every later start ends here, without hashing the password it is given (`dev` gives
        // one each time); the transaction below checks again.
        if user::Entity::find().count(&self.db).await? > 0 {
            return Ok(Bootstrap::AlreadyDone);
        }
        // Checked and hashed as any new password, before the transaction (a hash takes tens of
        // milliseconds).
        let password_hash = match &self.settings.bootstrap_password {
            Some(given) => Some(
                self.password_hash_new(given.expose_secret().to_owned())
                    .await
                    .map_err(|err| {
                        anyhow::anyhow!("BULKHEAD_BOOTSTRAP_PASSWORD: {}", err.detail)
                    })?,
            ),
            None => None,
        };
        let txn = crate::db::begin_write(&self.db).await?;
        if user::Entity::find().count(&txn).await? > 0 {
            return Ok(Bootstrap::AlreadyDone);
        }
        let (token, outcome) = match &self.settings.bootstrap_token {
            Some(given) if given.expose_secret().len() < 16 => {
                anyhow::bail!("BULKHEAD_BOOTSTRAP_TOKEN must be at least 16 characters")
            }
            Some(given) => (
                given.expose_secret().to_owned(),
                Bootstrap::CreatedWithGivenToken,
            ),
            None => {
                let token = opaque_token_generate(API_TOKEN_PREFIX);
                (token.clone(), Bootstrap::CreatedWithGeneratedToken(token))
            }
        };
        // Only a generated token's first characters are shown later; a given one is the operator's secret.
        let prefix = match outcome {
            Bootstrap::CreatedWithGeneratedToken(_) => token.chars().take(7).collect(),
            _ => String::new(),
        };
        let now = Utc::now();
        let admin = user::ActiveModel {
            id: Set(Uuid::now_v7()),
            email: Set(self.settings.admin_email.to_lowercase()),
            name: Set("Administrator".into()),
            password_hash: Set(password_hash),
            is_admin: Set(true),
            disabled: Set(false),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
            last_login_at: Set(None),
            session_epoch: Set(0),
        }
        .insert(&txn)
        .await?;
        api_token::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(admin.id),
            name: Set("bootstrap".into()),
            token_hash: Set(opaque_token_hash(&token)),
            prefix: Set(prefix),
            scopes: Set(serde_json::json!([Scope::Admin])),
            expires_at: Set(None),
            revoked_at: Set(None),
            last_used_at: Set(None),
            created_at: Set(now),
            parent_token_id: Set(None),
            session_id: Set(None),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        Ok(outcome)
    }
}
