//! Complaints on stderr: one line each, for cron to mail. Results go to stdout (`cli::emit`).

/// Write one line to stderr. Unlike `eprintln!`, a closed or full stderr is ignored instead of
/// panicking: a tick must go on supervising its jobs even when nobody reads its complaints.
pub fn line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// `eprintln!` that never panics (see `line`).
#[macro_export]
macro_rules! complain {
    ($($arg:tt)*) => { $crate::stderr::line(format_args!($($arg)*)) };
}
