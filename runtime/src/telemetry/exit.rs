//! How a binary ends when `main` fails: the error's message and context chain, no backtrace.

use std::io::Write;
use std::process::ExitCode;

/// Ends `main`: `Ok` exits 0; an error prints `error: <message>` and one `caused by: <cause>`
/// line per context layer to stderr, then exits 1.
///
/// The errors that reach `main` are for the person running the binary (a bad config, an
/// unknown env or key, an address in use), and their context chain says what to fix. A
/// backtrace (anyhow prints one for a `main` returning `Result` whenever `RUST_BACKTRACE` is
/// set) points into our code and buries that message, so it is never printed here. Bugs
/// panic, and panics keep their backtraces.
pub fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    let Err(error) = result else {
        return ExitCode::SUCCESS;
    };
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "error: {}", indented(&error));
    for cause in error.chain().skip(1) {
        let _ = writeln!(stderr, "  caused by: {}", indented(cause));
    }
    ExitCode::FAILURE
}

/// `message` on one line, or with its further lines indented under the first.
fn indented(message: &dyn std::fmt::Display) -> String {
    message.to_string().trim_end().replace('\n', "\n    ")
}
