//! Sea-ORM entities: one module per table, mirroring `bulkhead-migrations`. Only data shapes
//! live here; what the rows mean is decided in [`crate::app`].
//!
//! Columns are typed: ids with [`crate::ids`] (`ProjectId`, `ServiceId`, …) and lifecycle
//! states with enums stored as the strings the API shows (`DeploymentState`, …), so that a
//! swapped argument or an unknown state does not compile.
//!
//! Naming rules of data access, for the queries of each domain (`app/<domain>/`), written
//! once here:
//! - resource first, then verb: `instance_transition`, `deployment_find`, `due_head` in
//!   `deploys::queue` (the module names the resource);
//! - a function takes the connection it runs on (`db: &impl ConnectionTrait`), so that the
//!   caller decides whether it runs in a transaction; one that needs a transaction (it locks,
//!   or must commit with its caller's writes) takes `txn: &DatabaseTransaction` or ends in
//!   `_in` (`project_authorize_in`);
//! - a find answers `AppResult<Model>` with 404 for a row that is missing or another
//!   project's (`projects::scoped::scoped_find`), never `Option` to be checked by each caller.

pub mod api_token;
pub mod audit_event;
pub mod data_key;
pub mod deploy_control;
pub mod deployment;
pub mod deployment_event;
pub mod domain;
pub mod edge;
pub mod environment;
pub mod evacuation;
pub mod forge_status;
pub mod git_delivery;
pub mod git_installation;
pub mod idempotency_record;
pub mod instance;
pub mod plugin_binary;
pub mod plugin_blob;
pub mod project;
pub mod project_invitation;
pub mod project_member;
pub mod provider;
pub mod provider_activation;
pub mod provider_event;
pub mod refresh_token;
pub mod route;
pub mod routing_key;
pub mod routing_revision;
pub mod service;
pub mod sign_in_address;
pub mod sign_in_provider_hold;
pub mod sign_in_state;
pub mod signing_key;
pub mod terms_acceptance;
pub mod terms_version;
pub mod user;
pub mod user_identity;
pub mod webhook_endpoint;
pub mod webhook_message;

/// `Display` for enums stored as strings: the name stored.
macro_rules! display_as_stored {
    ($($enum:ty),* $(,)?) => {
        $(
            impl std::fmt::Display for $enum {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(&sea_orm::ActiveEnum::to_value(self))
                }
            }
        )*
    };
}

display_as_stored!(
    evacuation::EvacuationState,
    git_delivery::GitDeliveryState,
    provider_activation::ActivationAction,
    provider_event::ProviderEventKind,
    routing_key::RoutingKeyState,
    webhook_message::WebhookMessageState,
);

#[cfg(test)]
mod tests {
    use sea_orm::{ActiveEnum, Iterable};
    use serde::Serialize;

    /// Each variant of `E` as stored, and as the API shows it (its serde name): one name.
    fn stored_as_shown<E: ActiveEnum<Value = String> + Iterable + Serialize + std::fmt::Debug>()
    -> Vec<String> {
        E::iter()
            .map(|variant| {
                let stored = variant.to_value();
                let shown = serde_json::to_value(&variant).unwrap();
                assert_eq!(shown, stored, "{variant:?}");
                stored
            })
            .collect()
    }

    #[test]
    fn states_are_stored_as_the_api_shows_them() {
        assert_eq!(
            stored_as_shown::<super::deployment::DeploymentState>(),
            [
                "queued",
                "placing",
                "rolling_out",
                "healthy",
                "failed",
                "cancelled",
                "superseded"
            ]
        );
        assert_eq!(
            stored_as_shown::<super::instance::InstanceState>(),
            [
                "pending",
                "provisioning",
                "starting",
                "running",
                "draining",
                "removing",
                "removed",
                "failed"
            ]
        );
        assert_eq!(
            stored_as_shown::<super::instance::InstanceHealth>(),
            ["unknown", "healthy", "unhealthy"]
        );
        assert_eq!(
            stored_as_shown::<super::evacuation::EvacuationState>(),
            ["running", "done", "cancelled"]
        );
        assert_eq!(
            stored_as_shown::<super::provider::ProviderHealth>(),
            ["healthy", "degraded", "unavailable"]
        );
        assert_eq!(
            stored_as_shown::<super::provider_event::ProviderEventKind>(),
            ["health", "activation_refused"]
        );
        assert_eq!(
            stored_as_shown::<super::provider_activation::ActivationAction>(),
            ["activate", "rollback", "bundled"]
        );
        assert_eq!(
            stored_as_shown::<super::git_delivery::GitDeliveryState>(),
            ["queued", "deployed", "ignored", "failed"]
        );
        assert_eq!(
            stored_as_shown::<super::webhook_message::WebhookMessageState>(),
            ["pending", "delivered", "failed"]
        );
        assert_eq!(
            stored_as_shown::<super::webhook_message::WebhookEventType>(),
            [
                "deployment.queued",
                "deployment.healthy",
                "deployment.failed",
                "deployment.cancelled",
                "deployment.superseded"
            ]
        );
        assert_eq!(
            stored_as_shown::<super::routing_key::RoutingKeyState>(),
            ["next", "active", "retired"]
        );
    }

    /// The names the code writes (`as_str`, `Display`) are the stored ones.
    #[test]
    fn names_written_are_the_stored_ones() {
        use super::deployment::DeploymentState;
        use super::instance::{InstanceHealth, InstanceState};
        for state in DeploymentState::iter() {
            assert_eq!(state.as_str(), state.to_value());
            assert_eq!(state.to_string(), state.to_value());
        }
        for state in InstanceState::iter() {
            assert_eq!(state.as_str(), state.to_value());
        }
        for health in InstanceHealth::iter() {
            assert_eq!(health.as_str(), health.to_value());
        }
        for health in super::provider::ProviderHealth::iter() {
            assert_eq!(health.as_str(), health.to_value());
        }
        for kind in super::webhook_message::WebhookEventType::iter() {
            assert_eq!(kind.as_str(), kind.to_value());
        }
    }

    /// A routing key's state is published as a string (an edge reads states it does not know
    /// yet); the OpenAPI document names its values with `bulkhead_routing`'s schema enum.
    #[test]
    fn routing_key_states_are_the_documented_ones() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(bulkhead_routing::RoutingKeyState::schema()).unwrap();
        let documented: Vec<String> = schema["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|value| value.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            documented,
            stored_as_shown::<super::routing_key::RoutingKeyState>()
        );
    }
}
