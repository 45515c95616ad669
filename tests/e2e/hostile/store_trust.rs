//! M5, L1, L2, L9, L14: Redis over TLS with AUTH, authenticated task records, secrets kept out of logs, private file modes.
