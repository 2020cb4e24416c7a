//! Sea-ORM entities: one module per table, mirroring `bulkhead-migrations`. Only data shapes
//! live here; what the rows mean is decided in [`crate::app`].

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
pub mod signing_key;
pub mod terms_acceptance;
pub mod terms_version;
pub mod user;
