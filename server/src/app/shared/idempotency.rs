//! Idempotency keys: the first request with a key runs and its response is stored; a retry
//! with the same key and the same request replays that response; the same key with a different
//! request is refused (422); a retry while the first is still running gets 409.
//!
//! Keys are scoped to the credential (one API token, or one login session), never shared
//! between the credentials of a user: a narrower token cannot replay what a broader one did.
//! A replay passes again the authorization checks the first request passed (see
//! [`crate::authz::AuthzCheck`]). Records are kept for 24 hours, then purged. Responses with a
//! 5xx status are not kept, so the client can retry them, unless the request took effect all
//! the same (a write transaction of it committed, as [`crate::db::begin_write`] marks: the
//! database acknowledged a commit whose answer was lost with its primary): it never runs again,
//! and a retry gets 409 `idempotency_response_lost`.

use chrono::{Duration, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::authz::project_authorize_in;
use crate::authz::{AuthzCheck, Principal};
use crate::entity::idempotency_record;
use crate::error::{AppError, AppResult, ErrorCode};

const RETENTION_HOURS: i64 = 24;
/// A key whose first request has not finished after this long is considered abandoned.
const PENDING_TIMEOUT_SECS: i64 = 120;

/// Stored responses are sealed: some carry a secret (a new API token's value).
fn response_purpose(credential: &str, key: &str) -> String {
    format!("idempotency:{credential}:{key}")
}

/// A response kept for replay.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// How a request with a claimed key ended.
#[derive(Debug, Clone)]
pub enum Finished {
    /// With this answer (not a server error): kept for replays.
    Answered(StoredResponse),
    /// With a server error: the key is released so that the client may retry, unless the
    /// request took effect all the same; then `lost` (a 409 `idempotency_response_lost`) is
    /// kept for replays instead.
    Failed { lost: StoredResponse },
}

/// What to do with a request that carries an idempotency key.
pub enum IdempotencyStart {
    /// First use of the key: run the request, then [`App::idempotency_finish`].
    Proceed,
    /// The key was used for this same request: answer with the stored response once the
    /// checks pass again ([`App::idempotency_replay_authorize`]).
    Replay(StoredResponse, Vec<AuthzCheck>),
}

impl App {
    /// Claims `key` for the request with `request_hash` made with `credential` (see
    /// [`crate::authz::Principal::credential_key`]).
    pub async fn idempotency_start(
        &self,
        credential: &str,
        key: &str,
        request_hash: &str,
    ) -> AppResult<IdempotencyStart> {
        let now = Utc::now();
        let txn = crate::db::begin_write(&self.db).await?;
        let existing =
            idempotency_record::Entity::find_by_id((credential.to_owned(), key.to_owned()))
                .one(&txn)
                .await?;
        if let Some(record) = existing {
            let expired = now - record.created_at > Duration::hours(RETENTION_HOURS);
            let abandoned = record.response_status.is_none()
                && !record.took_effect
                && now - record.created_at > Duration::seconds(PENDING_TIMEOUT_SECS);
            if !(expired || abandoned) {
                if record.request_hash != request_hash {
                    return Err(AppError::new(
                        ErrorCode::IdempotencyKeyReused,
                        "this Idempotency-Key was already used with a different request; use a new key",
                    ));
                }
                let Some(status) = record.response_status else {
                    if record.took_effect
                        && now - record.created_at > Duration::seconds(PENDING_TIMEOUT_SECS)
                    {
                        return Err(response_lost());
                    }
                    return Err(AppError::new(
                        ErrorCode::IdempotencyInProgress,
                        "a request with this Idempotency-Key is still being processed; retry later",
                    ));
                };
                let headers = record
                    .response_headers
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(AppError::internal)?
                    .unwrap_or_default();
                let checks = record
                    .authorization
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(AppError::internal)?
                    .unwrap_or_default();
                let body = self
                    .secrets
                    .open_bytes(
                        &response_purpose(credential, key),
                        &record.response_body.unwrap_or_default(),
                    )
                    .map_err(|err| AppError::internal(format!("{err:#}")))?;
                return Ok(IdempotencyStart::Replay(
                    StoredResponse {
                        status: status as u16,
                        headers,
                        body,
                    },
                    checks,
                ));
            }
            idempotency_record::Entity::delete_by_id((credential.to_owned(), key.to_owned()))
                .exec(&txn)
                .await?;
        }
        idempotency_record::ActiveModel {
            principal: Set(credential.to_owned()),
            key: Set(key.to_owned()),
            request_hash: Set(request_hash.to_owned()),
            response_status: Set(None),
            response_headers: Set(None),
            response_body: Set(None),
            created_at: Set(now),
            authorization: Set(None),
            took_effect: Set(false),
        }
        .insert(&txn)
        .await
        // Two first uses of one key at once (PostgreSQL lets both look): the loser waits.
        .map_err(crate::error::unique_violation_as(
            ErrorCode::IdempotencyInProgress,
            "a request with this Idempotency-Key is still being processed",
        ))?;
        txn.commit().await?;
        Ok(IdempotencyStart::Proceed)
    }

    /// Stores the answer of a claimed key with the authorization `checks` its request passed,
    /// or releases the key (see [`Finished`]).
    pub async fn idempotency_finish(
        &self,
        credential: &str,
        key: &str,
        finished: Finished,
        checks: &[AuthzCheck],
    ) -> AppResult<()> {
        let response = match finished {
            Finished::Answered(response) => response,
            Finished::Failed { lost } => {
                let released = idempotency_record::Entity::delete_many()
                    .filter(idempotency_record::Column::Principal.eq(credential))
                    .filter(idempotency_record::Column::Key.eq(key))
                    .filter(idempotency_record::Column::TookEffect.eq(false))
                    .filter(idempotency_record::Column::ResponseStatus.is_null())
                    .exec(&self.db)
                    .await?;
                if released.rows_affected == 1 {
                    return Ok(());
                }
                tracing::warn!(
                    "a request that failed took effect all the same: its key is kept, and its \
                     retries are answered idempotency_response_lost"
                );
                lost
            }
        };
        let headers = serde_json::to_value(&response.headers).map_err(AppError::internal)?;
        idempotency_record::Entity::update_many()
            .col_expr(
                idempotency_record::Column::ResponseStatus,
                Expr::value(i32::from(response.status)),
            )
            .col_expr(
                idempotency_record::Column::ResponseHeaders,
                Expr::value(headers),
            )
            .col_expr(
                idempotency_record::Column::ResponseBody,
                Expr::value(
                    self.secrets
                        .seal_bytes(&response_purpose(credential, key), &response.body),
                ),
            )
            .col_expr(
                idempotency_record::Column::Authorization,
                Expr::value(serde_json::to_value(checks).map_err(AppError::internal)?),
            )
            .filter(idempotency_record::Column::Principal.eq(credential))
            .filter(idempotency_record::Column::Key.eq(key))
            .filter(idempotency_record::Column::ResponseStatus.is_null())
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Stores the response of a claimed key as [`Self::idempotency_finish`] does; when the
    /// database cannot be reached (a failover, a restart), tries again in the background, for
    /// as long as the claim would be held pending, until it can. Without it, the claim of a
    /// request that failed with the database stayed pending for 2 minutes, refusing every
    /// retry with 409 `idempotency_in_progress`, and then let the request run a second time
    /// even if it had succeeded.
    pub async fn idempotency_finish_eventually(
        &self,
        credential: &str,
        key: &str,
        finished: Finished,
        checks: &[AuthzCheck],
    ) {
        let Err(err) = self
            .idempotency_finish(credential, key, finished.clone(), checks)
            .await
        else {
            return;
        };
        tracing::warn!(error = %err, "could not store an idempotent response; trying again in the background");
        let (app, credential, key, checks) = (
            self.clone(),
            credential.to_owned(),
            key.to_owned(),
            checks.to_vec(),
        );
        tokio::spawn(async move {
            let deadline = std::time::Instant::now()
                + std::time::Duration::from_secs(PENDING_TIMEOUT_SECS as u64);
            let mut wait = std::time::Duration::from_millis(100);
            let mut stopping = app.stopping.clone();
            while std::time::Instant::now() < deadline {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stopping.wait_for(|stopped| *stopped) => return,
                }
                wait = (wait * 2).min(std::time::Duration::from_secs(2));
                match app
                    .idempotency_finish(&credential, &key, finished.clone(), &checks)
                    .await
                {
                    Ok(()) => {
                        tracing::info!(
                            "stored an idempotent response after the database came back"
                        );
                        return;
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "idempotent response: not stored yet")
                    }
                }
            }
            tracing::warn!("gave up storing an idempotent response: its claim lapses");
        });
    }

    /// Passes `checks` again for `principal`, as a fresh request would; the first that fails
    /// is the answer.
    pub async fn idempotency_replay_authorize(
        &self,
        principal: &Principal,
        checks: &[AuthzCheck],
    ) -> AppResult<()> {
        for check in checks {
            match check {
                AuthzCheck::Scope(scope) => principal.require_scope(*scope)?,
                AuthzCheck::Admin => principal.require_admin()?,
                AuthzCheck::Routing => principal.require_routing_read()?,
                AuthzCheck::Session => principal.require_session()?,
                AuthzCheck::Project {
                    project_id,
                    role,
                    scope,
                } => {
                    project_authorize_in(&self.db, principal, *project_id, *role, *scope).await?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the records past their retention (and claims abandoned before finishing);
    /// returns how many.
    pub async fn idempotency_purge(&self) -> AppResult<u64> {
        let now = Utc::now();
        Ok(idempotency_record::Entity::delete_many()
            .filter(
                sea_orm::Condition::any()
                    .add(
                        idempotency_record::Column::CreatedAt
                            .lt(now - Duration::hours(RETENTION_HOURS)),
                    )
                    .add(
                        sea_orm::Condition::all()
                            .add(idempotency_record::Column::ResponseStatus.is_null())
                            .add(idempotency_record::Column::TookEffect.eq(false))
                            .add(
                                idempotency_record::Column::CreatedAt
                                    .lt(now - Duration::seconds(PENDING_TIMEOUT_SECS)),
                            ),
                    ),
            )
            .exec(&self.db)
            .await?
            .rows_affected)
    }
}

/// Why a retry of a request that took effect but whose answer was lost is refused.
pub const RESPONSE_LOST: &str = "the first request with this Idempotency-Key took effect (it \
     wrote), but ended with a server error, so its answer is lost (a database failing over as it \
     answered, say); it will not run again: look its result up";

fn response_lost() -> AppError {
    AppError::new(ErrorCode::IdempotencyResponseLost, RESPONSE_LOST)
}
