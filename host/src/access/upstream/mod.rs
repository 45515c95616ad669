//! The host's identity at upstream servers, per user: the credentials it obtains for each user
//! of an upstream, and where it keeps them ([`vault`], sealed by [`sealing`]).

pub mod sealing;
pub mod vault;
