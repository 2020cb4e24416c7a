//! The conventions of the OpenAPI document that no handler states itself, applied in one place
//! once every route is merged: the bearer scheme, the problem responses every operation shares,
//! conditional GETs, `Idempotency-Key`, and the rewrites that make utoipa's output say what the
//! server does (pages whose items name their schema, flattened options, problem media types).

use axum::http::Method;
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as OpenApiDoc, PathItem, RefOr, ResponseBuilder};

use super::{middleware, plugins};
use crate::app::shared::limits::{Limit, TenantLimits};

/// Applies every convention to `doc`, the document of all routes.
pub(super) fn conventions_apply(doc: &mut OpenApiDoc) {
    if let Some(components) = doc.components.as_mut() {
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A JWT access token from /v1/auth/login, or an API token",
                    ))
                    .build(),
            ),
        );
    }
    for (path, item) in doc.paths.paths.iter_mut() {
        operations_annotate(path, item);
    }
    flattened_options_expand(doc);
    page_items_by_ref(doc);
    tagged_variants_close(doc);
}

/// Internally tagged enums that deny unknown fields (`#[serde(tag = "…",
/// deny_unknown_fields)]`): utoipa leaves `additionalProperties: false` off their variants'
/// objects, so the document would allow fields the server refuses.
const CLOSED_TAGGED_ENUMS: &[&str] = &["ServiceSource"];

fn tagged_variants_close(doc: &mut OpenApiDoc) {
    use utoipa::openapi::schema::{AdditionalProperties, Schema};
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    for name in CLOSED_TAGGED_ENUMS {
        let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(*name) else {
            panic!("{name} is not a oneOf among the document's schemas");
        };
        for variant in one_of.items.iter_mut() {
            if let RefOr::T(Schema::Object(object)) = variant {
                object.additional_properties =
                    Some(Box::new(AdditionalProperties::FreeForm(false)));
            }
        }
    }
}

/// utoipa inlines the item schema of each `Page<T>`, so generated clients get a type per page
/// (`PageProjectViewItemsItem`) instead of the named one: each `Page_T` whose items are `T`'s
/// schema refers to `T` instead.
fn page_items_by_ref(doc: &mut OpenApiDoc) {
    use utoipa::openapi::schema::{ArrayItems, Schema};
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let known = components.schemas.clone();
    for (name, schema) in components.schemas.iter_mut() {
        let Some(item_name) = name.strip_prefix("Page_") else {
            continue;
        };
        let Some(named) = known.get(item_name) else {
            continue;
        };
        let RefOr::T(Schema::Object(page)) = schema else {
            continue;
        };
        if let Some(RefOr::T(Schema::Array(items))) = page.properties.get_mut("items")
            && let ArrayItems::RefOrSchema(item) = &mut items.items
            && **item == *named
        {
            **item = RefOr::Ref(utoipa::openapi::Ref::from_schema_name(item_name));
        }
    }
}

