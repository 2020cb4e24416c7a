//! A service's spec: what it runs (its source), where (its placement policy), how big each
//! instance is (its size) and how its instances are checked (its health check), with the
//! bounds of each. A deployment deploys a
//! copy of the spec taken when it was made ([`ServiceSpec`]).

use std::collections::BTreeSet;
use std::time::Duration;

use bulkhead_common::health_check::HealthCheckValues;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::projects::services::revision::{SourceRevision, image_resolve};
use crate::app::shared::validate::slug_validate;
use crate::entity::service;
use crate::error::{AppError, AppResult, ErrorCode};
use crate::plugins::{GitSource, HealthCheck};

pub use crate::app::shared::sizes::{ServiceSize, ServiceSizes};

/// What a service runs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ServiceSource {
    /// A packaged artifact, e.g. an OCI image reference.
    Artifact {
        /// Up to 500 characters, not all blank. It may name the deployed commit:
        /// `{commit}`, `{short_commit}` (its first 7 digits) and `{branch}` (characters
        /// other than letters, digits, `_`, `.` and `-` written as `-`) are filled in per
        /// deployment; other braces are refused.
        #[schema(min_length = 1, max_length = 500, pattern = "\\S")]
        image: String,
    },
    /// A command line run on the host, as separate arguments.
    Command {
        #[schema(min_items = 1, max_items = 100)]
        command: Vec<String>,
    },
    /// Code from a git repository: each deployment deploys one commit of it (a push's, the
    /// newest pushed to the bound branch, or one given), which is fetched where each instance
    /// runs, verified, built with `build`, and run with `command` in the checked-out code. Only
    /// providers whose plugin builds code (capability `git-source`: metal) run it.
    Git {
        /// `https://`, `http://` or `git://`, with no user or password in it; up to 2048
        /// characters.
        #[schema(
            max_length = 2048,
            pattern = "^(https|http|git)://[^/?#@\\s]+([/?#]\\S*)?$"
        )]
        repository: String,
        /// Run in the checked-out code before the command, as separate arguments.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_items = 1, max_items = 100)]
        build: Option<Vec<String>>,
        /// Run in the checked-out code, as separate arguments.
        #[schema(min_items = 1, max_items = 100)]
        command: Vec<String>,
        /// The name of a secret variable of the service that holds a token reading the
        /// repository (sent to an `https` repository only, as basic credentials: GitHub's and
        /// GitLab's tokens work). The fetch gets it; the workload's environment does not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(pattern = "^[A-Z_][A-Z0-9_]*$", max_length = 128)]
        token_variable: Option<String>,
    },
}

/// What a deployment deploys: the service's spec when it was made. Secret values stay sealed
/// in it (bound to the service, so they open for no other).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceSpec {
    pub source: ServiceSource,
    pub port: u16,
    pub replicas: u32,
    pub regions: Vec<String>,
    /// As stored: `[{name, value, secret}]`, secret values sealed.
    pub variables: serde_json::Value,
    pub placement: PlacementPolicy,
    pub health_check: HealthCheckSpec,
    /// What each instance is given; none in a spec taken before sizes (the operator's
    /// default size then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<ServiceSize>,
    /// The commit it deploys, when one is known (a push, a commit given, the latest push of
    /// the bound branch); a rollback keeps the one it goes back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<SourceRevision>,
}

impl ServiceSpec {
    pub fn of(service: &service::Model) -> AppResult<Self> {
        Ok(Self {
            source: serde_json::from_value(service.source.clone()).map_err(AppError::internal)?,
            port: u16::try_from(service.port).map_err(AppError::internal)?,
            replicas: u32::try_from(service.replicas).map_err(AppError::internal)?,
            regions: serde_json::from_value(service.regions.clone()).map_err(AppError::internal)?,
            variables: service.variables.clone(),
            placement: json_or_default(&service.placement)?,
            health_check: json_or_default(&service.health_check)?,
            size: service
                .size
                .clone()
                .map(serde_json::from_value)
                .transpose()
                .map_err(AppError::internal)?,
            revision: None,
        })
    }

