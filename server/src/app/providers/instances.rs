//! Instances through a provider, for operators: provision, describe, list and deprovision by
//! calling the provider's plugin directly (deploys use the same path later). Every call goes
//! through [`App::provider_call`]: refused while the provider is disabled or its breaker is
//! open, fed back to the breaker afterwards, and its failure mapped to one HTTP answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use sea_orm::EntityTrait;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::App;
use crate::app::providers::health::call_signal;
use crate::app::shared::pagination::Page;
use crate::app::shared::sizes::ServiceSize;
use crate::app::shared::validate::slug_validate;
use crate::app::shared::validate::text_validate;
use crate::authz::{OpContext, Principal};
use crate::entity::provider;
use crate::error::{AppError, AppResult, ErrorCode};
use crate::plugins::registry::ActivePlugin;
use crate::plugins::{
    Instance, InstanceSpec, InstanceState, PluginError, PluginHost, ProviderError, WorkloadHealth,
};

/// An instance to create. Provisioning is idempotent on `instance_key`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceCreate {
    /// Chosen by the caller: 1 to 63 lowercase letters, digits or `-`, starting with a letter
    /// and not ending with `-`.
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")]
    pub instance_key: String,
    /// One of the provider's regions.
    #[schema(min_length = 1, max_length = 63)]
    pub region: String,
    /// What to run: an image reference or a command line, as the provider understands it.
    #[schema(min_length = 1, max_length = 1024)]
    pub artifact: String,
    /// The port the workload listens on.
    #[schema(minimum = 1)]
    pub port: u16,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// What the workload is given; default: the operator's default service size.
    pub size: Option<ServiceSize>,
}

/// An instance's state, as its provider reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderInstanceState {
    Pending,
    Running,
    Stopping,
    Stopped,
    Failed,
}

/// What a provider's own checks of a workload say: `unchecked` where it does not check
/// workloads near them (only a host agent does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderInstanceHealth {
    Unchecked,
    Pending,
    Healthy,
    Unhealthy,
}

/// An instance as the provider reports it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InstanceView {
    pub instance_key: String,
    /// The provider's own id for it.
    pub provider_id: String,
    pub region: String,
    pub state: ProviderInstanceState,
    /// Where the workload answers (`host:port`), once known.
    pub address: Option<String>,
    pub health: ProviderInstanceHealth,
    /// The machine type the provider chose for the instance's size (`e2-small`,
    /// `t3.micro`); absent where there is no such choice (a host agent's workload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_type: Option<String>,
}

impl From<Instance> for InstanceView {
    fn from(i: Instance) -> Self {
        Self {
            state: match i.state {
                InstanceState::Pending => ProviderInstanceState::Pending,
                InstanceState::Running => ProviderInstanceState::Running,
                InstanceState::Stopping => ProviderInstanceState::Stopping,
                InstanceState::Stopped => ProviderInstanceState::Stopped,
                InstanceState::Failed => ProviderInstanceState::Failed,
            },
            health: match i.health {
                WorkloadHealth::Unchecked => ProviderInstanceHealth::Unchecked,
                WorkloadHealth::Pending => ProviderInstanceHealth::Pending,
                WorkloadHealth::Healthy => ProviderInstanceHealth::Healthy,
                WorkloadHealth::Unhealthy => ProviderInstanceHealth::Unhealthy,
            },
            instance_key: i.instance_key,
            provider_id: i.provider_id,
            region: i.region,
            address: i.address,
            machine_type: i.machine_type,
        }
    }
}

