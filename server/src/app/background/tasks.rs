//! The background tasks' activations: each a small adapter from the driver to the domain
//! method that does the work (the work itself stays in its domain's folder). A task with no
//! state of its own is a function ([`Step`]); the others are types.

use std::time::Instant;

use futures_util::future::BoxFuture;
use sea_orm::DatabaseConnection;

use crate::app::App;
use crate::app::background::driver::{Activation, BackgroundTask, Outcome};
use crate::app::cluster::replicas::HEARTBEAT_EVERY;
use crate::app::routing::RoutingFollow;
use crate::error::AppResult;

/// An activation with no state of its own.
pub type StepFn = for<'a> fn(&'a App, &'a Activation) -> BoxFuture<'a, AppResult<Outcome>>;

/// A task whose every activation is one call of a function.
pub struct Step(pub StepFn);

impl BackgroundTask for Step {
    fn activate<'a>(
        &'a mut self,
        app: &'a App,
        activation: &'a Activation,
    ) -> BoxFuture<'a, AppResult<Outcome>> {
        (self.0)(app, activation)
    }
}

/// The deploy reconciler's pass (see [`crate::app::deploys::reconciler`]).
pub fn deploys_reconcile<'a>(
    app: &'a App,
    activation: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        if activation.leading_anew {
            app.reconciler_lead_taken().await;
        }
        let pass = app
            .reconcile_pass()
            .await
            .inspect_err(|err| app.reconciler.error_record(format!("pass failed: {err}")))?;
        Ok(match pass.held_for {
            _ if pass.more => Outcome::again_now(),
            // Operations held back by a rate may go then: the next pass is due then, not at
            // the next period (or the drain rate would be capped at one operation a period).
            Some(wait) => Outcome::again_after(wait),
            None => Outcome::default(),
        })
    })
}

pub fn push_intake<'a>(app: &'a App, _: &'a Activation) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.push_intake_pass().await?;
        Ok(Outcome::default())
    })
}

pub fn commit_statuses<'a>(app: &'a App, _: &'a Activation) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.forge_statuses_pass().await?;
        Ok(Outcome::default())
    })
}

pub fn webhook_deliveries<'a>(
    app: &'a App,
    _: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.webhook_deliveries_pass().await?;
        Ok(Outcome::default())
    })
}

pub fn deployment_streams<'a>(
    app: &'a App,
    _: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.deployment_watch_pass().await?;
        Ok(Outcome::default())
    })
}

pub fn provider_sync<'a>(app: &'a App, _: &'a Activation) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.providers_sync().await?;
        Ok(Outcome::default())
    })
}

pub fn provider_probes<'a>(app: &'a App, _: &'a Activation) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.provider_probes_start();
        Ok(Outcome::default())
    })
}

pub fn maintenance_purge<'a>(app: &'a App, _: &'a Activation) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.maintenance_purge().await?;
        Ok(Outcome::default())
    })
}

pub fn login_limiter_trim<'a>(
    app: &'a App,
    _: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.login.forget_idle();
        Ok(Outcome::default())
    })
}

pub fn instance_health<'a>(
    app: &'a App,
    activation: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.instance_health_run(activation.stop.clone()).await;
        Ok(Outcome::default())
    })
}

pub fn change_feed_listen<'a>(
    app: &'a App,
    activation: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.change_feed_listen_run(activation.stop.clone()).await;
        Ok(Outcome::default())
    })
}

pub fn database_primary<'a>(
    app: &'a App,
    activation: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        if let Some(primary) = &app.primary {
            primary.follow_run(activation.stop.clone()).await;
        }
        Ok(Outcome::default())
    })
}

pub fn change_feed_tell<'a>(
    app: &'a App,
    activation: &'a Activation,
) -> BoxFuture<'a, AppResult<Outcome>> {
    Box::pin(async move {
        app.change_feed_tell_run(activation.stop.clone()).await;
        Ok(Outcome::default())
    })
}

/// The routing table's follower (and, on the leader, publisher).
#[derive(Default)]
pub struct Routing(RoutingFollow);

impl BackgroundTask for Routing {
    fn activate<'a>(
        &'a mut self,
        app: &'a App,
        _: &'a Activation,
    ) -> BoxFuture<'a, AppResult<Outcome>> {
        Box::pin(async move {
            app.routing_step(&mut self.0).await?;
            Ok(Outcome::default())
        })
    }
}

/// The renewal of this replica's leases and heartbeat, on a connection of its own (a busy
/// request pool never delays a renewal); at the end, the leases are handed over.
pub struct LeaseRenewal {
    pub db: DatabaseConnection,
    /// Where this replica is reached (its heartbeat says so).
    pub address: String,
    pub heartbeat_at: Option<Instant>,
}

impl BackgroundTask for LeaseRenewal {
    fn activate<'a>(
        &'a mut self,
        app: &'a App,
        _: &'a Activation,
    ) -> BoxFuture<'a, AppResult<Outcome>> {
        Box::pin(async move {
            let renewed = app.leases_renew(&self.db).await;
            if self
                .heartbeat_at
                .is_none_or(|at| at.elapsed() >= HEARTBEAT_EVERY)
            {
                self.heartbeat_at = Some(Instant::now());
                app.replica_heartbeat(&self.db, &self.address).await?;
            }
            renewed?;
            Ok(Outcome::default())
        })
    }

    fn finish<'a>(&'a mut self, app: &'a App) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            app.leases_release_all(&self.db).await;
            self.db.clone().close().await.ok();
        })
    }
}
