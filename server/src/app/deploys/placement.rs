//! Where a service's instances run: the pure decision, from the service's placement policy
//! ([`PlacementPolicy`]), of which provider and region each new instance goes to. The caller passes only the providers that
//! may take new work now (enabled, not drained, breaker not open, and not excluded for this
//! instance after a refusal), so that failover is the same decision made again without the
//! provider that refused.

use std::collections::BTreeMap;

use crate::app::projects::services::spec::{PlacementPolicy, ProviderPreference};

/// The capability of a plugin that fetches and builds code from a repository where its
/// instances run (contract 0.6.0's `instance-spec.source`).
pub const GIT_SOURCE_CAPABILITY: &str = "git-source";

/// A provider that may take a new instance now, and the regions its plugin offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub regions: Vec<String>,
    /// Whether its plugin builds code from a repository (capability `git-source`).
    pub builds_code: bool,
}

/// Where one new instance goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub provider: String,
    pub region: String,
}

struct Choice {
    name: String,
    priority: u32,
    weight: u32,
    region: String,
}

/// The eligible options: providers of the policy among the candidates, each with the region
/// it would use (the first of the service's regions it can serve, else its first allowed one).
fn options(
    policy: &PlacementPolicy,
    service_regions: &[String],
    candidates: &[Candidate],
) -> Vec<Choice> {
    let preferences: Vec<ProviderPreference> = if policy.providers.is_empty() {
        candidates
            .iter()
            .map(|candidate| ProviderPreference {
                name: candidate.name.clone(),
                priority: 0,
                weight: 1,
                regions: Vec::new(),
            })
            .collect()
    } else {
        policy.providers.clone()
    };
    preferences
        .into_iter()
        .filter_map(|preference| {
            let candidate = candidates.iter().find(|c| c.name == preference.name)?;
            let allowed: Vec<&String> = if preference.regions.is_empty() {
                candidate.regions.iter().collect()
            } else {
                preference
                    .regions
                    .iter()
                    .filter(|region| candidate.regions.contains(region))
                    .collect()
            };
            let region = if service_regions.is_empty() {
                allowed.first().map(|region| (*region).clone())
            } else {
                service_regions
                    .iter()
                    .find(|region| allowed.contains(region))
                    .cloned()
            }?;
            Some(Choice {
                name: preference.name,
                priority: preference.priority,
                weight: preference.weight,
                region,
            })
        })
        .collect()
}

