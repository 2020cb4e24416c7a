//! Typed ids of the resources that functions most often take together: a project, an
//! environment, a service, a deployment, an instance. Each is a UUID (v7, so ordered by
//! creation) in a type of its own, stored as the UUID it wraps and shown as it in the API, so
//! that a swapped argument (`deployment_cancel(ctx, service_id, project_id, id)`) does not
//! compile.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        $(
            $(#[$doc])*
            #[derive(
                Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
                sea_orm::DeriveValueType,
            )]
            #[serde(transparent)]
            pub struct $name(pub Uuid);

            impl $name {
                /// A new id (UUIDv7: ordered by creation time).
                pub fn new() -> Self {
                    Self(Uuid::now_v7())
                }

                /// The UUID it wraps (as the API and the database show it).
                pub const fn uuid(self) -> Uuid {
                    self.0
                }
            }

            impl Default for $name {
                fn default() -> Self {
                    Self(Uuid::nil())
                }
            }

            impl std::fmt::Display for $name {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    self.0.fmt(f)
                }
            }

            impl std::str::FromStr for $name {
                type Err = uuid::Error;

                fn from_str(text: &str) -> Result<Self, Self::Err> {
                    text.parse().map(Self)
                }
            }

            impl From<Uuid> for $name {
                fn from(id: Uuid) -> Self {
                    Self(id)
                }
            }

            impl From<$name> for Uuid {
                fn from(id: $name) -> Self {
                    id.0
                }
            }

            /// A primary key of this type is never made from a number.
            impl sea_orm::TryFromU64 for $name {
                fn try_from_u64(_: u64) -> Result<Self, sea_orm::DbErr> {
                    Err(sea_orm::DbErr::ConvertFromU64(stringify!($name)))
                }
            }
        )*
    };
}

ids! {
    /// A project's id.
    ProjectId,
    /// An environment's id.
    EnvironmentId,
    /// A service's id.
    ServiceId,
    /// A deployment's id.
    DeploymentId,
    /// A deployed instance's id.
    InstanceId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_shown_and_read_as_its_uuid() {
        let id = ProjectId::new();
        let json = serde_json::to_value(id).unwrap();
        assert_eq!(json, serde_json::json!(id.uuid().to_string()));
        assert_eq!(serde_json::from_value::<ProjectId>(json).unwrap(), id);
        assert_eq!(id.to_string().parse::<ProjectId>().unwrap(), id);
        assert!(ServiceId::new() < ServiceId::new(), "ordered by creation");
    }
}
