//! The waits identity providers asked for, shared by the replicas through the database
//! (`sign_in_provider_holds`), so that a provider limiting one replica is left alone by all.
//!
//! A provider that answered 429, a 5xx or a limit, or did not answer, is *recovering* until it
//! answers again: while its wait runs no replica calls it and sign-ins are refused at once
//! (503 with `Retry-After`); once the wait is over, one sign-in at a time, across replicas,
//! finds out whether it answers (a lease on the row, [`PROBE_LEASE`]), the others are told to
//! come back in [`PROBE_WAIT`]. Each replica mirrors a wait it reads into its own throttle, so
//! a crowd retrying is answered without reading the database again.

use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::{Condition, Expr, OnConflict};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Set};
use uuid::Uuid;

use crate::app::App;
use crate::app::identity::sign_in::calls::unavailable;
use crate::entity::sign_in_provider_hold;
use crate::error::AppResult;

/// How long a sign-in waits while another finds out whether a provider answers again.
const PROBE_WAIT: Duration = Duration::from_secs(1);
/// How long that sign-in may take (two calls of at most ten seconds each) before another
/// may try.
const PROBE_LEASE: chrono::Duration = chrono::Duration::seconds(25);

/// What a sign-in may do with a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Call it: it is not recovering.
    Free,
    /// Call it to find out whether it answers again (the lease's id).
    Probe(Uuid),
}

impl App {
    /// Refused (503) while `provider` is held here or by any replica.
    pub(crate) async fn sign_in_available(&self, provider: &str) -> AppResult<()> {
        if let Some(wait) = self.sign_in.throttle.provider_held_for(provider) {
            return Err(unavailable(provider, wait));
        }
        match self.sign_in_hold_read(provider).await? {
            Some(hold) if hold.held_until > Utc::now() => Err(self.sign_in_held(provider, &hold)),
            _ => Ok(()),
        }
    }

    /// Before a sign-in uses its state: whether it may call `provider`, and how (503 while
    /// the provider is held, or while another sign-in finds out whether it answers again).
    pub(crate) async fn sign_in_admit(&self, provider: &str) -> AppResult<Admission> {
        if let Some(wait) = self.sign_in.throttle.provider_held_for(provider) {
            return Err(unavailable(provider, wait));
        }
        let Some(hold) = self.sign_in_hold_read(provider).await? else {
            return Ok(Admission::Free);
        };
        let now = Utc::now();
        if hold.held_until > now {
            return Err(self.sign_in_held(provider, &hold));
        }
        let lease = Uuid::new_v4();
        let taken = sign_in_provider_hold::Entity::update_many()
            .col_expr(sign_in_provider_hold::Column::ProbeId, Expr::value(lease))
            .col_expr(
                sign_in_provider_hold::Column::ProbeUntil,
                Expr::value(now + PROBE_LEASE),
            )
            .filter(sign_in_provider_hold::Column::Provider.eq(provider))
            // Not if another probe was limited since this row was read.
            .filter(sign_in_provider_hold::Column::HeldUntil.lte(now))
            .filter(
                Condition::any()
                    .add(sign_in_provider_hold::Column::ProbeUntil.is_null())
                    .add(sign_in_provider_hold::Column::ProbeUntil.lt(now)),
            )
            .exec(&self.db)
            .await?;
        if taken.rows_affected == 1 {
            Ok(Admission::Probe(lease))
        } else {
            Err(unavailable(provider, PROBE_WAIT))
        }
    }

    /// Just before a call that is not a probe: refused if a replica recorded a wait since the
    /// sign-in was admitted.
    pub(crate) async fn sign_in_hold_check(&self, provider: &str) -> AppResult<()> {
        match self.sign_in_hold_read(provider).await? {
            Some(hold) if hold.held_until > Utc::now() => Err(self.sign_in_held(provider, &hold)),
            _ => Ok(()),
        }
    }

    /// `provider` asked to wait `hold` (or failed): recorded for every replica, and any probe
    /// lease ended (the next one may try when the wait is over).
    pub(crate) async fn sign_in_hold_record(
        &self,
        provider: &str,
        hold: Duration,
    ) -> AppResult<()> {
        let held_until =
            Utc::now() + chrono::Duration::from_std(hold).unwrap_or(chrono::Duration::MAX);
        sign_in_provider_hold::Entity::insert(sign_in_provider_hold::ActiveModel {
            provider: Set(provider.to_owned()),
            held_until: Set(held_until),
            probe_id: Set(None),
            probe_until: Set(None),
        })
        .on_conflict(
            OnConflict::column(sign_in_provider_hold::Column::Provider)
                .update_columns([
                    sign_in_provider_hold::Column::HeldUntil,
                    sign_in_provider_hold::Column::ProbeId,
                    sign_in_provider_hold::Column::ProbeUntil,
                ])
                .to_owned(),
        )
        .exec(&self.db)
        .await?;
        Ok(())
    }

    /// `provider` answered the probe: no longer recovering.
    pub(crate) async fn sign_in_hold_clear(&self, provider: &str) -> AppResult<()> {
        sign_in_provider_hold::Entity::delete_by_id(provider.to_owned())
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// A probe that ended without an answer of the provider (the sign-in failed before
    /// calling it): the next sign-in may try at once.
    pub(crate) async fn sign_in_probe_release(&self, provider: &str, lease: Uuid) {
        let released = sign_in_provider_hold::Entity::update_many()
            .col_expr(
                sign_in_provider_hold::Column::ProbeId,
                Expr::value(Option::<Uuid>::None),
            )
            .col_expr(
                sign_in_provider_hold::Column::ProbeUntil,
                Expr::value(Option::<chrono::DateTime<Utc>>::None),
            )
            .filter(sign_in_provider_hold::Column::Provider.eq(provider))
            .filter(sign_in_provider_hold::Column::ProbeId.eq(lease))
            .exec(&self.db)
            .await;
        if let Err(err) = released {
            // The lease runs out by itself.
            tracing::warn!(provider, error = %err, "a sign-in probe's lease was not released");
        }
    }

    async fn sign_in_hold_read(
        &self,
        provider: &str,
    ) -> AppResult<Option<sign_in_provider_hold::Model>> {
        Ok(
            sign_in_provider_hold::Entity::find_by_id(provider.to_owned())
                .one(&self.db)
                .await?,
        )
    }

    /// The 503 of a recorded wait, mirrored into this replica's throttle.
    fn sign_in_held(
        &self,
        provider: &str,
        hold: &sign_in_provider_hold::Model,
    ) -> crate::error::AppError {
        let wait = (hold.held_until - Utc::now()).to_std().unwrap_or_default();
        self.sign_in.throttle.provider_hold(provider, wait);
        unavailable(provider, wait)
    }
}
