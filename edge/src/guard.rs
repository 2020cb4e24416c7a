//! What an edge checks before it applies a verified snapshot: that it is newer than the one it
//! serves, and that it does not take away more than `max_drop` of the routes or of the
//! upstreams, or leave no route at all, unless the control plane marked the drop intended.
//! A control plane that lost its database, or whose health checks were cut off from the
//! workloads, must not empty the edges.

use bulkhead_routing::RoutingTable;

/// Why a verified snapshot is not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not newer than the table served (an old replica, a stale mirror, a replay).
    NotNewer { served: i64 },
    /// It has no route while the edge serves some.
    Empty,
    /// It drops too many routes or upstreams, not marked intended.
    Drop { routes: usize, upstreams: usize },
}

impl Refusal {
    /// A short name for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotNewer { .. } => "not_newer",
            Self::Empty => "empty",
            Self::Drop { .. } => "drop",
        }
    }

    pub fn describe(&self, next: &RoutingTable) -> String {
        match self {
            Self::NotNewer { served } => format!(
                "revision {} is not newer than revision {served}, which is served",
                next.revision
            ),
            Self::Empty => format!(
                "revision {} has no route at all and is not marked intended",
                next.revision
            ),
            Self::Drop { routes, upstreams } => format!(
                "revision {} would drop {routes} routes and {upstreams} upstreams, more than allowed, and is not marked intended",
                next.revision
            ),
        }
    }
}

/// Checks `next` against `served` (none: nothing to lose).
pub fn check(
    served: Option<&RoutingTable>,
    next: &RoutingTable,
    max_drop: f64,
) -> Result<(), Refusal> {
    let Some(served) = served else {
        return Ok(());
    };
    if next.revision <= served.revision {
        return Err(Refusal::NotNewer {
            served: served.revision,
        });
    }
    if next.drop_intended {
        return Ok(());
    }
    if next.routes.is_empty() && !served.routes.is_empty() {
        return Err(Refusal::Empty);
    }
    let dropped = |before: usize, after: usize| before.saturating_sub(after);
    let routes = dropped(served.routes.len(), next.routes.len());
    let upstreams = dropped(served.upstream_count(), next.upstream_count());
    let too_many =
        |dropped: usize, before: usize| before > 0 && dropped as f64 / before as f64 > max_drop;
    if too_many(routes, served.routes.len()) || too_many(upstreams, served.upstream_count()) {
        return Err(Refusal::Drop { routes, upstreams });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_routing::{Route, Upstream};

    fn table(revision: i64, routes: usize, upstreams: usize) -> RoutingTable {
        RoutingTable {
            revision,
            generated_at: chrono::Utc::now(),
            drop_intended: false,
            routes: (0..routes)
                .map(|r| Route {
                    domain: format!("d{r}.example"),
                    project_id: uuid::Uuid::nil(),
                    service_id: uuid::Uuid::nil(),
                    upstreams: (0..upstreams)
                        .map(|u| Upstream {
                            address: format!("10.0.{r}.{u}:80"),
                            provider: "metal".into(),
                            region: "local".into(),
                            instance_key: format!("i-{r}-{u}"),
                            weight: 1,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn older_empty_and_large_drops_are_refused_unless_intended() {
        let served = table(5, 4, 2);
        assert_eq!(check(None, &table(1, 0, 0), 0.5), Ok(()));
        assert_eq!(
            check(Some(&served), &table(5, 4, 2), 0.5),
            Err(Refusal::NotNewer { served: 5 })
        );
        assert_eq!(
            check(Some(&served), &table(6, 0, 0), 0.5),
            Err(Refusal::Empty)
        );
        assert_eq!(
            check(Some(&served), &table(6, 4, 0), 0.5),
            Err(Refusal::Drop {
                routes: 0,
                upstreams: 8
            })
        );
        assert_eq!(check(Some(&served), &table(6, 3, 2), 0.5), Ok(()));
        let mut intended = table(6, 0, 0);
        intended.drop_intended = true;
        assert_eq!(check(Some(&served), &intended, 0.5), Ok(()));
    }
}
