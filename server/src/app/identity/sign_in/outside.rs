//! Sign-in through an outside identity provider: the authorization code flow with PKCE (S256)
//! of OpenID Connect providers ([`super::oidc`]: the account is the validated ID token's `sub`)
//! and of GitHub's OAuth apps ([`super::github`]: `GET /user`'s `id`), beside passwords.
//!
//! - **Start** ([`App::sign_in_start`]): a random `state` (stored hashed, with the sealed PKCE
//!   verifier, for ten minutes, usable once) and the provider's authorize URL to send the
//!   browser to. **Finish** ([`App::sign_in_finish`]): the state is consumed, the code
//!   exchanged with the verifier, the account validated and read, and the user who linked that
//!   account gets a session of Bulkhead's own — its access and refresh tokens keep working
//!   whatever the provider does afterwards.
//! - **Linking** ([`App::identity_link_finish`]): a signed-in user (a session, not an API
//!   token) runs the same flow to link an account; an account links to one user only.
//! - Every call to a provider is limited and held as [`super::calls`] says, so that a crowd
//!   retrying cannot turn into a storm at it.

use base64::Engine;
use chrono::Utc;
use oauth2::{ErrorResponseType, RequestTokenError, StandardErrorResponse};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::identity::sessions::SessionTokens;
use crate::app::identity::sign_in::calls::ProviderHttp;
use crate::app::identity::sign_in::holds::Admission;
use crate::app::identity::sign_in::{github, oidc};
use crate::app::shared::validate::text_validate;
use crate::authz::{Principal, Scope};
use crate::config::{SignInProvider, SignInProviderKind};
use crate::entity::{sign_in_state, user, user_identity};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};

/// How long a started sign-in may be finished.
const STATE_TTL: chrono::Duration = chrono::Duration::minutes(10);

/// A configured identity provider, as listed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignInProviderView {
    pub name: String,
    pub kind: SignInProviderKind,
}

/// Where to send the browser to sign in (or link an account).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignInStart {
    /// The provider's page, with the client, the redirect, the state and the PKCE challenge.
    pub authorize_url: String,
    /// Comes back with the code; finish within `expires_at`.
    pub state: String,
    pub expires_at: chrono::DateTime<Utc>,
}

/// What the provider sent back to the redirect URI.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignInFinish {
    #[schema(min_length = 1, max_length = 512)]
    pub code: String,
    #[schema(min_length = 1, max_length = 512)]
    pub state: String,
    /// The issuer the provider said it is, when its answer carried `iss` (RFC 9207): pass it
    /// on as it came; a provider that sends it is refused without it.
    #[schema(min_length = 1, max_length = 2048)]
    #[serde(default)]
    pub iss: Option<String>,
}

/// An outside account linked to the caller.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IdentityView {
    pub id: Uuid,
    pub provider: String,
    /// The provider's id of the account.
    pub subject: String,
    /// Its login or email at the provider.
    pub login: String,
    pub created_at: chrono::DateTime<Utc>,
    pub last_used_at: Option<chrono::DateTime<Utc>>,
}

impl From<user_identity::Model> for IdentityView {
    fn from(m: user_identity::Model) -> Self {
        Self {
            id: m.id,
            provider: m.provider,
            subject: m.subject,
            login: m.login,
            created_at: m.created_at,
            last_used_at: m.last_used_at,
        }
    }
}

/// An account at a provider, as its answers (validated) say.
pub(crate) struct Account {
    pub subject: String,
    pub login: String,
}

pub(crate) fn refused(detail: impl Into<String>) -> AppError {
    AppError::new(ErrorCode::SignInFailed, detail)
}

/// A code exchange with `name` that gave no token: the call's own error (503 while the
/// provider is held), or what the provider refused.
pub(crate) fn exchange_refused<T>(
    name: &str,
    err: RequestTokenError<AppError, StandardErrorResponse<T>>,
) -> AppError
where
    T: ErrorResponseType + std::fmt::Display + 'static,
{
    match err {
        RequestTokenError::Request(err) => err,
        RequestTokenError::ServerResponse(answer) => refused(format!(
            "{name} refused the code ({}): start the sign-in again",
            answer.error()
        )),
        RequestTokenError::Parse(..) => refused(format!(
            "{name} answered the code exchange with no token: start the sign-in again"
        )),
        RequestTokenError::Other(err) => refused(format!(
            "{name} answered the code exchange unexpectedly ({err}): start the sign-in again"
        )),
    }
}