fn operations_annotate(path: &str, item: &mut PathItem) {
    let operations = [
        (Method::GET, item.get.as_mut()),
        (Method::POST, item.post.as_mut()),
        (Method::PUT, item.put.as_mut()),
        (Method::PATCH, item.patch.as_mut()),
        (Method::DELETE, item.delete.as_mut()),
    ];
    for (method, operation) in operations {
        let Some(operation) = operation else { continue };
        let public = operation.security.as_ref().is_some_and(|reqs| {
            reqs.iter()
                .all(|req| *req == SecurityRequirement::default())
        });
        let lists = operation.parameters.iter().flatten().any(|p| {
            matches!(p, RefOr::T(p) if p.name == "cursor" && p.parameter_in == ParameterIn::Query)
        });
        let malformed = if lists {
            "Malformed request, or a `cursor` that this list did not return (`invalid_cursor`)"
        } else {
            "Malformed request"
        };
        let mut errors: Vec<(u16, &str)> = vec![(400, malformed), (500, "Internal error")];
        if public {
            operation.security = None;
        } else {
            operation.security = Some(vec![SecurityRequirement::new(
                "bearer",
                Vec::<String>::new(),
            )]);
            errors.extend([
                (401, "Missing or invalid credential"),
                (403, "Role or token scope insufficient"),
            ]);
        }
        if path.contains('{') || !public {
            errors.push((404, "Not found, or not visible to the caller"));
        }
        if method == Method::DELETE {
            errors.push((409, "Conflict with existing state"));
        }
        if matches!(method, Method::POST | Method::PATCH | Method::PUT) {
            errors.extend([
                (409, "Conflict with existing state"),
                (413, "Body too large"),
                (415, "Not JSON"),
                (422, "Invalid values"),
            ]);
        }
        // A handler that honours `If-Match` declares it; its description is the same everywhere.
        if header_parameter_declared(operation, "If-Match") {
            errors.push((412, "If-Match does not match the current ETag"));
            header_parameter_ensure(
                operation,
                "If-Match",
                "The ETag the change is based on: 412 when the resource changed since",
                None,
            );
        }
        if method == Method::POST && !public && path != plugins::UPLOAD_PATH {
            header_parameter_ensure(
                operation,
                middleware::IDEMPOTENCY_KEY.as_str(),
                "Makes a retry safe: the same key and body replay the stored response (with \
                 `Idempotent-Replayed: true`), the same key with another body is 422, the same \
                 key while the first request runs is 409",
                Some(255),
            );
        }
        header_parameters_not_null(operation);
        if method == Method::GET {
            conditional_get_document(operation);
        }
        if path.contains('{') {
            // Path values are validated too (names, keys).
            errors.push((422, "Invalid values"));
        }
        errors.push((408, "Request timed out"));
        if !matches!(path, "/healthz" | "/metrics") {
            // Whatever reads the database: this replica cannot reach it (see `Retry-After`;
            // another replica may answer).
            errors.push((503, "The database is unreachable from this replica"));
        }
        // Every response has a description (OpenAPI requires one): the status's reason phrase
        // where the operation gives none.
        for (status, response) in operation.responses.responses.iter_mut() {
            if let RefOr::T(response) = response {
                problem_content_type_fix(response);
            }
            if let RefOr::T(response) = response
                && response.description.is_empty()
            {
                response.description = status
                    .parse::<u16>()
                    .ok()
                    .and_then(|code| http::StatusCode::from_u16(code).ok())
                    .and_then(|code| code.canonical_reason())
                    .unwrap_or("Response")
                    .to_owned();
            }
        }
        for (status, description) in errors {
            let status = status.to_string();
            operation
                .responses
                .responses
                .entry(status)
                .or_insert_with(|| {
                    RefOr::T(
                        ResponseBuilder::new()
                            .description(description)
                            .content(
                                "application/problem+json",
                                ContentBuilder::new()
                                    .schema(Some(RefOr::Ref(
                                        utoipa::openapi::Ref::from_schema_name("Problem"),
                                    )))
                                    .build(),
                            )
                            .build(),
                    )
                });
        }
        if method == Method::POST {
            capped_create_document(path, operation);
        }
    }
}

/// The creates that a tenant limit bounds, with the limits each checks.
const CAPPED_CREATES: &[(&str, &[Limit])] = &[
    ("/v1/projects", &[Limit::ProjectsPerUser]),
    ("/v1/tokens", &[Limit::TokensPerUser]),
    (
        "/v1/projects/{project_id}/environments",
        &[Limit::EnvironmentsPerProject],
    ),
    (
        "/v1/projects/{project_id}/services",
        &[Limit::ServicesPerProject],
    ),
    (
        "/v1/projects/{project_id}/domains",
        &[Limit::DomainsPerProject],
    ),
    (
        "/v1/projects/{project_id}/git-installations",
        &[Limit::GitInstallationsPerProject],
    ),
    (
        "/v1/projects/{project_id}/webhooks",
        &[Limit::WebhookEndpointsPerProject],
    ),
    (
        "/v1/projects/{project_id}/invitations",
        &[Limit::MembersPerProject, Limit::InvitationsPerProject],
    ),
    (
        "/v1/me/invitations/{invitation_id}/accept",
        &[Limit::MembersPerProject],
    ),
];

