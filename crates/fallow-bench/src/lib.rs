//! fallow-bench: a multi-threaded load generator for RESP and memcached servers, a null server that gives
//! the request/response ceiling of this machine, and bulk load / sorted export of record files.
pub mod bulk;
pub mod nullserver;
