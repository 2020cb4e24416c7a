//! The credentials file of the client commands: where it is (`BULKHEAD_CONFIG_DIR`, else the
//! user's config directory, `bulkhead/credentials.json`), what it holds (the URLs of the
//! servers that issued it — one, or the replicas of one control plane — and a session's tokens
//! or an API token; never a password), which servers it may be sent to (those only), and how
//! it is kept private: created with mode 0600 in a 0700 directory, and refused when other users
//! may read it.
//!
//! Nothing here talks to a server.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bulkhead_common::tls::{PublicKeyPin, ServerTrust};
use serde::{Deserialize, Serialize};

use super::exit::{Exit, fail};
use super::servers::ServerList;

/// What `bulkhead login` stores.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Credentials {
    /// The base URLs of the servers logged in to, e.g. `https://bulkhead.example.com`: under
    /// `server`, a string when it is one (as older versions wrote it), a list when several.
    #[serde(rename = "server")]
    pub servers: ServerList,
    /// The CA file the server was verified with at login (`--ca-file`), used again unless a
    /// command gives `--ca-file` or `--pin-sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The server's key pinned at login (`--pin-sha256`, in base64), used again unless a
    /// command gives `--ca-file` or `--pin-sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "pin_text")]
    pub pin_sha256: Option<PublicKeyPin>,
    #[serde(flatten)]
    pub auth: Auth,
}

/// A pin in the file as its base64 text.
mod pin_text {
    use bulkhead_common::tls::PublicKeyPin;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        pin: &Option<PublicKeyPin>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        pin.map(|pin| pin.to_string()).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<PublicKeyPin>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| text.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Auth {
    /// A session from email and password: refreshed when the access token expires.
    Session {
        access_token: String,
        refresh_token: String,
    },
    /// An API token (`bh_...`).
    ApiToken { token: String },
}

impl Credentials {
    /// Credentials issued by `servers`, verified as `trust` says.
    pub fn new(servers: ServerList, trust: &ServerTrust, auth: Auth) -> Self {
        Self {
            servers,
            ca_file: trust.ca_file().map(Path::to_path_buf),
            pin_sha256: trust.pin_sha256(),
            auth,
        }
    }

    /// What the servers were verified with at login.
    pub fn trust(&self) -> ServerTrust {
        ServerTrust::of(self.ca_file.clone(), self.pin_sha256)
    }

    /// The servers to send these credentials to: those that issued them, or the part of them
    /// that `wanted` (`--server`, `BULKHEAD_URL`) names. A list naming any other server is
    /// refused rather than handed the tokens, so a typo or a hostile URL never receives them.
    pub fn server_for(&self, wanted: Option<&ServerList>) -> anyhow::Result<ServerList> {
        match wanted {
            Some(wanted) if !wanted.is_subset_of(&self.servers) => fail(
                Exit::NotLoggedIn,
                format!(
                    "logged in to {}, not {wanted}: the stored credentials go only to the \
                     servers that issued them; run `bulkhead login --server {wanted}` (or set \
                     BULKHEAD_TOKEN)",
                    self.servers
                ),
            ),
            Some(wanted) => Ok(wanted.clone()),
            None => Ok(self.servers.clone()),
        }
    }
}

impl Auth {
    /// The bearer token to send.
    pub fn bearer(&self) -> &str {
        match self {
            Auth::Session { access_token, .. } => access_token,
            Auth::ApiToken { token } => token,
        }
    }
}

/// The directory of the credentials file.
pub fn config_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("BULKHEAD_CONFIG_DIR").filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    match dirs::config_dir() {
        Some(dir) => Ok(dir.join("bulkhead")),
        None => fail(
            Exit::Unexpected,
            "no config directory for this user: set BULKHEAD_CONFIG_DIR",
        ),
    }
}

pub fn credentials_path() -> anyhow::Result<PathBuf> {
    Ok(config_dir()?.join("credentials.json"))
}

/// The stored credentials, `None` when nobody logged in. A file that other users may read, or
/// that is not a regular file, is refused, saying how to fix it.
pub fn credentials_load() -> anyhow::Result<Option<Credentials>> {
    let path = credentials_path()?;
    let metadata = match std::fs::symlink_metadata(&path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return fail(Exit::NotLoggedIn, format!("{}: {err}", path.display())),
    };
    if !metadata.is_file() {
        return fail(
            Exit::NotLoggedIn,
            format!(
                "{} is not a regular file: remove it and run `bulkhead login`",
                path.display()
            ),
        );
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return fail(
            Exit::NotLoggedIn,
            format!(
                "{} may be read by other users (mode {mode:03o}), so its tokens are refused: \
                 run `chmod 600 {}` if nobody else read it, else revoke them with \
                 `bulkhead logout` and log in again",
                path.display(),
                path.display()
            ),
        );
    }
    let text = std::fs::read_to_string(&path)?;
    match serde_json::from_str(&text) {
        Ok(credentials) => Ok(Some(credentials)),
        Err(err) => fail(
            Exit::NotLoggedIn,
            format!(
                "{} is not a credentials file ({err}): run `bulkhead login`",
                path.display()
            ),
        ),
    }
}