/// Says in the 409 of a capped create which limits refuse it, with their defaults.
fn capped_create_document(path: &str, operation: &mut utoipa::openapi::path::Operation) {
    let Some((_, limits)) = CAPPED_CREATES.iter().find(|(capped, _)| *capped == path) else {
        return;
    };
    let defaults = TenantLimits::default();
    let named: Vec<String> = limits
        .iter()
        .map(|limit| format!("`{}` (default {})", limit.name(), defaults.get(*limit)))
        .collect();
    if let Some(RefOr::T(response)) = operation.responses.responses.get_mut("409") {
        response.description = format!(
            "{}; or `limit_reached`: one more would pass the tenant limit {} (operators set \
             it with `--limit NAME=N`)",
            response.description,
            named.join(" or ")
        );
    }
}

/// What [`middleware::conditional_get`] does, in the document: a page of a list carries a weak
/// `ETag` (see `Page`'s response), and every GET whose answer has an `ETag` takes
/// `If-None-Match` and may answer 304.
fn conditional_get_document(operation: &mut utoipa::openapi::path::Operation) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let Some(RefOr::T(ok)) = operation.responses.responses.get_mut("200") else {
        return;
    };
    let is_page = ok.content.get("application/json").is_some_and(|content| {
        matches!(content, RefOr::T(content)
            if matches!(&content.schema, Some(RefOr::Ref(r)) if r.ref_location.starts_with("#/components/schemas/Page_")))
    });
    if is_page && !ok.headers.contains_key("ETag") {
        ok.headers.insert(
            "ETag".to_owned(),
            RefOr::T(
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                    .description(Some(
                        "A weak tag of this page: send it as `If-None-Match` to get 304 while \
                         it is unchanged",
                    ))
                    .build(),
            ),
        );
    }
    if !ok.headers.contains_key("ETag") {
        return;
    }
    header_parameter_ensure(
        operation,
        "If-None-Match",
        "A tag of an earlier answer: 304, without a body, while the answer would be the same",
        None,
    );
    operation
        .responses
        .responses
        .entry("304".to_owned())
        .or_insert_with(|| {
            RefOr::T(
                ResponseBuilder::new()
                    .description("Not modified: the `If-None-Match` tag is current (no body)")
                    .header(
                        "ETag",
                        HeaderBuilder::new()
                            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                            .build(),
                    )
                    .build(),
            )
        });
}

/// A problem is answered as `application/problem+json` (see `AppError`'s response): a handler
/// that documents a `Problem` body as plain JSON is corrected here, in one place.
fn problem_content_type_fix(response: &mut utoipa::openapi::Response) {
    let problem = RefOr::Ref(utoipa::openapi::Ref::from_schema_name("Problem"));
    let is_problem = response.content.get("application/json").is_some_and(
        |content| matches!(content, RefOr::T(content) if content.schema.as_ref() == Some(&problem)),
    );
    if is_problem && let Some(content) = response.content.shift_remove("application/json") {
        response
            .content
            .insert("application/problem+json".to_owned(), content);
    }
}

/// A header is present or absent, never `null`: an optional header parameter declared as
/// `Option<T>` is documented as `T` (it is `required: false` already).
fn header_parameters_not_null(operation: &mut utoipa::openapi::path::Operation) {
    use utoipa::openapi::schema::{Schema, SchemaType, Type};
    for parameter in operation.parameters.iter_mut().flatten() {
        let RefOr::T(parameter) = parameter else {
            continue;
        };
        if parameter.parameter_in != ParameterIn::Header {
            continue;
        }
        if let Some(RefOr::T(Schema::Object(schema))) = parameter.schema.as_mut()
            && let SchemaType::Array(types) = &schema.schema_type
            && let [only] = types
                .iter()
                .filter(|t| **t != Type::Null)
                .collect::<Vec<_>>()
                .as_slice()
        {
            schema.schema_type = SchemaType::Type((*only).clone());
        }
    }
}