    /// What a provider runs: the image with its commit filled in, or the command line
    /// (shell-quoted). `no_commit` when the image names a commit this spec has not, or the
    /// source is a repository and it has no commit.
    pub fn artifact(&self) -> AppResult<String> {
        match &self.source {
            ServiceSource::Artifact { image } => image_resolve(image, self.revision.as_ref()),
            ServiceSource::Command { command } => Ok(shell_words::join(command)),
            ServiceSource::Git { command, .. } => {
                self.commit()?;
                Ok(shell_words::join(command))
            }
        }
    }

    /// The commit a `git` source deploys: `no_commit` without one.
    fn commit(&self) -> AppResult<&str> {
        match &self.revision {
            Some(revision) => Ok(&revision.commit),
            None => Err(AppError::new(
                ErrorCode::NoCommit,
                "this service runs code from a repository, and this deployment has no commit: \
                 push to a bound branch, or deploy with `commit`",
            )),
        }
    }

    /// The image a provider is given, for an `artifact` source.
    pub fn image(&self) -> AppResult<Option<String>> {
        match &self.source {
            ServiceSource::Artifact { .. } => self.artifact().map(Some),
            ServiceSource::Command { .. } | ServiceSource::Git { .. } => Ok(None),
        }
    }

    /// Whether its code comes from a repository, to be built where it runs.
    pub fn builds_code(&self) -> bool {
        matches!(self.source, ServiceSource::Git { .. })
    }

    /// For a `git` source: the name of the variable that holds its read token, if any.
    pub fn token_variable(&self) -> Option<&str> {
        match &self.source {
            ServiceSource::Git { token_variable, .. } => token_variable.as_deref(),
            _ => None,
        }
    }

    /// What a provider is told of a `git` source: the repository, the commit, the build and
    /// the token (opened from `env`, where it is taken out: the workload does not get it).
    pub fn git_source(
        &self,
        env: &mut std::collections::BTreeMap<String, String>,
    ) -> AppResult<Option<GitSource>> {
        let ServiceSource::Git {
            repository,
            build,
            token_variable,
            ..
        } = &self.source
        else {
            return Ok(None);
        };
        let token = match token_variable {
            Some(name) => Some(env.remove(name).ok_or_else(|| {
                AppError::invalid(format!(
                    "`source.token_variable` names `{name}`, which is not a variable of the service"
                ))
            })?),
            None => None,
        };
        Ok(Some(GitSource {
            url: repository.clone(),
            commit: self.commit()?.to_owned(),
            token,
            build: build.as_deref().map(shell_words::join),
        }))
    }
}

/// A stored JSON column, or the default when it is empty.
pub(crate) fn json_or_default<T: serde::de::DeserializeOwned + Default>(
    value: &Option<serde_json::Value>,
) -> AppResult<T> {
    value
        .clone()
        .map(serde_json::from_value)
        .transpose()
        .map_err(AppError::internal)
        .map(Option::unwrap_or_default)
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// Where a service's instances may run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacementPolicy {
    /// The providers instances may run on, with their priority, weight and regions. Empty:
    /// every provider, each with priority 0 and weight 1.
    #[serde(default)]
    #[schema(max_items = 20)]
    pub providers: Vec<ProviderPreference>,
    /// Spread the replicas over the eligible providers in proportion to their weights (the
    /// default); otherwise put them all on the eligible provider of the best priority.
    #[serde(default = "yes")]
    pub spread: bool,
}

impl Default for PlacementPolicy {
    fn default() -> Self {
        Self {
            providers: Vec::new(),
            spread: true,
        }
    }
}

/// One provider of a placement policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderPreference {
    /// The provider's name.
    pub name: String,
    /// Lower is preferred (0 to 100, default 0). Without spreading, the eligible provider of
    /// the lowest priority takes every replica; with it, priority breaks ties.
    #[serde(default)]
    #[schema(maximum = 100)]
    pub priority: u32,
    /// Share of the replicas when spreading (1 to 100, default 1).
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 100)]
    pub weight: u32,
    /// The provider's regions it may use, in order of preference; empty: any of its
    /// plugin's regions.
    #[serde(default)]
    #[schema(max_items = 20)]
    pub regions: Vec<String>,
}

