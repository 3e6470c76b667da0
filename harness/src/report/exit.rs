//! Exit codes (now in kandev-report).

pub use kandev_report::exit::*;
