//! redmutex's tests against real servers live in `tests/`: `integration` (one program,
//! with the conformance suite), `eviction`, `observability` and `shutdown`. They start
//! their own servers through the test kit; this library is empty.