/// The HTTP answer for a failed plugin call.
pub(crate) fn plugin_error_to_api(provider: &str, err: PluginError) -> AppError {
    match err {
        PluginError::Provider(error) => match error {
            ProviderError::Unauthorized(m) => AppError::new(
                ErrorCode::ProviderUnauthorized,
                format!("provider `{provider}` refused the plugin's credentials: {m}"),
            ),
            ProviderError::Forbidden(m) => AppError::new(
                ErrorCode::ProviderForbidden,
                format!("provider `{provider}` refused this operation to the plugin: {m}"),
            ),
            ProviderError::Misconfigured(m) => AppError::new(
                ErrorCode::ProviderMisconfigured,
                format!("provider `{provider}`'s configuration or secrets are unusable: {m}"),
            ),
            ProviderError::AccountSuspended(m) => AppError::new(
                ErrorCode::ProviderAccountSuspended,
                format!("the account of provider `{provider}` is suspended: {m}"),
            ),
            ProviderError::RateLimited(limit) => AppError::new(
                ErrorCode::ProviderRateLimited,
                format!("provider `{provider}` is rate limiting: {}", limit.message),
            )
            .retry_after(limit.retry_after_secs.max(1).into()),
            ProviderError::QuotaExceeded(m) => AppError::new(
                ErrorCode::ProviderQuotaExceeded,
                format!("provider `{provider}`: quota or capacity reached: {m}"),
            ),
            ProviderError::NotFound(m) => AppError::new(
                ErrorCode::InstanceNotFound,
                format!("provider `{provider}` has no such instance: {m}"),
            ),
            ProviderError::InvalidSpec(m) => AppError::new(
                ErrorCode::InvalidSpec,
                format!("provider `{provider}` cannot do this as given: {m}"),
            ),
            ProviderError::Unavailable(m) => AppError::new(
                ErrorCode::ProviderUnavailable,
                format!("provider `{provider}` is unavailable: {m}"),
            )
            .retry_after(5),
            ProviderError::Internal(m) => AppError::new(
                ErrorCode::ProviderError,
                format!("provider `{provider}` answered unexpectedly: {m}"),
            ),
        },
        PluginError::Timeout(_) => AppError::new(
            ErrorCode::ProviderTimeout,
            format!("provider `{provider}`: {err}"),
        ),
        other => AppError::new(
            ErrorCode::PluginFailed,
            format!("provider `{provider}`: {other}"),
        ),
    }
}

fn instance_key_validate(key: &str) -> AppResult<String> {
    slug_validate("instance_key", key)
}

impl App {
    /// Runs one plugin call of provider `name`: refused when it is disabled, not serving or
    /// its breaker is open, or, for `new_work`, drained; its outcome feeds the breaker.
    pub(crate) async fn provider_call<R>(
        &self,
        name: &str,
        new_work: bool,
        call: impl AsyncFnOnce(&PluginHost, Arc<ActivePlugin>) -> Result<R, PluginError>,
    ) -> AppResult<(provider::Model, R)> {
        let row = provider::Entity::find_by_id(name.to_owned())
            .one(&self.db)
            .await?
            .ok_or_else(|| AppError::not_found("provider"))?;
        if !row.enabled {
            return Err(AppError::new(
                ErrorCode::ProviderDisabled,
                format!("provider `{name}` is disabled"),
            ));
        }
        if new_work && row.drained {
            return Err(AppError::new(
                ErrorCode::ProviderDrained,
                format!("provider `{name}` is drained: it takes no new instances"),
            ));
        }
        if row.plugin_digest.is_none() {
            return Err(AppError::new(
                ErrorCode::ProviderNotServing,
                format!("provider `{name}` has no plugin activated: it takes no calls"),
            ));
        }
        self.health.call_check(&row)?;
        let active = self.provider_serving(&row).await?.ok_or_else(|| {
            AppError::new(
                ErrorCode::ProviderNotServing,
                format!("provider `{name}`'s plugin is not loaded on this server"),
            )
        })?;
        let result = call(&self.providers.host, active.clone()).await;
        self.provider_health_record(&row, &active, call_signal(&result), false)
            .await;
        match result {
            Ok(value) => Ok((row, value)),
            Err(err) => Err(plugin_error_to_api(name, err)),
        }
    }

    pub async fn provider_instance_create(
        &self,
        ctx: &OpContext,
        name: &str,
        create: InstanceCreate,
    ) -> AppResult<InstanceView> {
        ctx.principal.require_admin()?;
        let spec = InstanceSpec {
            instance_key: instance_key_validate(&create.instance_key)?,
            region: text_validate("region", &create.region, 63)?,
            artifact: text_validate("artifact", &create.artifact, 1024)?,
            port: match create.port {
                0 => return Err(AppError::invalid("`port` must be between 1 and 65535")),
                port => port,
            },
            env: create.env.into_iter().collect(),
            labels: create.labels.into_iter().collect(),
            health_check: None,
            source: None,
            size: self
                .settings
                .service_sizes
                .check(create.size.unwrap_or(self.settings.service_sizes.default))?
                .to_contract(),
        };
        let (_, instance) = self
            .provider_call(name, true, async move |host, active| {
                // The plugin's regions (from its `info`, once per loaded version and settings):
                // a region it does not offer is the caller's mistake, answered before any call
                // to the provider's API.
                let info = active
                    .info
                    .get_or_try_init(|| host.plugin_info(&active.plugin, &active.env))
                    .await?;
                if !info.regions.contains(&spec.region) {
                    return Err(PluginError::Provider(ProviderError::InvalidSpec(format!(
                        "region `{}` is not one of the plugin's regions: {}",
                        spec.region,
                        info.regions.join(", ")
                    ))));
                }
                host.plugin_provision(&active.plugin, &active.env, spec)
                    .await
            })
            .await?;
        tracing::info!(provider = name, instance = %instance.instance_key, provider_id = %instance.provider_id, "instance provisioned");
        Ok(instance.into())
    }

