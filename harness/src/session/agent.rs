//! The harness side of the mock agent's control API, spoken over the backend's port
//! exchange (port-forward; locally the mock agent's tunnel) to 127.0.0.1:8765 inside the Pod.
//! Paths, requests and answers are `kandev-agent-wire`'s, the mock agent's own definitions.

use crate::backend::{Backend, PodRef};
use anyhow::{Context, anyhow, bail};
use kandev_agent_wire::{Handshake, HandshakeAnswer, InstanceStarted, StartInstance, path};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The commands' wire types, re-exported where scenarios reach them.
pub use kandev_agent_wire::{AgentExec, AgentExecResult, CONTROL_PORT, FileDigest};

// The port the mock agent listens on is the one Kandev reserves for agentctl.
const _: () = assert!(CONTROL_PORT as i32 == crate::pod::template::AGENTCTL_PORT);

/// A connection to one Pod's mock agent.
#[derive(Clone)]
pub struct AgentClient {
    backend: Arc<dyn Backend>,
    pod: PodRef,
    container: String,
    token: Option<String>,
    /// The session's environment file, loaded for every command run for the session.
    session_env_file: Option<String>,
}

impl AgentClient {
    pub fn new(backend: Arc<dyn Backend>, pod: PodRef, container: &str) -> Self {
        Self {
            backend,
            pod,
            container: container.to_owned(),
            token: None,
            session_env_file: None,
        }
    }

    /// Commands run with the session environment in `path` (its `auth.env`).
    pub fn for_session(mut self, path: String) -> Self {
        self.session_env_file = Some(path);
        self
    }

    /// The bearer token from the handshake (Kandev records it to reattach after a Stop).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// A client that reattaches with a recorded token.
    pub fn with_token(
        backend: Arc<dyn Backend>,
        pod: PodRef,
        container: &str,
        token: String,
    ) -> Self {
        Self {
            backend,
            pod,
            container: container.to_owned(),
            token: Some(token),
            session_env_file: None,
        }
    }

    /// One request to the control port: `body` as JSON, the token if there is one.
    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> anyhow::Result<(u16, Value)> {
        let body = body.unwrap_or_default();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{CONTROL_PORT}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(&body);
        let response = self
            .backend
            .port_exchange(&self.pod, &self.container, CONTROL_PORT, &request, timeout)
            .await?;
        parse_response(&response)
    }

    /// `GET /health`.
    pub async fn health(&self) -> anyhow::Result<Value> {
        let (status, body) = self
            .request("GET", path::HEALTH, None, Duration::from_secs(10))
            .await?;
        if status != 200 {
            bail!("health answered {status}: {body}");
        }
        Ok(body)
    }

    /// `POST /auth/handshake` with the bootstrap nonce; keeps the token.
    pub async fn handshake(&mut self, nonce: &str) -> anyhow::Result<()> {
        let handshake = Handshake {
            nonce: nonce.to_owned(),
        };
        let (status, body) = self
            .request(
                "POST",
                path::HANDSHAKE,
                Some(serde_json::to_vec(&handshake)?),
                Duration::from_secs(10),
            )
            .await?;
        if status != 200 {
            bail!("handshake answered {status}: {body}");
        }
        let answer: HandshakeAnswer = serde_json::from_value(body.clone())
            .map_err(|e| anyhow!("handshake answer has no token: {body} ({e})"))?;
        self.token = Some(answer.token);
        Ok(())
    }

    /// Runs a command as the agent.
    pub async fn exec(&self, exec: &AgentExec) -> anyhow::Result<AgentExecResult> {
        // The agent bounds the command; this bounds the exchange, with room for the time
        // the agent does not count (its node frozen for a while: `AgentExecResult::frozen_ms`).
        let timeout = Duration::from_millis(exec.timeout_ms) + Duration::from_secs(60);
        let mut exec = exec.clone();
        if exec.env_file.is_none() {
            exec.env_file.clone_from(&self.session_env_file);
        }
        let (status, body) = self
            .request(
                "POST",
                path::EXEC,
                Some(serde_json::to_vec(&exec)?),
                timeout,
            )
            .await?;
        if status != 200 {
            bail!("agent exec {:?} answered {status}: {body}", exec.argv);
        }
        serde_json::from_value(body).context("decode the agent's exec result")
    }

    /// `POST /api/v1/instances`: starts a session's agent process (argv in `/workspace`, with
    /// the session's environment file), as Kandev starts an agent CLI through agentctl.
    /// Returns the instance id.
    pub async fn start_instance(&self, argv: &[&str]) -> anyhow::Result<String> {
        let start = StartInstance {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            cwd: Some("/workspace".into()),
            env_file: self.session_env_file.clone(),
        };
        let (status, body) = self
            .request(
                "POST",
                path::INSTANCES,
                Some(serde_json::to_vec(&start)?),
                Duration::from_secs(10),
            )
            .await?;
        if status != 200 {
            bail!("starting the session process answered {status}: {body}");
        }
        let started: InstanceStarted = serde_json::from_value(body.clone())
            .map_err(|e| anyhow!("the instance answer has no id: {body} ({e})"))?;
        Ok(started.id)
    }

    /// `DELETE /api/v1/instances/<id>`: ends a session's agent process (agentctl stays);
    /// answers once it has exited, with its exit status (`kandev_agent_wire::InstanceEnded`).
    pub async fn stop_instance(&self, id: &str) -> anyhow::Result<Value> {
        let (status, body) = self
            .request("DELETE", &path::instance(id), None, Duration::from_secs(30))
            .await?;
        if status != 200 {
            bail!("ending session process {id} answered {status}: {body}");
        }
        Ok(body)
    }

    /// `GET /api/v1/instances`: the session processes agentctl runs
    /// (`kandev_agent_wire::InstanceList`).
    pub async fn instances(&self) -> anyhow::Result<Value> {
        let (status, body) = self
            .request("GET", path::INSTANCES, None, Duration::from_secs(10))
            .await?;
        if status != 200 {
            bail!("instances answered {status}: {body}");
        }
        Ok(body)
    }

    /// Whether agentctl accepts this client's token: `GET /api/v1/identity` answered 200
    /// (true) or 401 (false: no token, or one this agentctl process never issued, as after a
    /// container restart); anything else is an error.
    pub async fn authorized(&self) -> anyhow::Result<bool> {
        let (status, body) = self
            .request("GET", path::IDENTITY, None, Duration::from_secs(10))
            .await?;
        match status {
            200 => Ok(true),
            401 => Ok(false),
            _ => bail!("identity answered {status}: {body}"),
        }
    }

    /// The agent process's user, groups and capabilities.
    pub async fn identity(&self) -> anyhow::Result<Value> {
        let (status, body) = self
            .request("GET", path::IDENTITY, None, Duration::from_secs(10))
            .await?;
        if status != 200 {
            bail!("identity answered {status}: {body}");
        }
        Ok(body)
    }
}

fn parse_response(bytes: &[u8]) -> anyhow::Result<(u16, Value)> {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            anyhow!(
                "no HTTP response from the agent ({} bytes: {:?})",
                bytes.len(),
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )
        })?;
    let head = String::from_utf8_lossy(&bytes[..split]);
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("bad status line: {head}"))?;
    let body = &bytes[split + 4..];
    let value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body).context("decode the agent's JSON answer")?
    };
    Ok((status, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_a_response() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\":true}").ok();
        assert_eq!(r, Some((200, json!({"a": true}))));
        assert!(parse_response(b"garbage").is_err());
    }
}
