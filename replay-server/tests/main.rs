//! The replay server's tests over its public API, one module a file, linked into one test
//! binary: each binary links tonic and the server again, so one binary rather than three saves
//! a minute of CPU in every test build.

mod replay_fuzz;
mod replay_service;
mod replay_tables;