impl PlacementPolicy {
    /// Checks names, ranges and duplicates.
    pub fn validate(&self) -> AppResult<()> {
        if self.providers.len() > 20 {
            return Err(AppError::invalid(
                "`placement.providers` may list at most 20 providers",
            ));
        }
        let mut seen = BTreeSet::new();
        for preference in &self.providers {
            slug_validate("placement.providers[].name", &preference.name)?;
            if !seen.insert(&preference.name) {
                return Err(AppError::invalid(format!(
                    "provider `{}` is listed twice in `placement.providers`",
                    preference.name
                )));
            }
            if preference.priority > 100 {
                return Err(AppError::invalid(
                    "`placement.providers[].priority` must be 0 to 100",
                ));
            }
            if !(1..=100).contains(&preference.weight) {
                return Err(AppError::invalid(
                    "`placement.providers[].weight` must be 1 to 100",
                ));
            }
            if preference.regions.len() > 20 {
                return Err(AppError::invalid(
                    "`placement.providers[].regions` may list at most 20 regions",
                ));
            }
            for region in &preference.regions {
                slug_validate("placement.providers[].regions[]", region)?;
            }
        }
        Ok(())
    }
}

fn default_path() -> String {
    "/".into()
}
fn default_interval_ms() -> u64 {
    2000
}
fn default_timeout_ms() -> u64 {
    1000
}
fn default_healthy_threshold() -> u32 {
    1
}
fn default_unhealthy_threshold() -> u32 {
    3
}
fn default_start_timeout_secs() -> u32 {
    120
}

/// The health check of a service's instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckSpec {
    /// The path requested with `GET` (default `/`): visible ASCII without `#`. Any 2xx or 3xx
    /// answer passes.
    #[serde(default = "default_path")]
    #[schema(max_length = 200, pattern = "^/[!-\"$-~]*$")]
    pub path: String,
    /// Milliseconds between checks (100 to 60000, default 2000).
    #[serde(default = "default_interval_ms")]
    #[schema(minimum = 100, maximum = 60000)]
    pub interval_ms: u64,
    /// Milliseconds a check may take (50 to 30000, default 1000).
    #[serde(default = "default_timeout_ms")]
    #[schema(minimum = 50, maximum = 30000)]
    pub timeout_ms: u64,
    /// Consecutive passes that make an instance healthy (1 to 10, default 1).
    #[serde(default = "default_healthy_threshold")]
    #[schema(minimum = 1, maximum = 10)]
    pub healthy_threshold: u32,
    /// Consecutive failures that make a healthy instance unhealthy (1 to 10, default 3).
    #[serde(default = "default_unhealthy_threshold")]
    #[schema(minimum = 1, maximum = 10)]
    pub unhealthy_threshold: u32,
    /// Seconds a new instance has to become healthy before its rollout fails (1 to 3600,
    /// default 120).
    #[serde(default = "default_start_timeout_secs")]
    #[schema(minimum = 1, maximum = 3600)]
    pub start_timeout_secs: u32,
}

impl Default for HealthCheckSpec {
    fn default() -> Self {
        Self {
            path: default_path(),
            interval_ms: default_interval_ms(),
            timeout_ms: default_timeout_ms(),
            healthy_threshold: default_healthy_threshold(),
            unhealthy_threshold: default_unhealthy_threshold(),
            start_timeout_secs: default_start_timeout_secs(),
        }
    }
}

impl HealthCheckSpec {
    /// The bounds the host agent checks too (`bulkhead_common::health_check`).
    pub fn validate(&self) -> AppResult<()> {
        HealthCheckValues {
            path: &self.path,
            interval_ms: self.interval_ms,
            timeout_ms: self.timeout_ms,
            healthy_threshold: self.healthy_threshold,
            unhealthy_threshold: self.unhealthy_threshold,
            start_timeout_secs: Some(self.start_timeout_secs),
        }
        .check()
        .map_err(AppError::invalid)
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// The check as the plugin contract gives it to a provider that checks workloads where
    /// they run (the start timeout stays the control plane's).
    pub fn to_contract(&self) -> HealthCheck {
        HealthCheck {
            path: self.path.clone(),
            interval_ms: u32::try_from(self.interval_ms).unwrap_or(u32::MAX),
            timeout_ms: u32::try_from(self.timeout_ms).unwrap_or(u32::MAX),
            healthy_threshold: self.healthy_threshold,
            unhealthy_threshold: self.unhealthy_threshold,
        }
    }
}