/// Stores `credentials`: written to a new 0600 file beside the old one, then renamed over it,
/// so that the file is never readable by others nor half-written.
pub fn credentials_save(credentials: &Credentials) -> anyhow::Result<PathBuf> {
    let dir = config_dir()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let path = dir.join("credentials.json");
    let partial = dir.join(format!(".credentials.json.{}", std::process::id()));
    write_private(&partial, &serde_json::to_vec_pretty(credentials)?)?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

/// Deletes the credentials file; `false` when there was none.
pub fn credentials_delete() -> anyhow::Result<bool> {
    match std::fs::remove_file(credentials_path()?) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Exit;

    fn logged_in_to(servers: &str) -> Credentials {
        Credentials {
            servers: ServerList::parse(servers).unwrap(),
            ca_file: None,
            pin_sha256: None,
            auth: Auth::ApiToken {
                token: "bh_secret".into(),
            },
        }
    }

    #[test]
    fn credentials_go_to_the_servers_that_issued_them_or_a_part_of_them() {
        let credentials = logged_in_to("https://a:8443,https://b:8443,https://c:8443");
        assert_eq!(credentials.server_for(None).unwrap(), credentials.servers);
        for part in [
            "https://b:8443",
            "https://c:8443,https://a:8443/",
            "https://a:8443,https://b:8443,https://c:8443",
        ] {
            let wanted = ServerList::parse(part).unwrap();
            assert_eq!(
                credentials.server_for(Some(&wanted)).unwrap(),
                wanted,
                "{part}"
            );
        }
        for other in [
            "https://d:8443",
            "https://a:8443,https://d:8443",
            "https://a:9443",
        ] {
            let wanted = ServerList::parse(other).unwrap();
            let err = credentials.server_for(Some(&wanted)).unwrap_err();
            assert_eq!(Exit::of_error(&err), Exit::NotLoggedIn, "{other}");
            assert!(
                err.to_string().contains("logged in to https://a:8443,"),
                "{err}"
            );
            assert!(!err.to_string().contains("bh_secret"), "{err}");
        }
    }

    #[test]
    fn a_file_of_one_server_as_older_versions_wrote_it_still_loads() {
        let old = r#"{"server":"https://bulkhead.example.com","kind":"session",
            "access_token":"a","refresh_token":"r"}"#;
        let credentials: Credentials = serde_json::from_str(old).unwrap();
        assert_eq!(credentials.servers.urls(), ["https://bulkhead.example.com"]);
        assert_eq!(
            credentials.auth,
            Auth::Session {
                access_token: "a".into(),
                refresh_token: "r".into()
            }
        );
        // And is written as they read it.
        let written = serde_json::to_value(&credentials).unwrap();
        assert_eq!(written["server"], "https://bulkhead.example.com");
    }

    #[test]
    fn a_file_of_several_servers_keeps_them_in_order() {
        let credentials = logged_in_to("https://b,https://a");
        let written = serde_json::to_string(&credentials).unwrap();
        let read: Credentials = serde_json::from_str(&written).unwrap();
        assert_eq!(read, credentials);
        assert_eq!(read.servers.urls(), ["https://b", "https://a"]);
        // A file edited to send the tokens in clear is refused.
        let edited = written.replace("https://a", "http://a.example.com");
        assert!(serde_json::from_str::<Credentials>(&edited).is_err());
    }

    #[test]
    fn the_pin_given_at_login_is_stored_in_base64_and_trusted_again() {
        let pin: PublicKeyPin = "daU0xNNUfFv9EdXyQZ2sLalK0gQDerPhq7i55/bk5SE="
            .parse()
            .unwrap();
        let credentials = Credentials::new(
            ServerList::parse("https://cp.internal:8443").unwrap(),
            &ServerTrust::PublicKeyPin(pin),
            Auth::ApiToken {
                token: "bh_secret".into(),
            },
        );
        let written = serde_json::to_value(&credentials).unwrap();
        assert_eq!(written["pin_sha256"], pin.to_string());
        assert!(written.get("ca_file").is_none());
        let read: Credentials = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(read.trust(), ServerTrust::PublicKeyPin(pin));
        // A file without either trusts the platform's roots; an edited pin that is none is
        // refused.
        assert_eq!(
            logged_in_to("https://a").trust(),
            ServerTrust::PlatformRoots
        );
        let mut edited = written;
        edited["pin_sha256"] = "abc".into();
        assert!(serde_json::from_value::<Credentials>(edited).is_err());
    }
}
