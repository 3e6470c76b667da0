//! The session's agent process through agentctl: started, ended by Kandev's Stop (agentctl
//! and the Pod stay), reattached; and further sessions of the task joining its Pod, each with
//! its own environment and process ([`SessionHandle`]).

use super::agent::{AgentClient, AgentExec, AgentExecResult};
use super::bootstrap::PUT;
use super::{Session, session_home};
use crate::pod::identity::SessionIdentity;
use anyhow::{Context, bail};
use kandev_agent_wire::env_file;
use std::time::Duration;

/// A session's agent process: the agent CLI (here the mock agent's `session` role) through
/// the agent user's login shell.
const SESSION_PROCESS: [&str; 3] = ["sh", "-lc", "/opt/kandev/agentctl session"];

/// A session that joined a task's Pod ([`Session::join`]): its identity, its own connection to
/// the Pod's agentctl (with its environment file) and its agent process.
pub struct SessionHandle {
    pub identity: SessionIdentity,
    agent: AgentClient,
    instance: Option<String>,
}

impl SessionHandle {
    /// The session's own home, `/run/kandev/sessions/<hash>/home`.
    pub fn home(&self) -> String {
        session_home(&self.identity.session_id)
    }

    pub fn agent(&self) -> &AgentClient {
        &self.agent
    }

    /// The session's agent process (its agentctl instance id) while it runs.
    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// Kandev's Stop of this session: its agent process ended through agentctl (agentctl,
    /// the Pod and the sibling sessions stay). Returns what agentctl answered.
    pub async fn stop(&mut self) -> anyhow::Result<Option<serde_json::Value>> {
        match self.instance.take() {
            Some(id) => Ok(Some(
                self.agent
                    .stop_instance(&id)
                    .await
                    .context("stop: end the session's agent process")?,
            )),
            None => Ok(None),
        }
    }

    /// `sh -c script` as the agent user in `/workspace`, with this session's environment.
    pub async fn agent_sh(
        &self,
        script: &str,
        timeout: Duration,
    ) -> anyhow::Result<AgentExecResult> {
        self.agent.exec(&AgentExec::sh(script, timeout)).await
    }
}

impl Session {
    /// Starts the session's agent process through agentctl: the agent CLI run through the
    /// agent user's login shell (its profile applies) in `/workspace` with the session's
    /// environment. Returns the instance id, which [`Session::stop`] ends.
    pub async fn start_agent_process(&mut self) -> anyhow::Result<String> {
        let id = self
            .agent()?
            .start_instance(&SESSION_PROCESS)
            .await
            .context("start the session's agent process")?;
        self.instance = Some(id.clone());
        Ok(id)
    }

    /// Kandev's ordinary Stop: end the session's agent process through the control API
    /// (agentctl stays) and close the connection to the agent; the Pod, its daemon and the
    /// nested containers stay. Returns the recorded token for [`Session::resume`] and what
    /// agentctl answered for the ended process.
    pub async fn stop(&mut self) -> anyhow::Result<(Option<String>, Option<serde_json::Value>)> {
        let ended = match (&self.agent, self.instance.take()) {
            (Some(agent), Some(id)) => Some(
                agent
                    .stop_instance(&id)
                    .await
                    .context("stop: end the session's agent process")?,
            ),
            _ => None,
        };
        let token = self.agent.take().and_then(|a| a.token().map(str::to_owned));
        Ok((token, ended))
    }

    /// Reattaches to the same agent process with the recorded token (into a new session:
    /// [`Session::start_agent_process`] starts its process).
    pub async fn resume(&mut self, token: String) -> anyhow::Result<()> {
        let client = self.session_client(Some(token));
        client
            .identity()
            .await
            .context("resume: reattach with the recorded token")?;
        self.agent = Some(client);
        Ok(())
    }

    /// A further session of this task joining its Pod, as Kandev's executor adds a session to
    /// a task-owned Pod (`connectSharedKubernetesAgentctl`): no new Pod, claim or
    /// preparation; the session's own environment is written to its home,
    /// `/run/kandev/sessions/<hash>/home/auth.env` (umask 077, mode 0600, a symlinked path
    /// refused with exit 73, temporary file then rename); agentctl is reached with the task's
    /// control token (a new handshake with the bootstrap nonce when agentctl refuses it); and
    /// the session's own agent process is started through agentctl with that environment.
    pub async fn join(&self, session_id: &str) -> anyhow::Result<SessionHandle> {
        let mut identity = self.identity.clone();
        identity.session_id = session_id.to_owned();
        let home = session_home(session_id);
        let mut env: Vec<(&str, &str)> = self
            .session_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend([
            ("HOME", home.as_str()),
            ("KANDEV_SESSION_ID", identity.session_id.as_str()),
            ("KANDEV_TASK_ID", identity.task_id.as_str()),
            ("KANDEV_INSTANCE_ID", identity.environment_id.as_str()),
            (
                "KANDEV_TASK_ENVIRONMENT_ID",
                identity.environment_id.as_str(),
            ),
        ]);
        let script = format!(
            r#"set -e
umask 077
{PUT}
printf '%s' "$1" | put "$2/auth.env" 0600"#
        );
        let out = self
            .main_exec(
                &["sh", "-c", &script, "sh", &env_file::render(&env), &home],
                None,
                Duration::from_secs(30),
            )
            .await?;
        match out.exit_code {
            Some(0) => {}
            Some(73) => bail!(
                "join: {home}/auth.env refused: a path under /run/kandev/sessions is a symlink (or not a folder)"
            ),
            code => bail!(
                "join: write {home}/auth.env: {}: {}",
                crate::backend::exit_text(code),
                out.stderr_text().trim()
            ),
        }
        self.session_client(None)
            .health()
            .await
            .context("join: agentctl's /health")?;
        if self.agent.as_ref().and_then(AgentClient::token).is_none() {
            bail!("join: the task's session is not connected to agentctl");
        }
        let (agent, _) = self
            .reauthorized(format!("{home}/auth.env"), "join")
            .await?;
        let instance = agent
            .start_instance(&SESSION_PROCESS)
            .await
            .context("join: start the session's agent process")?;
        Ok(SessionHandle {
            identity,
            agent,
            instance: Some(instance),
        })
    }
}
