//! The real `redmutex` binary against test-kit servers: one test program, with a module per
//! subcommand and one for each thing they all share (the connection to Redis, the command
//! line itself, the outputs docs/CLI.md shows), so that it is built and linked once rather
//! than once per file. Every exit code of the table is checked in a program of its own,
//! `exit_codes.rs`.
//!
//! Run one subcommand's tests with a filter: `cargo test -p redmutex-cli --test cli exec::`.

#[path = "../common/mod.rs"]
mod common;

// A module per subcommand.
mod acquire;
mod doctor;
mod elect;
mod exec;
mod inspect;
mod leader;
mod list;
mod manual;
mod release;
mod wait;
mod watch;

// What they all share.
mod command_line;
mod connection;
mod docs;
