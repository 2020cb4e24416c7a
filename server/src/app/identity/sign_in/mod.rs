//! Signing in: the limits on password attempts and the addresses each account usually signs
//! in from, and sign-in through outside identity providers with their holds.

pub mod addresses;
pub mod calls;
pub mod github;
pub mod holds;
pub mod oidc;
pub mod outside;
pub mod throttle;
