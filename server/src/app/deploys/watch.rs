//! What wakes a deployment's event streams: only a change of that deployment.
//!
//! Each stream of this server follows one deployment ([`DeploymentWatch::follow`]). One loop
//! ([`App::deployment_watch_run`]) reads, after each change of the `deployments` topic (made
//! here or, through the change feed, on another replica) and every [`WATCH_EVERY`] (the
//! changes no hint brought: SQLite's other processes, a dropped listening connection), the
//! mark of every deployment followed — its event count, its state and how many of its
//! instances are still moving — in two queries, and wakes only the streams whose
//! deployment's mark moved. Another tenant's deployments changing costs a stream nothing, and a
//! thousand streams cost two queries a pass, not a thousand.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::entity::deployment::DeploymentState;
use crate::ids::DeploymentId;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};
use tokio::sync::watch;

use crate::app::App;
use crate::app::deploys::deployments::STREAM_MOVING_STATES;
use crate::entity::{deployment, instance};
use crate::error::AppResult;

/// How often the marks are read without a hint.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Deployments read per query.
const CHUNK: usize = 500;

/// What a stream's end depends on: its events, the deployment's state, and whether its
/// instances are still being made or removed. `None`: the deployment is gone.
type Mark = Option<(i64, DeploymentState, i64)>;

struct Followed {
    wake: watch::Sender<u64>,
    /// `None` until first read.
    mark: Option<Mark>,
}

/// The deployments this server's streams follow.
#[derive(Default)]
pub struct DeploymentWatch {
    followed: Mutex<HashMap<DeploymentId, Followed>>,
    /// Reads of events made by this server's streams (also `deployment_stream_reads_total`).
    reads: AtomicU64,
}

impl DeploymentWatch {
    /// A receiver bumped whenever deployment `id` changes, while it is held.
    pub fn follow(&self, id: DeploymentId) -> watch::Receiver<u64> {
        let mut followed = self.followed.lock().expect("not poisoned");
        followed
            .entry(id)
            .or_insert_with(|| Followed {
                wake: watch::channel(0).0,
                mark: None,
            })
            .wake
            .subscribe()
    }

    /// The deployments still followed (those no stream holds any more are forgotten).
    fn followed_ids(&self) -> Vec<DeploymentId> {
        let mut followed = self.followed.lock().expect("not poisoned");
        followed.retain(|_, entry| entry.wake.receiver_count() > 0);
        followed.keys().copied().collect()
    }

    /// Records the marks read, waking the streams whose deployment's mark moved; returns how
    /// many it woke.
    fn marks_apply(&self, marks: HashMap<DeploymentId, Mark>) -> usize {
        let mut followed = self.followed.lock().expect("not poisoned");
        let mut woken = 0;
        for (id, mark) in marks {
            let Some(entry) = followed.get_mut(&id) else {
                continue;
            };
            if entry.mark.as_ref() != Some(&mark) {
                entry.mark = Some(mark);
                entry.wake.send_modify(|n| *n = n.wrapping_add(1));
                woken += 1;
            }
        }
        woken
    }

    /// Counts a read of a stream's events.
    pub fn read_recorded(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("deployment_stream_reads_total").increment(1);
    }

    /// How many times this server's streams read their events.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many deployments are followed now.
    pub fn len(&self) -> usize {
        self.followed.lock().expect("not poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl App {
    /// Wakes each deployment stream whose own deployment changed (see the module
    /// documentation): one read of the followed deployments' marks.
    pub async fn deployment_watch_pass(&self) -> AppResult<()> {
        let ids = self.deployment_watch.followed_ids();
        if ids.is_empty() {
            return Ok(());
        }
        let marks = deployment_marks(&self.db, &ids).await?;
        let woken = self.deployment_watch.marks_apply(marks);
        tracing::debug!(
            followed = ids.len(),
            woken,
            "deployment streams' marks read"
        );
        metrics::counter!("deployment_streams_woken_total").increment(woken as u64);
        Ok(())
    }
}

/// The marks of `ids`, in two queries per [`CHUNK`].
async fn deployment_marks(
    db: &impl sea_orm::ConnectionTrait,
    ids: &[DeploymentId],
) -> AppResult<HashMap<DeploymentId, Mark>> {
    let mut marks: HashMap<DeploymentId, Mark> = ids.iter().map(|id| (*id, None)).collect();
    for chunk in ids.chunks(CHUNK) {
        let rows: Vec<(DeploymentId, i64, DeploymentState)> = deployment::Entity::find()
            .select_only()
            .column(deployment::Column::Id)
            .column(deployment::Column::EventSeq)
            .column(deployment::Column::State)
            .filter(deployment::Column::Id.is_in(chunk.iter().copied()))
            .into_tuple()
            .all(db)
            .await?;
        let moving: HashMap<DeploymentId, i64> = instance::Entity::find()
            .select_only()
            .column(instance::Column::DeploymentId)
            .column_as(instance::Column::Id.count(), "moving")
            .filter(instance::Column::DeploymentId.is_in(chunk.iter().copied()))
            .filter(instance::Column::State.is_in(STREAM_MOVING_STATES))
            .group_by(instance::Column::DeploymentId)
            .into_tuple::<(DeploymentId, i64)>()
            .all(db)
            .await?
            .into_iter()
            .collect();
        for (id, event_seq, state) in rows {
            let moving = moving.get(&id).copied().unwrap_or(0);
            marks.insert(id, Some((event_seq, state, moving)));
        }
    }
    Ok(marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_streams_of_a_deployment_whose_mark_moved_wake() {
        let watch = DeploymentWatch::default();
        let (a, b) = (DeploymentId::new(), DeploymentId::new());
        let mut follows_a = watch.follow(a);
        let mut follows_b = watch.follow(b);
        let first = HashMap::from([
            (a, Some((1, DeploymentState::Queued, 0))),
            (b, Some((1, DeploymentState::Queued, 0))),
        ]);
        assert_eq!(
            watch.marks_apply(first.clone()),
            2,
            "the first read wakes every stream"
        );
        follows_a.borrow_and_update();
        follows_b.borrow_and_update();
        assert_eq!(watch.marks_apply(first), 0);
        let moved = HashMap::from([
            (a, Some((1, DeploymentState::Queued, 0))),
            (b, Some((2, DeploymentState::Placing, 1))),
        ]);
        assert_eq!(watch.marks_apply(moved), 1);
        assert!(!follows_a.has_changed().unwrap());
        assert!(follows_b.has_changed().unwrap());
        // A deployment no stream follows any more is forgotten.
        drop(follows_b);
        assert_eq!(watch.followed_ids(), vec![a]);
        assert_eq!(
            watch.marks_apply(HashMap::from([(a, None)])),
            1,
            "a deployment gone wakes its streams"
        );
    }
}
