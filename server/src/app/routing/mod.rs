//! The routing table edges route by: built from the domains and the instances that are
//! `running` and `healthy` by their own health checks (never by their provider's API health),
//! published as a new revision whenever it changes, and served from bytes prepared once per
//! revision. Its costs follow what changed, not what exists:
//!
//! - **Publishing** ([`publish`], the routing leader only): a change of routes names the
//!   services it concerns ([`crate::app::cluster::changes::Changes::routes_changed`]); the leader reads the
//!   domains and healthy instances of those services alone, compares them with the routes it
//!   holds in memory ([`RoutesIndex`]) and, when they differ, stores revision + 1 with its
//!   changes, and writes the routes it changed (the table `routes` holds each domain's current
//!   route: a revision copies nothing else). Every [`REBUILD_EVERY`], on becoming the leader,
//!   and when a change named nothing, it compares every route instead. Each publication is
//!   fenced by the lease's term.
//! - **Following** ([`follow`], every replica): a server learns of a revision by applying its
//!   stored changes to the routes it holds (or, when it holds none or lacks too many, by
//!   reading the table `routes`), and **announces** it at once: watchers get the revision's
//!   changes without waiting for anything else. Then it **signs** the table, put together from
//!   each route's kept JSON, compresses it in the background, and serves those bytes
//!   ([`Prepared`]): readers never touch the database, and a read of the table that arrives
//!   between the announcement and the signature waits for the signature ([`SIGNED_WAIT`]), so
//!   that an edge told of a revision gets it. Ed25519 signatures are deterministic: every
//!   replica serves the same bytes, with the same ETag, for a revision.
//! - **The loop** ([`App::routing_run`]): the leader publishes when routes change on any
//!   replica (the change feed tells it whose); every replica follows as soon as it is told of a
//!   revision, and every [`REFRESH_EVERY`].
//!
//! Keys: see [`crate::app::routing::keys`]; edges' reports: [`crate::app::routing::edges`].

mod build;
pub mod edges;
mod follow;
mod index;
pub mod keys;
mod publish;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde::Serialize;
use tokio::sync::watch;
use utoipa::ToSchema;

use crate::app::App;
use crate::app::cluster::changes::RoutesScope;
use crate::entity::routing_revision;
use crate::error::{AppError, AppResult, ErrorCode};
use bulkhead_routing::{RouteChange, RoutingTable};

pub use index::RoutesIndex;

/// What the routing task keeps between its steps.
#[derive(Debug, Default)]
pub struct RoutingFollow {
    /// Whether this replica led the routing at the last step.
    leading: bool,
    /// When the leader last compared every route.
    rebuilt_at: Option<std::time::Instant>,
}

/// How often each server looks for revisions published by other replicas.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// How often the leader compares every route even though nothing woke it.
pub const REBUILD_EVERY: Duration = Duration::from_secs(30);
/// How long a read of the table waits for the latest announced revision to be signed before
/// it is answered with the revision signed before.
pub const SIGNED_WAIT: Duration = Duration::from_secs(5);
/// Revisions whose changes each server keeps in memory for watchers.
const RECENT_IN_MEMORY: usize = 256;

/// The changes of one revision: what `changes?since=` lists and watchers receive.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RevisionChanges {
    pub revision: i64,
    pub generated_at: DateTime<Utc>,
    pub drop_intended: bool,
    pub changes: Vec<RouteChange>,
}

/// The changes after a revision.
#[derive(Debug, Serialize, ToSchema)]
pub struct RoutingChanges {
    /// The revision asked about.
    pub since: i64,
    /// The latest revision.
    pub revision: i64,
    /// Oldest first, at most `limit` revisions.
    pub revisions: Vec<RevisionChanges>,
    /// Whether more revisions follow the last one listed (ask again with its revision).
    pub more: bool,
}

/// The latest revision this server knows: its routes, and the changes of the revisions up to
/// it (their JSON, as watchers get it). Revision 0: none was published yet.
pub struct Current {
    pub revision: i64,
    pub generated_at: DateTime<Utc>,
    pub drop_intended: bool,
    pub routes: RoutesIndex,
    /// Oldest first, at most [`RECENT_IN_MEMORY`].
    recent: VecDeque<(i64, Arc<str>)>,
}

impl Current {
    fn none() -> Self {
        Self {
            revision: 0,
            generated_at: Utc::now(),
            drop_intended: false,
            routes: RoutesIndex::default(),
            recent: VecDeque::new(),
        }
    }

