//! The one way the harness waits for something: poll a probe until it answers, within a
//! budget, and say what was waited for when the budget runs out.

use std::future::Future;
use std::time::Duration;
// The runtime's clock (the system's, unless a test pauses it).
use tokio::time::Instant;

/// A wait whose budget ran out, naming what it waited for.
#[derive(Debug, Clone, thiserror::Error)]
#[error("timed out after {waited:?} waiting for {what}")]
pub struct WaitTimedOut {
    pub what: String,
    pub waited: Duration,
}

/// Calls `probe` every `interval` until it returns `Some`, for at most `budget` (the probe is
/// always called at least once). A probe's error ends the wait with that error.
pub async fn until<T, E, F, Fut>(
    what: &str,
    budget: Duration,
    interval: Duration,
    mut probe: F,
) -> Result<T, E>
where
    E: From<WaitTimedOut>,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, E>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        let waited = started.elapsed();
        if waited >= budget {
            return Err(WaitTimedOut {
                what: what.to_owned(),
                waited,
            }
            .into());
        }
        tokio::time::sleep(interval.min(budget - waited)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_as_soon_as_the_probe_does_and_names_what_timed_out() {
        let mut calls = 0;
        let found: Result<u32, WaitTimedOut> = until(
            "the third call",
            Duration::from_secs(5),
            Duration::ZERO,
            || {
                calls += 1;
                let seen = calls;
                async move { Ok((seen == 3).then_some(seen)) }
            },
        )
        .await;
        assert_eq!(found.ok(), Some(3));
        let never: Result<(), WaitTimedOut> = until(
            "something that never comes",
            Duration::from_millis(30),
            Duration::from_millis(10),
            || async { Ok(None) },
        )
        .await;
        let timed_out = never.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            timed_out.contains("waiting for something that never comes"),
            "{timed_out}"
        );
    }
}
