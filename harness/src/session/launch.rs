//! A fresh launch: Kandev's four stages in order, each timed, the launch's records written to
//! the run's launch log.

use super::cleanup::CleanupStack;
use super::timing::LaunchTiming;
use super::{LaunchSettings, Session, SessionOptions};
use crate::pod::identity::SessionIdentity;
use std::time::Instant;

impl Session {
    /// All four stages; a failing prepare script is a
    /// [`PrepareFailed`](super::PrepareFailed) error.
    pub async fn launch(
        settings: &LaunchSettings,
        cleanup: &CleanupStack,
        identity: SessionIdentity,
        options: &SessionOptions,
    ) -> anyhow::Result<Self> {
        let mut timing = LaunchTiming::start(&identity);
        let launched = async {
            let mut session =
                Self::create_timed(settings, cleanup, identity, options, &mut timing).await?;
            session.bootstrap_and_connect(&mut timing).await?;
            Ok(session)
        }
        .await;
        settings
            .launch_log
            .write(timing.complete(launched.as_ref().map(|_| ())));
        launched
    }

    /// Stages `bootstrap` and `agentctl_connect` of a created session.
    pub(super) async fn bootstrap_and_connect(
        &mut self,
        timing: &mut LaunchTiming,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let bootstrapped = self.bootstrap().await;
        timing.stage("bootstrap", started, &bootstrapped);
        bootstrapped?;
        let started = Instant::now();
        let connected = self.connect().await;
        timing.stage("agentctl_connect", started, &connected);
        connected?;
        self.stages = timing.stage_durations();
        Ok(())
    }
}
