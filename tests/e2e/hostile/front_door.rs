//! H1/H2: the probe confined like the worker, isolation and settings bound to where a plugin file comes from.
