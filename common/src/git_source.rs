//! The rule of a repository URL that code is fetched from, in one place: the control plane
//! checks it when a service's spec is saved, and the host agent again when it is given a
//! workload (a URL that passed one and not the other would fail a deploy on metal only).

/// The longest URL, in bytes.
pub const URL_MAX: usize = 2048;
/// The schemes git may fetch with.
pub const SCHEMES: [&str; 3] = ["https://", "http://", "git://"];

/// Why `url` is not a repository URL to fetch from, if it is not: `https`, `http` or `git`, a
/// host, no user or password, no spaces or control characters (nothing git would read as an
/// option, a local path or another transport). The reason completes "the URL …".
pub fn repository_url_check(url: &str) -> Result<(), &'static str> {
    if url.len() > URL_MAX {
        return Err("must be at most 2048 bytes");
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain spaces or control characters");
    }
    let Some(rest) = SCHEMES.iter().find_map(|scheme| url.strip_prefix(scheme)) else {
        return Err("must start with `https://`, `http://` or `git://`");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err("has no host");
    }
    if authority.contains('@') {
        return Err("must not hold a user or password: give a token instead");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_urls() {
        for good in [
            "https://github.com/acme/web.git",
            "http://127.0.0.1:9000/web.git",
            "git://git.example.com/web",
        ] {
            assert_eq!(repository_url_check(good), Ok(()), "{good}");
        }
        for bad in [
            "file:///etc",
            "ext::git-upload-pack",
            "ssh://git@github.com/acme/web",
            "-uhttps://x",
            "https://user:pw@github.com/acme/web",
            "https:///path",
            "https://github.com/acme/web \n",
            "/srv/git/web.git",
        ] {
            assert!(repository_url_check(bad).is_err(), "{bad}");
        }
        assert!(repository_url_check(&format!("https://x/{}", "a".repeat(URL_MAX))).is_err());
    }
}
