//! Checks of input values shared by every resource: free text, slugs, and the `If-Match`
//! precondition against a resource's revision.

use crate::error::{AppError, AppResult};

/// A strong entity tag for a resource at `revision`.
pub fn etag_for(revision: i64) -> String {
    format!("\"r{revision}\"")
}

/// Checks an `If-Match` precondition against a resource's current `revision`.
pub fn if_match_check(if_match: Option<&str>, revision: i64) -> AppResult<()> {
    match if_match {
        None => Ok(()),
        Some(value) if value.trim() == "*" => Ok(()),
        Some(value) if value.split(',').any(|tag| tag.trim() == etag_for(revision)) => Ok(()),
        Some(_) => Err(AppError::precondition_failed()),
    }
}

/// Trims `value` and checks it is 1..=`max` characters with no control characters.
pub fn text_validate(field: &str, value: &str, max: usize) -> AppResult<String> {
    let value = value.trim();
    if value.is_empty() {
        return Err(AppError::invalid(format!("`{field}` must not be empty")));
    }
    if value.chars().count() > max {
        return Err(AppError::invalid(format!(
            "`{field}` must be at most {max} characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(AppError::invalid(format!(
            "`{field}` must not contain control characters"
        )));
    }
    Ok(value.to_owned())
}

/// Checks a DNS-label-style name: lowercase letters, digits and `-`, 1..=63, starting with a letter.
pub fn slug_validate(field: &str, value: &str) -> AppResult<String> {
    bulkhead_common::names::slug_validate(field, value).map_err(AppError::invalid)?;
    Ok(value.to_owned())
}
