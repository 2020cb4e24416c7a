//! The states that views show as strings (they are stored as such), named as enums for the
//! OpenAPI document, so that generated clients get every value a field can hold and nothing
//! else. The names the code uses are the constants of each resource's module; the tests below
//! keep each enum and its constants the same list.

#![allow(dead_code)] // Schemas only: no value of these enums is ever made.

use serde::Serialize;
use utoipa::ToSchema;

/// A deployment's state: in progress (`queued`, `placing`, `rolling_out`) or finished.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentState {
    Queued,
    Placing,
    RollingOut,
    Healthy,
    Failed,
    Cancelled,
    Superseded,
}

/// The state of an instance of a deployment.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeployedInstanceState {
    Pending,
    Provisioning,
    Starting,
    Running,
    Draining,
    Removing,
    Removed,
    Failed,
}

/// The health of an instance of a deployment, from the checks of its workload.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeployedInstanceHealth {
    Unknown,
    Healthy,
    Unhealthy,
}

/// The state of an evacuation.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvacuationState {
    Running,
    Done,
    Cancelled,
}

/// A provider's state: its health, or why it takes no new work (`no_plugin`, or the
/// operator's `drained` or `disabled`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderState {
    Healthy,
    Degraded,
    Unavailable,
    NoPlugin,
    Drained,
    Disabled,
}

/// What a provider's event records.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderEventKind {
    /// Its health changed.
    Health,
    /// A new version failed its health check and was not activated.
    ActivationRefused,
}

/// How a provider came to run a plugin version.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActivationAction {
    /// An operator activated it.
    Activate,
    /// An operator rolled back to it.
    Rollback,
    /// The bundled plugin, registered at start-up.
    Bundled,
}

#[cfg(test)]
mod tests {
    use utoipa::PartialSchema;

    use super::*;
    use crate::app::deploys::deployments;
    use crate::app::deploys::evacuations;
    use crate::app::deploys::instances;
    use crate::app::providers;
    use crate::app::providers::breaker::ProviderHealth;
    use crate::app::providers::health;
    use crate::app::providers::versions;
    use crate::app::routing::keys;

    /// The values of a string enum's schema, in order.
    fn values<T: PartialSchema>() -> Vec<String> {
        let schema = serde_json::to_value(T::schema()).unwrap();
        schema["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("not an enum: {schema}"))
            .iter()
            .map(|value| value.as_str().unwrap().to_owned())
            .collect()
    }

    fn names(constants: &[&str]) -> Vec<String> {
        constants.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn each_enum_lists_the_names_the_code_uses() {
        let mut deployment = names(&deployments::IN_PROGRESS);
        deployment.extend(names(&deployments::FINISHED));
        assert_eq!(values::<DeploymentState>(), deployment);
        use instances::*;
        let instance = [
            PENDING,
            PROVISIONING,
            STARTING,
            RUNNING,
            DRAINING,
            REMOVING,
            REMOVED,
            FAILED,
        ];
        assert_eq!(values::<DeployedInstanceState>(), names(&instance));
        let health = [HEALTH_UNKNOWN, HEALTH_HEALTHY, HEALTH_UNHEALTHY];
        assert_eq!(values::<DeployedInstanceHealth>(), names(&health));
        let evacuation = [
            evacuations::RUNNING,
            evacuations::DONE,
            evacuations::CANCELLED,
        ];
        assert_eq!(values::<EvacuationState>(), names(&evacuation));
        let mut provider: Vec<String> = values::<ProviderHealth>();
        provider.extend(names(&providers::STATES_NOT_SERVING));
        assert_eq!(values::<ProviderState>(), provider);
        let event = [health::EVENT_HEALTH, versions::EVENT_ACTIVATION_REFUSED];
        assert_eq!(values::<ProviderEventKind>(), names(&event));
        use versions::{ACTIVATE, BUNDLED, ROLLBACK};
        assert_eq!(
            values::<ActivationAction>(),
            names(&[ACTIVATE, ROLLBACK, BUNDLED])
        );
        let key = [keys::NEXT, keys::ACTIVE, keys::RETIRED];
        assert_eq!(values::<bulkhead_routing::RoutingKeyState>(), names(&key));
    }
}