    pub async fn provider_instance_view(
        &self,
        principal: &Principal,
        name: &str,
        key: &str,
    ) -> AppResult<InstanceView> {
        principal.require_admin()?;
        let key = instance_key_validate(key)?;
        let (_, instance) = self
            .provider_call(name, false, async move |host, active| {
                host.plugin_describe(&active.plugin, &active.env, key).await
            })
            .await?;
        Ok(instance.into())
    }

    pub async fn provider_instance_list(
        &self,
        principal: &Principal,
        name: &str,
    ) -> AppResult<Page<InstanceView>> {
        principal.require_admin()?;
        let (_, instances) = self
            .provider_call(name, false, async move |host, active| {
                host.plugin_list(&active.plugin, &active.env).await
            })
            .await?;
        Ok(Page {
            items: instances.into_iter().map(InstanceView::from).collect(),
            next_cursor: None,
        })
    }

    pub async fn provider_instance_delete(
        &self,
        ctx: &OpContext,
        name: &str,
        key: &str,
    ) -> AppResult<()> {
        ctx.principal.require_admin()?;
        let key = instance_key_validate(key)?;
        self.provider_call(name, false, async move |host, active| {
            host.plugin_deprovision(&active.plugin, &active.env, key)
                .await
        })
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plugins::RateLimit;

    /// Each typed error of the contract, and each way a call can fail in the host, has one
    /// answer. (Against a simulator, the fatal ones are seen only by whichever call meets
    /// them first: a background probe opens the breaker as often as an operator's call.)
    #[test]
    fn every_plugin_failure_has_its_answer() {
        let cases = [
            (
                PluginError::Provider(ProviderError::Unauthorized("bad signature".into())),
                502,
                ErrorCode::ProviderUnauthorized,
                None,
            ),
            (
                PluginError::Provider(ProviderError::Forbidden("bucket x".into())),
                502,
                ErrorCode::ProviderForbidden,
                None,
            ),
            (
                PluginError::Provider(ProviderError::Misconfigured("no region".into())),
                502,
                ErrorCode::ProviderMisconfigured,
                None,
            ),
            (
                PluginError::Provider(ProviderError::AccountSuspended("Blocked".into())),
                502,
                ErrorCode::ProviderAccountSuspended,
                None,
            ),
            (
                PluginError::Provider(ProviderError::RateLimited(RateLimit {
                    retry_after_secs: 7,
                    message: "slow down".into(),
                })),
                503,
                ErrorCode::ProviderRateLimited,
                Some(7),
            ),
            (
                PluginError::Provider(ProviderError::RateLimited(RateLimit {
                    retry_after_secs: 0,
                    message: "slow down".into(),
                })),
                503,
                ErrorCode::ProviderRateLimited,
                Some(1),
            ),
            (
                PluginError::Provider(ProviderError::QuotaExceeded("cpus".into())),
                409,
                ErrorCode::ProviderQuotaExceeded,
                None,
            ),
            (
                PluginError::Provider(ProviderError::NotFound("i-1".into())),
                404,
                ErrorCode::InstanceNotFound,
                None,
            ),
            (
                PluginError::Provider(ProviderError::InvalidSpec("port".into())),
                422,
                ErrorCode::InvalidSpec,
                None,
            ),
            (
                PluginError::Provider(ProviderError::Unavailable("503".into())),
                503,
                ErrorCode::ProviderUnavailable,
                Some(5),
            ),
            (
                PluginError::Provider(ProviderError::Internal("odd".into())),
                502,
                ErrorCode::ProviderError,
                None,
            ),
            (
                PluginError::Timeout(Duration::from_secs(30)),
                504,
                ErrorCode::ProviderTimeout,
                None,
            ),
            (
                PluginError::Trap("unreachable".into()),
                502,
                ErrorCode::PluginFailed,
                None,
            ),
        ];
        for (err, status, code, retry_after) in cases {
            let shown = format!("{err:?}");
            let answer = plugin_error_to_api("aws", err);
            let answered = crate::http::problem::status_of(answer.kind);
            assert_eq!(answered.as_u16(), status, "{shown}");
            assert_eq!(answer.code, code, "{shown}");
            assert_eq!(answer.retry_after_secs, retry_after, "{shown}");
            assert!(answer.detail.contains("`aws`"), "{}", answer.detail);
        }
    }
}
