//! Schemas of answers that no typed struct builds: the events of the event streams, and the
//! Caddy configuration of the routing table. They exist for the OpenAPI document only.
//!
//! A `text/event-stream` answer is described as one of its events: an object of the event's
//! fields `id`, `event` and `data`, whose `data` is a string of JSON with the schema that
//! `contentSchema` names (JSON Schema 2020-12), so a generated client knows what each kind of
//! event carries. It is the shape of the item schema of OpenAPI 3.2's sequential media types,
//! in the document's 3.1.

#![allow(dead_code)] // Schemas only: no value of the Caddy types is ever made.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::app::deploys::events::{DeploymentEventKind, DeploymentEventView};
use crate::app::deploys::logs::LogPageView;
use crate::app::routing::RevisionChanges;
use bulkhead_routing::SignedSnapshotDoc;

/// A `data` field: a string of JSON that `schema` describes.
fn json_data(schema: RefOr<Schema>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some("The event's payload, as JSON"))
        .content_media_type("application/json")
        .content_schema(Some(schema))
}

fn named<T: ToSchema>() -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(T::name()))
}

/// An event of kind `event` (a schema of its name), numbered as `id` says, carrying `data`.
fn stream_event(event: RefOr<Schema>, id: &str, data: RefOr<Schema>) -> Schema {
    ObjectBuilder::new()
        .property(
            "id",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(id)),
        )
        .property("event", event)
        .property("data", json_data(data))
        .required("id")
        .required("event")
        .required("data")
        .into()
}

fn one_name(name: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([name]))
        .into()
}

/// An event of a deployment's stream: `event` is the event's kind and `data` the event.
pub struct DeploymentStreamEvent;

impl PartialSchema for DeploymentStreamEvent {
    fn schema() -> RefOr<Schema> {
        let mut schema = stream_event(
            named::<DeploymentEventKind>(),
            "The event's `seq`: send the last one seen as `Last-Event-ID` to resume",
            named::<DeploymentEventView>(),
        );
        if let Schema::Object(object) = &mut schema {
            object.description = Some(
                "An event of a deployment's stream (Server-Sent Events): `event` is its kind, \
                 `data` the event as JSON"
                    .into(),
            );
        }
        RefOr::T(schema)
    }
}

impl ToSchema for DeploymentStreamEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("DeploymentStreamEvent")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            DeploymentEventKind::name().into(),
            DeploymentEventKind::schema(),
        ));
        schemas.push((
            DeploymentEventView::name().into(),
            DeploymentEventView::schema(),
        ));
        DeploymentEventView::schemas(schemas);
    }
}

/// An event of a service's log stream: `logs`, a page of lines (and the instances left out).
pub struct LogStreamEvent;

impl PartialSchema for LogStreamEvent {
    fn schema() -> RefOr<Schema> {
        let mut schema = stream_event(
            one_name("logs"),
            "The page's `next_cursor`: send the last one seen as `Last-Event-ID` to resume",
            named::<LogPageView>(),
        );
        if let Schema::Object(object) = &mut schema {
            object.description = Some(
                "An event of a service's log stream (Server-Sent Events): `logs`, whose `data` \
                 is a page of lines as JSON, sent when there are new lines or the instances \
                 left out change"
                    .into(),
            );
        }
        RefOr::T(schema)
    }
}

impl ToSchema for LogStreamEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("LogStreamEvent")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((LogPageView::name().into(), LogPageView::schema()));
        LogPageView::schemas(schemas);
    }
}

/// An event of the routing table's stream: the current table (`snapshot`, then
/// `end-of-snapshot`), then each new revision's changes (`change`).
pub struct RoutingStreamEvent;

impl PartialSchema for RoutingStreamEvent {
    fn schema() -> RefOr<Schema> {
        let end_of_snapshot = ObjectBuilder::new()
            .property(
                "revision",
                ObjectBuilder::new().schema_type(Type::Integer).format(Some(
                    utoipa::openapi::schema::SchemaFormat::KnownFormat(
                        utoipa::openapi::schema::KnownFormat::Int64,
                    ),
                )),
            )
            .required("revision")
            .into();
        let one_of = OneOfBuilder::new()
            .description(Some(
                "An event of the routing table's stream (Server-Sent Events): the table \
                 (`snapshot`, the signed snapshot document, then `end-of-snapshot`), then each \
                 new revision's changes (`change`)",
            ))
            .item(stream_event(
                one_name("snapshot"),
                "The table's revision",
                named::<SignedSnapshotDoc>(),
            ))
            .item(stream_event(
                one_name("end-of-snapshot"),
                "The table's revision",
                end_of_snapshot,
            ))
            .item(stream_event(
                one_name("change"),
                "The revision: send the last one seen as `Last-Event-ID` to resume",
                named::<RevisionChanges>(),
            ));
        RefOr::T(Schema::OneOf(one_of.build()))
    }
}

impl ToSchema for RoutingStreamEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("RoutingStreamEvent")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            SignedSnapshotDoc::name().into(),
            SignedSnapshotDoc::schema(),
        ));
        SignedSnapshotDoc::schemas(schemas);
        schemas.push((RevisionChanges::name().into(), RevisionChanges::schema()));
        RevisionChanges::schemas(schemas);
    }
}

/// A Caddy (2.6 and later) JSON configuration that serves the routing table
/// (<https://caddyserver.com/docs/json/>): one HTTP server, `bulkhead`, with a route per domain
/// (a reverse proxy round-robin over its upstreams, or 503 when it has none) and a last route
/// answering 404 for unknown hosts. Load it with `caddy run --config` or `POST /load`.
#[derive(Serialize, ToSchema)]
pub struct CaddyConfig {
    pub apps: CaddyApps,
}

/// Caddy's apps: only `http`.
#[derive(Serialize, ToSchema)]
pub struct CaddyApps {
    pub http: CaddyHttpApp,
}

/// Caddy's `http` app.
#[derive(Serialize, ToSchema)]
pub struct CaddyHttpApp {
    pub servers: CaddyServers,
}

/// The servers of the `http` app: only `bulkhead`.
#[derive(Serialize, ToSchema)]
pub struct CaddyServers {
    pub bulkhead: CaddyServer,
}

/// The server of the routes.
#[derive(Serialize, ToSchema)]
pub struct CaddyServer {
    /// The `listen` of the request (default `:80`).
    pub listen: Vec<String>,
    /// `{"@id": "bulkhead-r<revision>", "disable": true}`: Caddy does not manage certificates
    /// here, and the `@id` tells which revision is loaded (`GET /id/bulkhead-r<revision>`).
    #[schema(value_type = Object)]
    pub automatic_https: serde_json::Value,
    /// One route per domain of the table, in its order, then the route of unknown hosts.
    pub routes: Vec<CaddyRoute>,
}

/// A Caddy route (<https://caddyserver.com/docs/json/apps/http/servers/routes/>).
#[derive(Serialize, ToSchema)]
pub struct CaddyRoute {
    /// `[{"host": [domain]}]`; absent on the last route, which matches every request.
    #[serde(rename = "match")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub matchers: Option<Vec<serde_json::Value>>,
    /// One handler: `reverse_proxy` (upstreams, load balancing, retries, passive health
    /// checks) or `static_response` (503 or 404).
    #[schema(value_type = Vec<Object>)]
    pub handle: Vec<serde_json::Value>,
    pub terminal: bool,
}