/// Chooses where `count` new instances go, given how many instances the deployment already
/// has on each provider (`placed`, for spreading). With `builds_code` (a service whose code
/// comes from a repository), only providers that build code are candidates. Fails when no
/// candidate can serve the service (none allowed by the policy, or none with a region the
/// service accepts).
pub fn place(
    policy: &PlacementPolicy,
    service_regions: &[String],
    builds_code: bool,
    candidates: &[Candidate],
    placed: &BTreeMap<String, u32>,
    count: usize,
) -> Result<Vec<Slot>, String> {
    let mut options = options(policy, service_regions, candidates);
    if builds_code {
        let allowed: Vec<String> = options.iter().map(|o| o.name.clone()).collect();
        options.retain(|o| candidates.iter().any(|c| c.name == o.name && c.builds_code));
        if options.is_empty() && !allowed.is_empty() {
            return Err(format!(
                "none of the providers the placement policy allows now ({}) builds code from a \
                 repository (capability `git-source`, such as metal's)",
                allowed.join(", ")
            ));
        }
    }
    if options.is_empty() {
        let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
        return Err(if names.is_empty() {
            "no provider can take new instances now".to_owned()
        } else {
            format!(
                "none of the providers that can take new instances now ({}) is allowed by the placement policy with a region the service accepts",
                names.join(", ")
            )
        });
    }
    let mut counts: BTreeMap<&str, u32> = options
        .iter()
        .map(|o| (o.name.as_str(), placed.get(&o.name).copied().unwrap_or(0)))
        .collect();
    let mut slots = Vec::with_capacity(count);
    for _ in 0..count {
        let best = if policy.spread {
            // The least loaded for its weight; priority, then name, break ties.
            options.iter().min_by(|a, b| {
                let load =
                    |o: &Choice| u64::from(counts[o.name.as_str()]) * 1000 / u64::from(o.weight);
                (load(a), a.priority, &a.name).cmp(&(load(b), b.priority, &b.name))
            })
        } else {
            options
                .iter()
                .min_by(|a, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)))
        }
        .expect("options is not empty");
        *counts.get_mut(best.name.as_str()).expect("counted") += 1;
        slots.push(Slot {
            provider: best.name.clone(),
            region: best.region.clone(),
        });
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates() -> Vec<Candidate> {
        vec![
            Candidate {
                name: "aws".into(),
                regions: vec!["us-east-1".into(), "eu-west-1".into()],
                builds_code: false,
            },
            Candidate {
                name: "gcp".into(),
                regions: vec!["us-central1".into()],
                builds_code: false,
            },
            Candidate {
                name: "metal".into(),
                regions: vec!["local".into()],
                builds_code: false,
            },
        ]
    }

    fn providers(slots: &[Slot]) -> Vec<&str> {
        slots.iter().map(|s| s.provider.as_str()).collect()
    }

    #[test]
    fn the_default_spreads_over_every_candidate() {
        let slots = place(
            &PlacementPolicy::default(),
            &[],
            false,
            &candidates(),
            &BTreeMap::new(),
            3,
        )
        .unwrap();
        assert_eq!(providers(&slots), ["aws", "gcp", "metal"]);
        assert_eq!(slots[0].region, "us-east-1");
        // Already placed instances count: the next goes where there are fewest.
        let placed = BTreeMap::from([("aws".to_owned(), 1), ("gcp".to_owned(), 1)]);
        let next = place(
            &PlacementPolicy::default(),
            &[],
            false,
            &candidates(),
            &placed,
            1,
        )
        .unwrap();
        assert_eq!(providers(&next), ["metal"]);
    }

    #[test]
    fn weights_priorities_and_failover() {
        let policy = PlacementPolicy {
            providers: vec![
                ProviderPreference {
                    name: "gcp".into(),
                    priority: 0,
                    weight: 2,
                    regions: vec![],
                },
                ProviderPreference {
                    name: "aws".into(),
                    priority: 1,
                    weight: 1,
                    regions: vec!["eu-west-1".into()],
                },
            ],
            spread: true,
        };
        let slots = place(&policy, &[], false, &candidates(), &BTreeMap::new(), 3).unwrap();
        assert_eq!(providers(&slots), ["gcp", "aws", "gcp"]);
        assert_eq!(slots[1].region, "eu-west-1");
        // gcp refused: the same decision without it.
        let without_gcp: Vec<Candidate> = candidates()
            .into_iter()
            .filter(|c| c.name != "gcp")
            .collect();
        let slots = place(&policy, &[], false, &without_gcp, &BTreeMap::new(), 2).unwrap();
        assert_eq!(providers(&slots), ["aws", "aws"]);
        // No spreading: all on the best priority that is eligible.
        let fill = PlacementPolicy {
            spread: false,
            ..policy.clone()
        };
        assert_eq!(
            providers(&place(&fill, &[], false, &candidates(), &BTreeMap::new(), 2).unwrap()),
            ["gcp", "gcp"]
        );
        assert_eq!(
            providers(&place(&fill, &[], false, &without_gcp, &BTreeMap::new(), 2).unwrap()),
            ["aws", "aws"]
        );
        // metal is not in the policy: never used.
        let only_metal: Vec<Candidate> = candidates()
            .into_iter()
            .filter(|c| c.name == "metal")
            .collect();
        assert!(place(&policy, &[], false, &only_metal, &BTreeMap::new(), 1).is_err());
    }

    #[test]
    fn the_services_regions_choose_and_exclude() {
        let regions = vec!["local".to_owned(), "us-central1".to_owned()];
        let slots = place(
            &PlacementPolicy::default(),
            &regions,
            false,
            &candidates(),
            &BTreeMap::new(),
            2,
        )
        .unwrap();
        // aws offers none of the service's regions.
        assert_eq!(providers(&slots), ["gcp", "metal"]);
        assert!(
            place(
                &PlacementPolicy::default(),
                &["mars-1".into()],
                false,
                &candidates(),
                &BTreeMap::new(),
                1
            )
            .is_err()
        );
        assert!(
            place(
                &PlacementPolicy::default(),
                &[],
                false,
                &[],
                &BTreeMap::new(),
                1
            )
            .is_err()
        );
    }

    #[test]
    fn code_from_a_repository_goes_only_where_it_is_built() {
        let mut building = candidates();
        building[2].builds_code = true;
        let slots = place(
            &PlacementPolicy::default(),
            &[],
            true,
            &building,
            &BTreeMap::new(),
            3,
        )
        .unwrap();
        assert_eq!(providers(&slots), ["metal", "metal", "metal"]);
        let refused = place(
            &PlacementPolicy::default(),
            &[],
            true,
            &candidates(),
            &BTreeMap::new(),
            1,
        )
        .unwrap_err();
        assert!(refused.contains("git-source"), "{refused}");
    }

    #[test]
    fn policies_are_validated() {
        let mut policy = PlacementPolicy::default();
        policy.providers.push(ProviderPreference {
            name: "aws".into(),
            priority: 0,
            weight: 0,
            regions: vec![],
        });
        assert!(policy.validate().is_err());
        policy.providers[0].weight = 1;
        assert!(policy.validate().is_ok());
        policy.providers.push(policy.providers[0].clone());
        assert!(policy.validate().is_err());
    }
}
