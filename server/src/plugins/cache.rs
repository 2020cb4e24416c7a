//! The compiled-code cache: compiled components stored on disk under the SHA-256 of the
//! component and the engine's compatibility hash, so that a restart (or a second server on the
//! same data directory) loads a plugin instead of compiling it again.
//!
//! Entries are written atomically (temporary file, then rename). An entry that cannot be loaded
//! (corrupt, or written by an incompatible engine that hashed the same) is compiled again and
//! replaced. The directory must be writable by Bulkhead alone: loading an entry trusts it as
//! code that this engine compiled.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

pub struct CodeCache {
    dir: PathBuf,
    engine_key: String,
}

/// Feeds `Hash` output into SHA-256, for a hash that is the same in every process.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
    }
}

impl CodeCache {
    /// A cache in `dir`, created 0700 if missing (an existing one is made 0700: its entries
    /// are trusted as code).
    pub fn new(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        bulkhead_common::files::private_dir_create(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        Ok(Self {
            dir: dir.to_owned(),
            engine_key,
        })
    }

    fn entry(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The compiled component of `bytes` (whose SHA-256 is `digest`), and whether it came from
    /// the cache.
    pub fn component(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
    ) -> wasmtime::Result<(Component, bool)> {
        let entry = self.entry(digest);
        // Read into memory rather than mapped: a mapped entry that someone truncates while the
        // server runs would crash the process (SIGBUS).
        if let Ok(compiled) = std::fs::read(&entry) {
            // SAFETY: entries are written only by `store` below, from components this engine
            // configuration compiled; the key includes the engine's compatibility hash.
            match unsafe { Component::deserialize(engine, &compiled) } {
                Ok(component) => return Ok((component, true)),
                Err(err) => {
                    tracing::warn!(entry = %entry.display(), error = %err, "unusable compiled-code cache entry; recompiling")
                }
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Err(err) = self.store(&entry, &component) {
            tracing::warn!(entry = %entry.display(), error = %err, "could not write the compiled-code cache");
        }
        Ok((component, false))
    }

    fn store(&self, entry: &Path, component: &Component) -> anyhow::Result<()> {
        let compiled = component
            .serialize()
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        let temporary = entry.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        std::io::Write::write_all(&mut options.open(&temporary)?, &compiled)?;
        std::fs::rename(&temporary, entry)?;
        Ok(())
    }
}
