//! The OpenAPI 3.0 form of the API's document, for the tools that read only 3.0 (progenitor,
//! which generates the Rust client in `openapi/rust`). utoipa emits 3.1; this module rewrites
//! the 3.1 constructs the document uses into their 3.0 equivalents, losing nothing:
//!
//! - `"type": [T, "null"]` → `"type": T, "nullable": true`;
//! - `oneOf`/`anyOf` of a `$ref` and `{"type": "null"}` → a one-item `allOf` of the `$ref`,
//!   `nullable` (3.0 ignores a `$ref`'s siblings, so they move beside the `allOf`);
//! - a `$ref` with siblings (a description) → a one-item `allOf` with those siblings;
//! - a request body of raw bytes (a media type without a schema) → a `binary` string schema;
//! - keywords 3.0 has no place for (`propertyNames`, `examples`, `contentMediaType`,
//!   `contentSchema`, `license.identifier`) → the
//!   same value under an `x-` extension, which generators ignore and readers can still see.
//!
//! Any other 3.1 construct (e.g. `const`, numeric `exclusiveMinimum`, a `oneOf` of an inline
//! schema and null) makes the conversion fail, naming it and where it
//! is, so that a newer utoipa emitting something new is noticed when the document is
//! regenerated rather than dropped silently. The test below converts the committed document
//! and turns it back: the round trip must give the original exactly.

use serde_json::{Value, json};

/// The schema keywords OpenAPI 3.0 knows (extensions `x-…` are always allowed).
const SCHEMA_KEYWORDS_30: &[&str] = &[
    "$ref",
    "title",
    "description",
    "type",
    "format",
    "nullable",
    "enum",
    "default",
    "example",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "readOnly",
    "writeOnly",
    "deprecated",
    "discriminator",
    "externalDocs",
    "xml",
];

/// 3.1 keywords with no 3.0 equivalent, kept under `x-<keyword>`.
const KEPT_AS_EXTENSIONS: &[&str] = &[
    "propertyNames",
    "examples",
    "contentMediaType",
    "contentSchema",
];

/// The version written into the converted document.
pub const OPENAPI_30_VERSION: &str = "3.0.3";

/// A construct the conversion does not know how to express in 3.0.
#[derive(Debug, thiserror::Error)]
#[error("cannot express `{keyword}` at {pointer} in OpenAPI 3.0")]
pub struct DowngradeError {
    pub keyword: String,
    pub pointer: String,
}

/// Converts an OpenAPI 3.1 document (as JSON) into its OpenAPI 3.0 form.
pub fn downgrade(mut doc: Value) -> Result<Value, DowngradeError> {
    let root = doc
        .as_object_mut()
        .ok_or_else(|| refusal("(not an object)", ""))?;
    root.insert("openapi".into(), json!(OPENAPI_30_VERSION));
    for keyword in ["webhooks", "jsonSchemaDialect"] {
        if root.contains_key(keyword) {
            return Err(refusal(keyword, ""));
        }
    }
    if let Some(license) = root
        .get_mut("info")
        .and_then(|info| info.get_mut("license"))
        .and_then(Value::as_object_mut)
        && let Some(identifier) = license.remove("identifier")
    {
        license.insert("x-identifier".into(), identifier);
    }
    if let Some(schemas) = root
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .and_then(Value::as_object_mut)
    {
        for (name, schema) in schemas.iter_mut() {
            schema_downgrade(schema, &format!("/components/schemas/{name}"))?;
        }
    }
    if let Some(paths) = root.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for (method, operation) in item.iter_mut() {
                operation_downgrade(operation, &format!("/paths/{path}/{method}"))?;
            }
        }
    }
    Ok(doc)
}

