//! Ids that people choose and that appear in URLs, metrics and file names (a provider's name,
//! an edge's id): slugs.

/// Whether `value` is a slug: 1 to 63 lowercase letters, digits or '-', starting with a letter
/// and not ending with '-'. On refusal, the message names `field`.
pub fn slug_validate(field: &str, value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value.starts_with(|c: char| c.is_ascii_lowercase())
        && !value.ends_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{field}` must be 1 to 63 lowercase letters, digits or '-', start with a letter and not end with '-'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_lowercase_words_joined_by_dashes() {
        for good in ["a", "gcp", "edge-1", "eu-west-3b", &"a".repeat(63)] {
            assert_eq!(slug_validate("id", good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "1a",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "é",
            &"a".repeat(64),
        ] {
            let err = slug_validate("id", bad).unwrap_err();
            assert!(err.starts_with("`id` must be"), "{bad}: {err}");
        }
    }
}