/// Whether `operation` declares the header parameter `name`.
fn header_parameter_declared(operation: &utoipa::openapi::path::Operation, name: &str) -> bool {
    operation
        .parameters
        .iter()
        .flatten()
        .any(|p| is_header_parameter(p, name))
}

fn is_header_parameter(parameter: &RefOr<utoipa::openapi::path::Parameter>, name: &str) -> bool {
    matches!(parameter, RefOr::T(p) if p.name.eq_ignore_ascii_case(name) && p.parameter_in == ParameterIn::Header)
}

/// Adds an optional string header parameter `name` to `operation`, or describes the one it
/// declares.
fn header_parameter_ensure(
    operation: &mut utoipa::openapi::path::Operation,
    name: &str,
    description: &str,
    max_length: Option<usize>,
) {
    use utoipa::openapi::path::ParameterBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    parameters.retain(|p| !is_header_parameter(p, name));
    let mut schema = ObjectBuilder::new().schema_type(Type::String);
    if let Some(max) = max_length {
        schema = schema.min_length(Some(1)).max_length(Some(max));
    }
    parameters.push(RefOr::T(
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(utoipa::openapi::Required::False)
            .description(Some(description))
            .schema(Some(schema))
            .build(),
    ));
}

/// A struct flattened into another as an `Option` (`#[serde(flatten)] details:
/// Option<ProviderDetails>`) has its fields present or absent together. utoipa describes it as
/// `allOf: [oneOf: [$ref, null], {…}]`, which says the fields are always there (the object is
/// not null, so it must match the `$ref`): an answer without them does not match its own schema,
/// and generated clients fail to decode it. Each such `allOf` becomes one object whose
/// flattened fields are optional.
fn flattened_options_expand(doc: &mut OpenApiDoc) {
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let known = components.schemas.clone();
    for schema in components.schemas.values_mut() {
        flattened_option_rewrite(schema, &known);
    }
}

fn flattened_option_rewrite(
    schema: &mut RefOr<utoipa::openapi::schema::Schema>,
    known: &std::collections::BTreeMap<String, RefOr<utoipa::openapi::schema::Schema>>,
) {
    use utoipa::openapi::schema::{ArrayItems, Object, Schema, SchemaType, Type};
    let flattened_ref = |member: &RefOr<Schema>| match member {
        RefOr::T(Schema::OneOf(one_of)) => match one_of.items.as_slice() {
            [RefOr::Ref(reference), RefOr::T(Schema::Object(null))]
                if null.schema_type == SchemaType::Type(Type::Null) =>
            {
                Some(reference.ref_location.clone())
            }
            _ => None,
        },
        _ => None,
    };
    if let RefOr::T(Schema::AllOf(all_of)) = schema {
        let flattened: Vec<String> = all_of.items.iter().filter_map(flattened_ref).collect();
        let objects: Vec<&Object> = all_of
            .items
            .iter()
            .filter_map(|m| match m {
                RefOr::T(Schema::Object(o)) => Some(o),
                _ => None,
            })
            .collect();
        if flattened.len() == 1 && objects.len() + 1 == all_of.items.len() {
            let name = flattened[0].trim_start_matches("#/components/schemas/");
            if let Some(RefOr::T(Schema::Object(details))) = known.get(name) {
                let mut merged = Object::with_type(Type::Object);
                merged.description = all_of.description.clone();
                merged.properties = details.properties.clone();
                for object in objects {
                    merged.properties.extend(object.properties.clone());
                    merged.required.extend(object.required.iter().cloned());
                }
                *schema = RefOr::T(Schema::Object(merged));
            }
        }
    }
    match schema {
        RefOr::T(Schema::Object(object)) => {
            for property in object.properties.values_mut() {
                flattened_option_rewrite(property, known);
            }
        }
        RefOr::T(Schema::Array(array)) => {
            if let ArrayItems::RefOrSchema(items) = &mut array.items {
                flattened_option_rewrite(items, known);
            }
        }
        _ => {}
    }
}
