//! The routes of one revision in memory: each domain's route with the JSON it has in the
//! signed table, and the domains of each service. It is what makes publishing cost what
//! changed rather than what exists:
//!
//! - the leader compares only the routes of the services that changed
//!   ([`RoutesIndex::changes_to`], with the domains of [`RoutesIndex::domains_of`]);
//! - every replica follows a revision by applying its changes ([`RoutesIndex::apply`]);
//! - the table document is put together from each route's JSON, kept from when the route was
//!   set ([`RoutesIndex::table_json`]): a revision serializes only the routes it changed.
//!
//! Pure: no database and no clock, so it is tested on its own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bulkhead_routing::{Route, RouteChange, RoutingTable};
use chrono::{DateTime, Utc};

use crate::ids::ServiceId;

/// One route, and its JSON as it appears in the table.
#[derive(Debug)]
struct Entry {
    route: Route,
    json: Box<str>,
}

/// The routes of a revision, by domain (the table's order), with the domains of each service.
/// Cloning shares the routes themselves.
#[derive(Debug, Clone, Default)]
pub struct RoutesIndex {
    routes: BTreeMap<String, Arc<Entry>>,
    domains_of: HashMap<ServiceId, BTreeSet<String>>,
}

impl RoutesIndex {
    pub fn new(routes: impl IntoIterator<Item = Route>) -> Self {
        let mut index = Self::default();
        for route in routes {
            index.set(route);
        }
        index
    }

    /// How many routes (domains) there are.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The routes, by domain.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.routes.values().map(|entry| &entry.route)
    }

    pub fn get(&self, domain: &str) -> Option<&Route> {
        self.routes.get(domain).map(|entry| &entry.route)
    }

    /// Every domain that has a route.
    pub fn domains(&self) -> BTreeSet<String> {
        self.routes.keys().cloned().collect()
    }

    /// The domains routed to any of `services`.
    pub fn domains_of<'a>(
        &self,
        services: impl IntoIterator<Item = &'a ServiceId>,
    ) -> BTreeSet<String> {
        services
            .into_iter()
            .filter_map(|service| self.domains_of.get(service))
            .flatten()
            .cloned()
            .collect()
    }

    /// The changes that make the routes of `domains` what `now` says, where `now` holds the
    /// route of each of `domains` that has one now (and maybe routes of new domains): a domain
    /// of `domains` missing from `now` is removed. Sorted by domain.
    pub fn changes_to(&self, domains: &BTreeSet<String>, now: Vec<Route>) -> Vec<RouteChange> {
        let routed: BTreeSet<&str> = now.iter().map(|route| route.domain.as_str()).collect();
        let mut changes: Vec<RouteChange> = domains
            .iter()
            .filter(|domain| !routed.contains(domain.as_str()) && self.routes.contains_key(*domain))
            .map(|domain| RouteChange::Remove {
                domain: domain.clone(),
            })
            .collect();
        changes.extend(
            now.into_iter()
                .filter(|route| self.get(&route.domain) != Some(route))
                .map(|route| RouteChange::Set { route }),
        );
        changes.sort_by(|a, b| change_domain(a).cmp(change_domain(b)));
        changes
    }

    /// Applies the changes of a revision, in order.
    pub fn apply(&mut self, changes: &[RouteChange]) {
        for change in changes {
            match change {
                RouteChange::Set { route } => self.set(route.clone()),
                RouteChange::Remove { domain } => self.remove(domain),
            }
        }
    }

    fn set(&mut self, route: Route) {
        self.remove(&route.domain);
        let json = serde_json::to_string(&route)
            .expect("a route serializes")
            .into_boxed_str();
        self.domains_of
            .entry(ServiceId(route.service_id))
            .or_default()
            .insert(route.domain.clone());
        self.routes
            .insert(route.domain.clone(), Arc::new(Entry { route, json }));
    }

    fn remove(&mut self, domain: &str) {
        let Some(old) = self.routes.remove(domain) else {
            return;
        };
        let service = ServiceId(old.route.service_id);
        if let Some(domains) = self.domains_of.get_mut(&service) {
            domains.remove(domain);
            if domains.is_empty() {
                self.domains_of.remove(&service);
            }
        }
    }

    /// The JSON of the table of this revision: the same bytes as serializing the
    /// [`RoutingTable`], put together from each route's JSON.
    pub fn table_json(
        &self,
        revision: i64,
        generated_at: DateTime<Utc>,
        drop_intended: bool,
    ) -> String {
        let head = serde_json::to_string(&RoutingTable {
            revision,
            generated_at,
            drop_intended,
            routes: Vec::new(),
        })
        .expect("a table serializes");
        let open = head
            .strip_suffix("]}")
            .expect("a table's JSON ends with its routes");
        let size = open.len()
            + self
                .routes
                .values()
                .map(|e| e.json.len() + 1)
                .sum::<usize>();
        let mut json = String::with_capacity(size + 2);
        json.push_str(open);
        for (n, entry) in self.routes.values().enumerate() {
            if n > 0 {
                json.push(',');
            }
            json.push_str(&entry.json);
        }
        json.push_str("]}");
        json
    }

    /// The table of this revision.
    pub fn table(
        &self,
        revision: i64,
        generated_at: DateTime<Utc>,
        drop_intended: bool,
    ) -> RoutingTable {
        RoutingTable {
            revision,
            generated_at,
            drop_intended,
            routes: self.routes().cloned().collect(),
        }
    }
}

