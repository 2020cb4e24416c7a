//! Identity: users, sessions and API tokens, the terms of service, the first administrator,
//! the cache of verified credentials, and sign-in (password and outside providers).

pub mod auth_cache;
pub mod bootstrap;
pub mod sessions;
pub mod sign_in;
pub mod terms;
pub mod tokens;
pub mod users;