fn state_hash(state: &str) -> String {
    hex::encode(Sha256::digest(state.as_bytes()))
}

fn random_url_safe() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

impl App {
    fn sign_in_provider(&self, name: &str) -> AppResult<&SignInProvider> {
        self.settings
            .sign_in_providers
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| AppError::not_found("sign-in provider"))
    }

    /// The configured providers.
    pub fn sign_in_providers(&self) -> Vec<SignInProviderView> {
        self.settings
            .sign_in_providers
            .iter()
            .map(|p| SignInProviderView {
                name: p.name.clone(),
                kind: p.kind,
            })
            .collect()
    }

    /// Starts a sign-in with `name` (`link_user`: linking an account to that user instead).
    pub async fn sign_in_start(
        &self,
        name: &str,
        link_user: Option<Uuid>,
    ) -> AppResult<SignInStart> {
        let provider = self.sign_in_provider(name)?;
        self.sign_in_available(name).await?;
        let state = random_url_safe();
        let verifier = random_url_safe();
        let authorize_url = match provider.kind {
            SignInProviderKind::Github => github::authorize_url(provider, &state, &verifier)?,
            SignInProviderKind::Oidc => {
                let http = ProviderHttp::new(self, name, Admission::Free);
                oidc::authorize_url(&http, provider, &state, &verifier).await?
            }
        };
        let expires_at = Utc::now() + STATE_TTL;
        sign_in_state::ActiveModel {
            state_hash: Set(state_hash(&state)),
            provider: Set(name.to_owned()),
            code_verifier: Set(self.secrets.seal("sign-in-verifier", &verifier)),
            link_user_id: Set(link_user),
            expires_at: Set(expires_at),
        }
        .insert(&self.db)
        .await?;
        Ok(SignInStart {
            authorize_url,
            state,
            expires_at,
        })
    }

    /// Consumes a started sign-in of `name`: its PKCE verifier, and the user linking, if any.
    async fn sign_in_state_take(
        &self,
        name: &str,
        state: &str,
    ) -> AppResult<(String, Option<Uuid>)> {
        let hash = state_hash(state);
        let found = sign_in_state::Entity::find_by_id(hash.clone())
            .one(&self.db)
            .await?
            .filter(|found| found.provider == name && found.expires_at > Utc::now());
        let taken = sign_in_state::Entity::delete_many()
            .filter(sign_in_state::Column::StateHash.eq(hash))
            .exec(&self.db)
            .await?
            .rows_affected;
        let Some(found) = found.filter(|_| taken == 1) else {
            return Err(refused(
                "`state` is unknown, expired or used already: start the sign-in again",
            ));
        };
        let verifier = self
            .secrets
            .open_value("sign-in-verifier", &found.code_verifier)
            .map_err(|err| AppError::internal(format!("{err:#}")))?;
        Ok((verifier, found.link_user_id))
    }

    /// The account of a sign-in being finished (`link_user`: an account being linked by that
    /// user). Admitted before its state is used, so that a sign-in refused then may be sent
    /// again with the same code and state; then the state is used, the code exchanged and the
    /// account validated and read.
    async fn sign_in_finished_account(
        &self,
        provider: &SignInProvider,
        finish: &SignInFinish,
        link_user: Option<Uuid>,
    ) -> AppResult<Account> {
        let name = provider.name.as_str();
        text_validate("code", &finish.code, 512)?;
        text_validate("state", &finish.state, 512)?;
        if let Some(iss) = &finish.iss {
            text_validate("iss", iss, 2048)?;
        }
        let http = ProviderHttp::new(self, name, self.sign_in_admit(name).await?);
        let account = async {
            let (verifier, started_for) = self.sign_in_state_take(name, &finish.state).await?;
            if started_for != link_user {
                return Err(refused(match link_user {
                    None => "this `state` links an account: finish it at /v1/me/identities/{provider}/finish",
                    Some(_) => "this `state` was not started by you to link an account",
                }));
            }
            match provider.kind {
                SignInProviderKind::Github => {
                    github::account(&http, provider, &finish.code, verifier).await
                }
                SignInProviderKind::Oidc => {
                    let returned = oidc::Returned {
                        code: &finish.code,
                        state: &finish.state,
                        iss: finish.iss.as_deref(),
                        verifier,
                    };
                    oidc::account(&http, provider, returned).await
                }
            }
        }
        .await;
        if let Admission::Probe(lease) = http.admission() {
            self.sign_in_probe_release(name, lease).await;
        }
        let account = account?;
        if account.subject.is_empty() || account.subject.len() > 255 {
            return Err(refused(format!("{name}'s account has no id")));
        }
        Ok(Account {
            subject: account.subject,
            login: account.login.chars().take(255).collect(),
        })
    }

    /// Finishes a sign-in: a session for the user who linked the account.
    pub async fn sign_in_finish(
        &self,
        name: &str,
        finish: SignInFinish,
        client: std::net::IpAddr,
        request_id: &str,
    ) -> AppResult<SessionTokens> {
        let provider = self.sign_in_provider(name)?;
        let account = self
            .sign_in_finished_account(provider, &finish, None)
            .await?;
        let identity = user_identity::Entity::find()
            .filter(user_identity::Column::Provider.eq(name))
            .filter(user_identity::Column::Subject.eq(&account.subject))
            .one(&self.db)
            .await?
            .ok_or_else(|| {
                AppError::new(ErrorCode::IdentityNotLinked,
                    format!(
                        "no account here is linked to {} at {name}: sign in with your password and link it (POST /v1/me/identities/{name}/start)",
                        account.login
                    ),
                )
            })?;
        let found = user::Entity::find_by_id(identity.user_id)
            .one(&self.db)
            .await?
            .filter(|u| !u.disabled)
            .ok_or_else(|| AppError::forbidden("the linked account is disabled"))?;
        let mut used: user_identity::ActiveModel = identity.into();
        used.last_used_at = Set(Some(Utc::now()));
        used.update(&self.db).await?;
        self.session_open(found, client, request_id, name).await
    }

    /// Starts linking an account of `name` to the caller (a session's user).
    pub async fn identity_link_start(
        &self,
        principal: &Principal,
        name: &str,
    ) -> AppResult<SignInStart> {
        principal.require_session()?;
        self.sign_in_start(name, Some(principal.user.id)).await
    }

    /// Finishes linking: the account is the caller's from now on.
    pub async fn identity_link_finish(
        &self,
        principal: &Principal,
        name: &str,
        finish: SignInFinish,
    ) -> AppResult<user_identity::Model> {
        principal.require_session()?;
        let provider = self.sign_in_provider(name)?;
        let account = self
            .sign_in_finished_account(provider, &finish, Some(principal.user.id))
            .await?;
        let linked = user_identity::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(principal.user.id),
            provider: Set(name.to_owned()),
            subject: Set(account.subject),
            login: Set(account.login),
            created_at: Set(Utc::now()),
            last_used_at: Set(None),
        }
        .insert(&self.db)
        .await
        .map_err(unique_violation_as(
            ErrorCode::IdentityTaken,
            "this account at the provider is linked to a user already",
        ))?;
        Ok(linked)
    }

    pub async fn identity_list(
        &self,
        principal: &Principal,
    ) -> AppResult<Vec<user_identity::Model>> {
        principal.require_scope(Scope::Read)?;
        Ok(user_identity::Entity::find()
            .filter(user_identity::Column::UserId.eq(principal.user.id))
            .all(&self.db)
            .await?)
    }

    /// Unlinks one of the caller's accounts.
    pub async fn identity_unlink(&self, principal: &Principal, id: Uuid) -> AppResult<()> {
        principal.require_session()?;
        let removed = user_identity::Entity::delete_many()
            .filter(user_identity::Column::Id.eq(id))
            .filter(user_identity::Column::UserId.eq(principal.user.id))
            .exec(&self.db)
            .await?
            .rows_affected;
        if removed == 0 {
            return Err(AppError::not_found("identity"));
        }
        Ok(())
    }

    /// Removes the sign-ins started more than [`STATE_TTL`] ago.
    pub async fn sign_in_states_purge(&self) -> AppResult<u64> {
        Ok(sign_in_state::Entity::delete_many()
            .filter(sign_in_state::Column::ExpiresAt.lt(Utc::now()))
            .exec(&self.db)
            .await?
            .rows_affected)
    }
}