/// Converts the schemas of one operation: parameters, request body, responses and headers.
fn operation_downgrade(operation: &mut Value, pointer: &str) -> Result<(), DowngradeError> {
    if let Some(parameters) = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
    {
        for (i, parameter) in parameters.iter_mut().enumerate() {
            if let Some(schema) = parameter.get_mut("schema") {
                schema_downgrade(schema, &format!("{pointer}/parameters/{i}/schema"))?;
            }
        }
    }
    if let Some(content) = operation
        .get_mut("requestBody")
        .and_then(|body| body.get_mut("content"))
        .and_then(Value::as_object_mut)
    {
        // A body of raw bytes has no schema in 3.1; 3.0 says so with a binary string.
        for (media_type, entry) in content.iter_mut() {
            if let Some(entry) = entry.as_object_mut()
                && !entry.contains_key("schema")
                && !media_type.contains("json")
            {
                entry.insert("schema".into(), binary_schema());
            }
        }
    }
    if let Some(content) = operation
        .get_mut("requestBody")
        .and_then(|body| body.get_mut("content"))
    {
        content_downgrade(content, &format!("{pointer}/requestBody/content"))?;
    }
    if let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    {
        for (status, response) in responses.iter_mut() {
            let here = format!("{pointer}/responses/{status}");
            if let Some(content) = response.get_mut("content") {
                content_downgrade(content, &format!("{here}/content"))?;
            }
            if let Some(headers) = response.get_mut("headers").and_then(Value::as_object_mut) {
                for (name, header) in headers.iter_mut() {
                    if let Some(schema) = header.get_mut("schema") {
                        schema_downgrade(schema, &format!("{here}/headers/{name}/schema"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The 3.0 schema of a body of raw bytes.
fn binary_schema() -> Value {
    json!({ "type": "string", "format": "binary" })
}

fn content_downgrade(content: &mut Value, pointer: &str) -> Result<(), DowngradeError> {
    if let Some(content) = content.as_object_mut() {
        for (media_type, entry) in content.iter_mut() {
            if let Some(schema) = entry.get_mut("schema") {
                schema_downgrade(schema, &format!("{pointer}/{media_type}/schema"))?;
            }
        }
    }
    Ok(())
}

/// Converts one schema and every schema inside it.
fn schema_downgrade(schema: &mut Value, pointer: &str) -> Result<(), DowngradeError> {
    let Some(object) = schema.as_object_mut() else {
        // `true`/`false` schemas (e.g. `additionalProperties: false`) are valid in both.
        return Ok(());
    };
    // `oneOf`/`anyOf` of a `$ref` and null (before the `$ref` itself is rewritten below).
    for keyword in ["oneOf", "anyOf"] {
        let Some(Value::Array(choices)) = object.get(keyword) else {
            continue;
        };
        let [Value::Object(first), null] = choices.as_slice() else {
            continue;
        };
        if null != &json!({ "type": "null" }) {
            continue;
        }
        let mut first = first.clone();
        let Some(reference) = first.remove("$ref") else {
            return Err(refusal(
                &format!("{keyword} of an inline schema and null"),
                pointer,
            ));
        };
        object.remove(keyword);
        object.insert("allOf".into(), json!([{ "$ref": reference }]));
        // The reference's siblings (its description) move up beside the `allOf`.
        for (key, value) in first {
            if object.insert(key.clone(), value).is_some() {
                return Err(refusal(
                    &format!("{keyword} with `{key}` inside and beside"),
                    pointer,
                ));
            }
        }
        object.insert("nullable".into(), json!(true));
    }
    if let Some(properties) = object.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, property) in properties.iter_mut() {
            schema_downgrade(property, &format!("{pointer}/properties/{name}"))?;
        }
    }
    for keyword in ["items", "additionalProperties", "not"] {
        if let Some(inner) = object.get_mut(keyword) {
            schema_downgrade(inner, &format!("{pointer}/{keyword}"))?;
        }
    }
    for keyword in ["allOf", "oneOf", "anyOf"] {
        if let Some(all) = object.get_mut(keyword).and_then(Value::as_array_mut) {
            for (i, inner) in all.iter_mut().enumerate() {
                schema_downgrade(inner, &format!("{pointer}/{keyword}/{i}"))?;
            }
        }
    }

    // `"type": [T, "null"]`.
    if let Some(Value::Array(types)) = object.get("type") {
        let [only, null] = types.as_slice() else {
            return Err(refusal("type (not [T, \"null\"])", pointer));
        };
        if null != "null" || only == "null" {
            return Err(refusal("type (not [T, \"null\"])", pointer));
        }
        let only = only.clone();
        object.insert("type".into(), only);
        object.insert("nullable".into(), json!(true));
    }
    // A `$ref` with siblings: 3.0 ignores them.
    if object.len() > 1
        && let Some(reference) = object.remove("$ref")
    {
        if object.contains_key("allOf") {
            return Err(refusal("$ref beside allOf", pointer));
        }
        object.insert("allOf".into(), json!([{ "$ref": reference }]));
    }
    // 3.0's `exclusiveMinimum`/`exclusiveMaximum` are flags; 3.1's are the bounds.
    for keyword in ["exclusiveMinimum", "exclusiveMaximum"] {
        if object.get(keyword).is_some_and(|v| !v.is_boolean()) {
            return Err(refusal(&format!("{keyword} (a number)"), pointer));
        }
    }
    for keyword in KEPT_AS_EXTENSIONS {
        if let Some(value) = object.remove(*keyword) {
            object.insert(format!("x-{keyword}"), value);
        }
    }
    match object
        .keys()
        .find(|key| !key.starts_with("x-") && !SCHEMA_KEYWORDS_30.contains(&key.as_str()))
    {
        Some(keyword) => Err(refusal(keyword, pointer)),
        None => Ok(()),
    }
}

fn refusal(keyword: &str, pointer: &str) -> DowngradeError {
    DowngradeError {
        keyword: keyword.into(),
        pointer: pointer.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns a converted document back into 3.1, undoing each rewrite of [`downgrade`].
    fn upgrade(doc: &mut Value) {
        doc["openapi"] = json!("3.1.0");
        if let Some(license) = doc["info"]["license"].as_object_mut()
            && let Some(identifier) = license.remove("x-identifier")
        {
            license.insert("identifier".into(), identifier);
        }
        for item in doc["paths"].as_object_mut().unwrap().values_mut() {
            for operation in item.as_object_mut().unwrap().values_mut() {
                let Some(content) = operation
                    .get_mut("requestBody")
                    .and_then(|body| body.get_mut("content"))
                    .and_then(Value::as_object_mut)
                else {
                    continue;
                };
                for entry in content.values_mut() {
                    if entry["schema"] == binary_schema() {
                        entry.as_object_mut().unwrap().remove("schema");
                    }
                }
            }
        }
        upgrade_objects(doc);
    }

    fn upgrade_objects(value: &mut Value) {
        match value {
            Value::Object(object) => {
                for keyword in KEPT_AS_EXTENSIONS {
                    if let Some(kept) = object.remove(&format!("x-{keyword}")) {
                        object.insert((*keyword).into(), kept);
                    }
                }
                let lone_reference = match object.get("allOf") {
                    Some(Value::Array(all)) if all.len() == 1 && all[0].get("$ref").is_some() => {
                        Some(all[0]["$ref"].clone())
                    }
                    _ => None,
                };
                let nullable = object.remove("nullable") == Some(json!(true));
                match (nullable, lone_reference) {
                    (true, Some(reference)) => {
                        object.remove("allOf");
                        let mut first = std::mem::take(object);
                        first.insert("$ref".into(), reference);
                        object.insert("oneOf".into(), json!([first, { "type": "null" }]));
                    }
                    (true, None) => {
                        let only = object["type"].take();
                        object.insert("type".into(), json!([only, "null"]));
                    }
                    (false, Some(reference)) => {
                        object.remove("allOf");
                        object.insert("$ref".into(), reference);
                    }
                    (false, None) => {}
                }
                object.values_mut().for_each(upgrade_objects);
            }
            Value::Array(items) => items.iter_mut().for_each(upgrade_objects),
            _ => {}
        }
    }

    /// Every 3.1-only construct left in `value`, by where it is.
    fn constructs_31(value: &Value, pointer: &str, found: &mut Vec<String>) {
        match value {
            Value::Object(object) => {
                for (key, inner) in object {
                    let here = format!("{pointer}/{key}");
                    if key == "type" && (inner.is_array() || inner == "null") {
                        found.push(here.clone());
                    }
                    if key == "$ref" && object.len() > 1 {
                        found.push(here.clone());
                    }
                    if KEPT_AS_EXTENSIONS.contains(&key.as_str()) {
                        found.push(here.clone());
                    }
                    constructs_31(inner, &here, found);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    constructs_31(item, &format!("{pointer}/{i}"), found);
                }
            }
            _ => {}
        }
    }

    fn document() -> Value {
        serde_json::to_value(crate::http::openapi_document()).unwrap()
    }

    #[test]
    fn the_api_document_converts_without_loss() {
        let original = document();
        let converted = downgrade(original.clone()).unwrap();
        assert_eq!(converted["openapi"], OPENAPI_30_VERSION);
        let mut left = Vec::new();
        constructs_31(&converted, "", &mut left);
        assert!(left.is_empty(), "3.1 constructs left: {left:?}");
        // Something was converted: the document uses each rewrite.
        assert_ne!(converted, original);
        let mut back = converted;
        upgrade(&mut back);
        assert!(
            back == original,
            "the round trip changed the document:\n{}",
            first_difference(&back, &original, "")
        );
    }

    /// Where two documents first differ, for a readable failure.
    fn first_difference(a: &Value, b: &Value, pointer: &str) -> String {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => x
                .keys()
                .chain(y.keys())
                .find_map(|key| match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) if p == q => None,
                    (Some(p), Some(q)) => Some(first_difference(p, q, &format!("{pointer}/{key}"))),
                    (p, q) => Some(format!("{pointer}/{key}: {p:?} vs {q:?}")),
                })
                .unwrap_or_default(),
            _ => format!("{pointer}: {a} vs {b}"),
        }
    }

    #[test]
    fn each_rewrite_gives_the_3_0_form() {
        let schema = |s: Value| {
            let doc = json!({ "openapi": "3.1.0", "components": { "schemas": { "S": s } } });
            downgrade(doc).map(|d| d["components"]["schemas"]["S"].clone())
        };
        assert_eq!(
            schema(json!({ "type": ["integer", "null"], "format": "int64", "minimum": 0 }))
                .unwrap(),
            json!({ "type": "integer", "format": "int64", "minimum": 0, "nullable": true })
        );
        assert_eq!(
            schema(json!({ "oneOf": [{ "$ref": "#/components/schemas/T", "description": "d" }, { "type": "null" }] }))
                .unwrap(),
            json!({ "allOf": [{ "$ref": "#/components/schemas/T" }], "description": "d", "nullable": true })
        );
        assert_eq!(
            schema(json!({ "$ref": "#/components/schemas/T", "description": "d" })).unwrap(),
            json!({ "allOf": [{ "$ref": "#/components/schemas/T" }], "description": "d" })
        );
        assert_eq!(
            schema(json!({ "type": "object", "additionalProperties": { "type": "string" }, "propertyNames": { "type": "string" } }))
                .unwrap(),
            json!({ "type": "object", "additionalProperties": { "type": "string" }, "x-propertyNames": { "type": "string" } })
        );
        // Nested schemas are converted too.
        assert_eq!(
            schema(
                json!({ "type": "object", "properties": { "a": { "type": ["string", "null"] } } })
            )
            .unwrap(),
            json!({ "type": "object", "properties": { "a": { "type": "string", "nullable": true } } })
        );
        // A plain `$ref` and a 3.0-valid schema are left alone.
        let plain = json!({ "type": "array", "items": { "$ref": "#/components/schemas/T" }, "maxItems": 3 });
        assert_eq!(schema(plain.clone()).unwrap(), plain);
    }

    #[test]
    fn constructs_without_a_3_0_form_are_refused_by_name_and_place() {
        let doc = json!({ "openapi": "3.1.0", "paths": { "/x": { "get": { "responses": { "200": {
            "content": { "application/json": { "schema": { "type": "object", "properties": {
                "kind": { "const": "x" } } } } } } } } } } });
        let refused = downgrade(doc).unwrap_err();
        assert_eq!(refused.keyword, "const");
        assert_eq!(
            refused.pointer,
            "/paths//x/get/responses/200/content/application/json/schema/properties/kind"
        );
        for schema in [
            json!({ "type": ["string", "integer"] }),
            json!({ "oneOf": [{ "type": "string" }, { "type": "null" }] }),
            json!({ "exclusiveMinimum": 0 }),
        ] {
            let doc = json!({ "openapi": "3.1.0", "components": { "schemas": { "S": schema } } });
            assert!(downgrade(doc).is_err(), "{schema}");
        }
    }
}