fn change_domain(change: &RouteChange) -> &str {
    match change {
        RouteChange::Set { route } => &route.domain,
        RouteChange::Remove { domain } => domain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_routing::Upstream;
    use uuid::Uuid;

    fn service(n: u128) -> ServiceId {
        ServiceId(Uuid::from_u128(n))
    }

    fn route(domain: &str, service_n: u128, addresses: &[&str]) -> Route {
        Route {
            domain: domain.into(),
            project_id: Uuid::from_u128(99),
            service_id: service(service_n).uuid(),
            upstreams: addresses
                .iter()
                .enumerate()
                .map(|(n, address)| Upstream {
                    address: (*address).into(),
                    provider: "gcp".into(),
                    region: "europe-west1-b".into(),
                    instance_key: format!("{domain}-{n}"),
                    weight: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn the_table_json_is_what_serializing_the_table_gives() {
        let index = RoutesIndex::new([
            route("b.example", 1, &["10.0.0.2:80"]),
            route("a.example", 1, &["10.0.0.1:80", "10.0.0.3:80"]),
            route("c.example", 2, &[]),
        ]);
        let at = Utc::now();
        let table = index.table(7, at, true);
        assert_eq!(
            index.table_json(7, at, true),
            serde_json::to_string(&table).unwrap()
        );
        let domains: Vec<&str> = table.routes.iter().map(|r| r.domain.as_str()).collect();
        assert_eq!(domains, ["a.example", "b.example", "c.example"]);
        assert_eq!(
            RoutesIndex::default().table_json(1, at, false),
            serde_json::to_string(&RoutesIndex::default().table(1, at, false)).unwrap()
        );
    }

    #[test]
    fn changes_name_only_what_differs_among_the_domains_looked_at() {
        let index = RoutesIndex::new([
            route("a.example", 1, &["10.0.0.1:80"]),
            route("b.example", 1, &["10.0.0.1:80"]),
            route("c.example", 2, &["10.0.0.9:80"]),
        ]);
        let looked_at = index.domains_of(&[service(1)]);
        assert_eq!(
            looked_at,
            BTreeSet::from(["a.example".into(), "b.example".into()])
        );
        // b lost its domain, a gained an upstream, d is new; c (another service) is not
        // looked at, so its absence from `now` removes nothing.
        let now = vec![
            route("a.example", 1, &["10.0.0.1:80", "10.0.0.2:80"]),
            route("d.example", 1, &["10.0.0.1:80"]),
        ];
        let changes = index.changes_to(&looked_at, now.clone());
        assert_eq!(
            changes,
            [
                RouteChange::Set {
                    route: now[0].clone()
                },
                RouteChange::Remove {
                    domain: "b.example".into()
                },
                RouteChange::Set {
                    route: now[1].clone()
                },
            ]
        );
        let mut next = index.clone();
        next.apply(&changes);
        assert_eq!(
            next.routes().map(|r| r.domain.as_str()).collect::<Vec<_>>(),
            ["a.example", "c.example", "d.example"]
        );
        assert_eq!(next.get("a.example"), Some(&now[0]));
        // Cloning shared the routes: the revision before is unchanged.
        assert_eq!(index.len(), 3);
        assert!(index.get("b.example").is_some());
        assert!(
            next.changes_to(&next.domains_of(&[service(1)]), now)
                .is_empty()
        );
    }

    #[test]
    fn a_domain_that_moves_to_another_service_moves_in_the_index() {
        let mut index = RoutesIndex::new([route("a.example", 1, &["10.0.0.1:80"])]);
        let moved = route("a.example", 2, &["10.0.0.2:80"]);
        let changes = index.changes_to(&index.domains_of(&[service(1)]), vec![moved.clone()]);
        assert_eq!(changes, [RouteChange::Set { route: moved }]);
        index.apply(&changes);
        assert!(index.domains_of(&[service(1)]).is_empty());
        assert_eq!(
            index.domains_of(&[service(2)]),
            BTreeSet::from(["a.example".into()])
        );
        index.apply(&[RouteChange::Remove {
            domain: "a.example".into(),
        }]);
        assert!(index.is_empty() && index.domains_of(&[service(2)]).is_empty());
    }
}