    /// The JSON of the changes of each revision after `since`, if this server still holds
    /// all of them in memory.
    pub fn changes_after(&self, since: i64) -> Option<Vec<(i64, Arc<str>)>> {
        if since >= self.revision {
            return Some(Vec::new());
        }
        let oldest = self.recent.front()?.0;
        (oldest <= since + 1).then(|| {
            self.recent
                .iter()
                .filter(|(revision, _)| *revision > since)
                .cloned()
                .collect()
        })
    }

    /// The table of this revision.
    pub fn table(&self) -> RoutingTable {
        self.routes
            .table(self.revision, self.generated_at, self.drop_intended)
    }
}

/// A revision as served: signed, compressed and tagged once.
pub struct Prepared {
    pub revision: i64,
    /// Strong ETag (quoted): a hash of the snapshot document.
    pub etag: String,
    /// The signed snapshot document.
    pub identity: Bytes,
    /// The same, gzip-compressed: made in the background once the revision is served (until
    /// it is ready, gzip-accepting clients get the identity bytes).
    pub gzip: std::sync::OnceLock<Bytes>,
    /// The key that signed it.
    pub key_id: String,
}

/// The routing table of this server: what it knows, what it serves, and who waits.
pub struct RoutingState {
    current: ArcSwapOption<Current>,
    prepared: ArcSwapOption<Prepared>,
    /// The latest revision announced (its changes are in `current`).
    revision: watch::Sender<u64>,
    /// The latest revision signed (in `prepared`).
    signed: watch::Sender<u64>,
    /// One publication, and one catching up, at a time on this server.
    publishing: tokio::sync::Mutex<()>,
    /// The active signing key, opened.
    pub(super) signer: std::sync::Mutex<Option<Arc<crate::app::routing::keys::RoutingSigner>>>,
    /// 304s this server answered before the general middleware (`crate::http::lean`); also
    /// counted in `/metrics`, whose registry is the process's.
    pub not_modified_lean: std::sync::atomic::AtomicU64,
}

impl Default for RoutingState {
    fn default() -> Self {
        Self {
            current: ArcSwapOption::empty(),
            prepared: ArcSwapOption::empty(),
            revision: watch::channel(0).0,
            signed: watch::channel(0).0,
            publishing: tokio::sync::Mutex::new(()),
            signer: std::sync::Mutex::new(None),
            not_modified_lean: Default::default(),
        }
    }
}

impl RoutingState {
    /// The latest signed revision (none before the first is signed, at start-up).
    pub fn prepared(&self) -> Option<Arc<Prepared>> {
        self.prepared.load_full()
    }

    /// The latest revision this server knows (none before it first read the table).
    pub fn current(&self) -> Option<Arc<Current>> {
        self.current
            .load_full()
            .filter(|current| current.revision > 0)
    }

    /// A receiver woken when a new revision is announced.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }
}

impl App {
    /// The latest signed revision, or 503 while none is.
    pub fn routing_prepared(&self) -> AppResult<Arc<Prepared>> {
        self.routing.prepared().ok_or_else(not_ready)
    }

    /// The signed snapshot, when it is of the latest revision this server announced (`None`
    /// while that one awaits its signature, or before any).
    pub fn routing_prepared_announced(&self) -> Option<Arc<Prepared>> {
        let prepared = self.routing.prepared()?;
        let announced = self.routing.current().map_or(0, |current| current.revision);
        (prepared.revision >= announced).then_some(prepared)
    }

    /// The latest revision this server knows, or 503 while it knows none.
    pub fn routing_current(&self) -> AppResult<Arc<Current>> {
        self.routing.current().ok_or_else(not_ready)
    }

    /// The signed snapshot of the latest revision this server announced: waits (at most
    /// [`SIGNED_WAIT`]) for its signature when it was announced and not yet signed.
    pub async fn routing_snapshot(&self) -> AppResult<Arc<Prepared>> {
        let announced = self.routing.current().map_or(0, |current| current.revision);
        let mut signed = self.routing.signed.subscribe();
        let waited = tokio::time::timeout(
            SIGNED_WAIT,
            signed.wait_for(|revision| *revision as i64 >= announced),
        )
        .await;
        if waited.is_err() {
            tracing::warn!(
                announced,
                "routing table: revision not signed in time; serving the one before"
            );
        }
        self.routing_prepared()
    }

