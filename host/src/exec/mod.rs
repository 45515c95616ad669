//! Execution: where and how tool calls run ([`pool`]: worker threads off the async reactor).

pub mod pool;
