//! Kandev's launch stage `agentctl_connect` (`/health`, then the nonce handshake), and its
//! reconnect to a running session's agentctl: the recorded token, or a new handshake.

use super::Session;
use super::agent::AgentClient;
use anyhow::Context;
use kandev_agent_wire::InstanceList;
use std::time::{Duration, Instant};

/// What Kandev's reconnect ([`Session::reconnect`], [`Session::reattach`]) found.
#[derive(Debug, Clone)]
pub struct Reconnected {
    /// agentctl's `/health` answer once it was back.
    pub health: serde_json::Value,
    /// What agentctl made of the recorded control token.
    pub token: RecordedToken,
    /// The session's agent process agentctl no longer runs (it died with the container).
    pub instance_lost: Option<String>,
}

/// What agentctl made of the recorded control token when Kandev reached it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedToken {
    /// Accepted: the same agentctl; no new handshake.
    Accepted,
    /// Refused (a restarted agentctl has issued none yet): a new handshake with the bootstrap
    /// nonce was made.
    Refused,
    /// None was recorded: a new handshake with the bootstrap nonce was made.
    Absent,
}

impl Session {
    /// Polls `/health` until the agent answers, then hands over the nonce.
    pub async fn connect(&mut self) -> anyhow::Result<()> {
        let mut client = self.session_client(None);
        self.await_health(&client, "agentctl_connect").await?;
        client
            .handshake(&self.bootstrap_nonce)
            .await
            .context("agentctl_connect: handshake")?;
        self.agent = Some(client);
        Ok(())
    }

    /// A control-API client for this session's environment file, with `token` if given.
    pub(super) fn session_client(&self, token: Option<String>) -> AgentClient {
        self.client_for(token, format!("{}/auth.env", self.home()))
    }

    /// A control-API client whose commands load `env_file`, with `token` if given.
    fn client_for(&self, token: Option<String>, env_file: String) -> AgentClient {
        let (backend, pod) = (self.settings.backend.clone(), self.pod.clone());
        let container = &self.settings.main_container;
        match token {
            Some(token) => AgentClient::with_token(backend, pod, container, token),
            None => AgentClient::new(backend, pod, container),
        }
        .for_session(env_file)
    }

    /// Polls agentctl's `/health` until it answers (its answer), within the connect bound.
    async fn await_health(
        &self,
        client: &AgentClient,
        step: &str,
    ) -> anyhow::Result<serde_json::Value> {
        let started = Instant::now();
        loop {
            match client.health().await {
                Ok(health) => return Ok(health),
                Err(e) if started.elapsed() >= self.settings.connect_timeout => {
                    return Err(e.context(format!(
                        "{step}: /health did not answer within {:?}",
                        self.settings.connect_timeout
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// agentctl reached with the task's recorded control token, or, when agentctl refuses it
    /// (a restarted agentctl has issued none yet), through a new handshake with the bootstrap
    /// nonce the Pod still holds (agentctl issues a new token). `for_env` is the environment
    /// file the client's commands load. Returns the client and what became of the token.
    pub(super) async fn reauthorized(
        &self,
        for_env: String,
        step: &str,
    ) -> anyhow::Result<(AgentClient, RecordedToken)> {
        let recorded = self
            .agent
            .as_ref()
            .and_then(|a| a.token().map(str::to_owned));
        if let Some(token) = &recorded {
            let client = self.client_for(Some(token.clone()), for_env.clone());
            if client
                .authorized()
                .await
                .with_context(|| format!("{step}: reattach with the recorded token"))?
            {
                return Ok((client, RecordedToken::Accepted));
            }
        }
        let mut client = self.client_for(None, for_env);
        client
            .handshake(&self.bootstrap_nonce)
            .await
            .with_context(|| format!("{step}: handshake with the bootstrap nonce"))?;
        let token = match recorded {
            Some(_) => RecordedToken::Refused,
            None => RecordedToken::Absent,
        };
        Ok((client, token))
    }

    /// Kandev's reconnect to the session's Pod (after its main container restarted, or from
    /// [`Session::reattach`]): wait for `/health`, reattach with the recorded token, and when
    /// agentctl refuses it (a restarted agentctl issued no token yet) do a new control
    /// handshake with the bootstrap nonce the Pod still holds in `/run/kandev/auth.env`
    /// (agentctl issues a new token). When agentctl no longer runs the session's agent
    /// process (it died with the container) the recorded instance is forgotten, and
    /// [`Session::start_agent_process`] starts a new one (Kandev's get-or-create of the
    /// session's instance).
    pub async fn reconnect(&mut self) -> anyhow::Result<Reconnected> {
        let health = self
            .await_health(&self.session_client(None), "reconnect")
            .await?;
        let (client, token) = self
            .reauthorized(format!("{}/auth.env", self.home()), "reconnect")
            .await?;
        let instances = client.instances().await.context("reconnect: instances")?;
        // An answer that does not read as a list of instances leaves the instance lost (Kandev
        // starts a new one), as an empty list does.
        let listed = serde_json::from_value::<InstanceList>(instances).ok();
        let lost = self.instance.take_if(|id| {
            !listed
                .as_ref()
                .is_some_and(|l| l.instances.iter().any(|i| &i.id == id && i.running))
        });
        self.agent = Some(client);
        Ok(Reconnected {
            health,
            token,
            instance_lost: lost,
        })
    }
}