    /// One step of the routing task: on the routing leader, publishes what changed (here or,
    /// told by the change feed, on another replica); on every replica, serves the latest
    /// revision published. The task runs it when routes change, when a revision is published
    /// and every [`REFRESH_EVERY`].
    pub async fn routing_step(&self, follow: &mut RoutingFollow) -> AppResult<()> {
        let leads = self
            .leases
            .leads(crate::app::cluster::leases::Work::Routing);
        // What changed since the last look; a replica that does not lead drops it (on
        // becoming the leader it compares everything).
        let dirty = self.changes.routes_dirty.take();
        // A replica that has just become the leader compares everything: its predecessor
        // may have stopped before publishing a change. So does one now and then, for a
        // hint that never came.
        let rebuild_due = follow
            .rebuilt_at
            .is_none_or(|at| at.elapsed() >= REBUILD_EVERY);
        let scope = if leads && (!follow.leading || rebuild_due) {
            follow.rebuilt_at = Some(std::time::Instant::now());
            Some(RoutesScope::All)
        } else if leads {
            dirty
        } else {
            None
        };
        follow.leading = leads;
        match scope {
            Some(scope) => self.routing_update(scope).await,
            None => self.routing_prepare().await,
        }
    }

    /// Compares every route and publishes a revision if they changed, then serves the latest.
    pub async fn routing_refresh(&self) -> AppResult<()> {
        self.routing_update(RoutesScope::All).await
    }

    /// Publishes a revision if the routes of `scope` changed (announcing it at once), then
    /// signs and serves the latest.
    pub async fn routing_update(&self, scope: RoutesScope) -> AppResult<()> {
        self.routing_publish(scope).await?;
        self.routing_prepare().await
    }

    /// The changes after revision `since`, at most `limit` revisions; 410 when the history no
    /// longer reaches back to `since` (or `since` is ahead of the table).
    pub async fn routing_changes(&self, since: i64, limit: u64) -> AppResult<RoutingChanges> {
        let latest = self.routing_current()?.revision;
        if since > latest {
            return Err(history_gone(since));
        }
        let rows = routing_revision::Entity::find()
            .filter(routing_revision::Column::Revision.gt(since))
            .filter(routing_revision::Column::Revision.lte(latest))
            .order_by_asc(routing_revision::Column::Revision)
            .limit(limit + 1)
            .all(&self.db)
            .await?;
        if since < latest && rows.first().map(|row| row.revision) != Some(since + 1) {
            return Err(history_gone(since));
        }
        let more = rows.len() as u64 > limit;
        let revisions = rows
            .into_iter()
            .take(limit as usize)
            .map(revision_changes)
            .collect::<AppResult<_>>()?;
        Ok(RoutingChanges {
            since,
            revision: latest,
            revisions,
            more,
        })
    }

    /// The JSON of each revision's changes after `since` (up to the latest announced), from
    /// memory when it holds them; `None` when the history no longer reaches back that far.
    pub async fn routing_changes_json(
        &self,
        since: i64,
    ) -> AppResult<Option<Vec<(i64, Arc<str>)>>> {
        let current = self.routing_current()?;
        if since > current.revision {
            return Ok(None);
        }
        if let Some(changes) = current.changes_after(since) {
            return Ok(Some(changes));
        }
        match self.routing_changes(since, 1000).await {
            Ok(listed) => Ok(Some(
                listed
                    .revisions
                    .iter()
                    .map(|changes| Ok((changes.revision, change_json(changes)?)))
                    .collect::<AppResult<_>>()?,
            )),
            Err(err) if err.code == ErrorCode::RoutingHistoryGone => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn routing_recent_keep(&self) -> usize {
        (self.settings.routing_history.max(1) as usize).min(RECENT_IN_MEMORY)
    }
}

fn not_ready() -> AppError {
    AppError::new(
        ErrorCode::RoutingTableNotReady,
        "the routing table is being built",
    )
    .retry_after(1)
}

fn history_gone(since: i64) -> AppError {
    AppError::new(
        ErrorCode::RoutingHistoryGone,
        format!(
            "the changes after revision {since} are no longer kept: fetch the whole table (GET /v1/routing-table)"
        ),
    )
}

fn revision_changes(row: routing_revision::Model) -> AppResult<RevisionChanges> {
    Ok(RevisionChanges {
        revision: row.revision,
        generated_at: row.created_at,
        drop_intended: row.drop_intended,
        changes: serde_json::from_str(&row.changes).map_err(AppError::internal)?,
    })
}

fn change_json(changes: &RevisionChanges) -> AppResult<Arc<str>> {
    Ok(serde_json::to_string(changes)
        .map_err(AppError::internal)?
        .into())
}

/// The latest stored revision (0 when none).
async fn latest_revision(db: &impl sea_orm::ConnectionTrait) -> AppResult<i64> {
    Ok(routing_revision::Entity::find()
        .select_only()
        .column(routing_revision::Column::Revision)
        .order_by_desc(routing_revision::Column::Revision)
        .into_tuple::<i64>()
        .one(db)
        .await?
        .unwrap_or(0))
}
