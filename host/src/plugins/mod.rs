//! Plugins: from files in tool directories to loaded images — [`discovery`] (which files, in which
//! order), [`probe`] (a crash-isolated test load in a child process), [`image`] (loading a private
//! copy in-process), the host API handed to each plugin ([`host_api`]) and hot reload ([`watch`]).

pub mod discovery;
pub mod host_api;
pub mod image;
pub mod probe;
pub mod watch;
