//! A run's stdout through a pipe of its own: libtest-mimic unwraps every write to stdout, so a
//! reader that went away (`run | head`, a CI log collector that died) panicked the main
//! thread, exit 101, in the middle of a run whose scenarios still held Pods. Here fd 1 is a
//! pipe a thread copies on to the real stdout; once that is gone, the thread says so once on
//! stderr and drops what follows (the report is the run's record), and the run goes on to
//! its teardown and report.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::thread::JoinHandle;

pub(crate) struct Shield {
    /// The real stdout, put back on fd 1 at the end.
    original: OwnedFd,
    copier: JoinHandle<()>,
}

impl Shield {
    /// Puts the pipe on fd 1; None (stdout left as it is, with a warning) when the system
    /// refuses a pipe or a descriptor.
    pub(crate) fn install() -> Option<Shield> {
        match Self::try_install() {
            Ok(shield) => Some(shield),
            Err(e) => {
                tracing::warn!(error = %e, "stdout is not shielded: a reader that goes away ends the run");
                None
            }
        }
    }

    fn try_install() -> std::io::Result<Shield> {
        let original = rustix::io::dup(std::io::stdout().as_fd())?;
        let mut onward = File::from(rustix::io::dup(std::io::stdout().as_fd())?);
        let (mut reader, writer) = std::io::pipe()?;
        std::io::stdout().flush()?;
        rustix::stdio::dup2_stdout(&writer)?;
        drop(writer);
        let copier = std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            let mut gone = false;
            loop {
                let n = match reader.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                if !gone && let Err(e) = onward.write_all(&buffer[..n]) {
                    gone = true;
                    eprintln!(
                        "note: stdout is closed ({e}): the run goes on to its teardown and report"
                    );
                }
            }
        });
        Ok(Shield { original, copier })
    }

    /// Puts the real stdout back and waits until everything written reached it (or was
    /// dropped because it is gone).
    pub(crate) fn finish(self) {
        let _ = std::io::stdout().flush();
        // Replacing fd 1 closes the pipe's last writer, so the copier reads to the end.
        let _ = rustix::stdio::dup2_stdout(&self.original);
        let _ = self.copier.join();
    }
}
