//! The harness side of the mock agent's control API, spoken over the backend's port
//! exchange (port-forward; locally an exec bridge) to 127.0.0.1:8765 inside the Pod.

use crate::backend::{Backend, PodRef};
use anyhow::{Context, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const CONTROL_PORT: u16 = 8765;

/// A command for the agent to run as the agent user, with the agent's environment.
#[derive(Debug, Clone, Serialize, Default)]
pub struct AgentExec {
    pub argv: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// A session's environment file (`KEY='value'` lines) the agent loads for this command,
    /// as agentctl starts a session's process with that session's environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_file: Option<String>,
    pub timeout_ms: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub digests: Vec<String>,
}

impl AgentExec {
    /// `sh -c script` in `/workspace`, bounded by `timeout`.
    pub fn sh(script: &str, timeout: Duration) -> Self {
        Self {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            cwd: Some("/workspace".into()),
            timeout_ms: timeout.as_millis() as u64,
            ..Default::default()
        }
    }
    pub fn digests(mut self, paths: &[&str]) -> Self {
        self.digests = paths.iter().map(|p| (*p).to_owned()).collect();
        self
    }
}

/// A file as the agent saw it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct FileDigest {
    pub path: String,
    pub exists: bool,
    pub sha256: Option<String>,
    pub size: Option<u64>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<String>,
}

/// What the agent reports for one command.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct AgentExecResult {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout: String,
    pub stderr: String,
    pub stdout_bytes: usize,
    pub stderr_bytes: usize,
    pub truncated: bool,
    pub digests: Vec<FileDigest>,
}

impl AgentExecResult {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
    pub fn digest(&self, path: &str) -> Option<&FileDigest> {
        self.digests.iter().find(|d| d.path == path)
    }
    /// A short, bounded summary for diagnoses.
    pub fn summary(&self) -> String {
        let tail = |s: &str| {
            s.trim()
                .chars()
                .rev()
                .take(600)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        };
        format!(
            "{}{} after {} ms; stderr: {}; stdout: {}",
            crate::backend::exit_text(self.exit_code),
            if self.timed_out { " (timed out)" } else { "" },
            self.duration_ms,
            tail(&self.stderr),
            tail(&self.stdout)
        )
    }
}

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

    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> anyhow::Result<(u16, Value)> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()?
            .unwrap_or_default();
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
            .request("GET", "/health", None, Duration::from_secs(10))
            .await?;
        if status != 200 {
            bail!("health answered {status}: {body}");
        }
        Ok(body)
    }

    /// `POST /auth/handshake` with the bootstrap nonce; keeps the token.
    pub async fn handshake(&mut self, nonce: &str) -> anyhow::Result<()> {
        let (status, body) = self
            .request(
                "POST",
                "/auth/handshake",
                Some(&json!({"nonce": nonce})),
                Duration::from_secs(10),
            )
            .await?;
        if status != 200 {
            bail!("handshake answered {status}: {body}");
        }
        let token = body
            .get("token")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("handshake answer has no token: {body}"))?;
        self.token = Some(token.to_owned());
        Ok(())
    }

    /// Runs a command as the agent.
    pub async fn exec(&self, exec: &AgentExec) -> anyhow::Result<AgentExecResult> {
        let timeout = Duration::from_millis(exec.timeout_ms) + Duration::from_secs(15);
        let mut exec = exec.clone();
        if exec.env_file.is_none() {
            exec.env_file.clone_from(&self.session_env_file);
        }
        let (status, body) = self
            .request(
                "POST",
                "/api/v1/exec",
                Some(&serde_json::to_value(&exec)?),
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
        let body = json!({"argv": argv, "cwd": "/workspace", "env_file": self.session_env_file});
        let (status, body) = self
            .request(
                "POST",
                "/api/v1/instances",
                Some(&body),
                Duration::from_secs(10),
            )
            .await?;
        if status != 200 {
            bail!("starting the session process answered {status}: {body}");
        }
        body.get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("the instance answer has no id: {body}"))
    }

    /// `DELETE /api/v1/instances/<id>`: ends a session's agent process (agentctl stays);
    /// answers once it has exited, with its exit status.
    pub async fn stop_instance(&self, id: &str) -> anyhow::Result<Value> {
        let (status, body) = self
            .request(
                "DELETE",
                &format!("/api/v1/instances/{id}"),
                None,
                Duration::from_secs(30),
            )
            .await?;
        if status != 200 {
            bail!("ending session process {id} answered {status}: {body}");
        }
        Ok(body)
    }

    /// `GET /api/v1/instances`: the session processes agentctl runs.
    pub async fn instances(&self) -> anyhow::Result<Value> {
        let (status, body) = self
            .request("GET", "/api/v1/instances", None, Duration::from_secs(10))
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
            .request("GET", "/api/v1/identity", None, Duration::from_secs(10))
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
            .request("GET", "/api/v1/identity", None, Duration::from_secs(10))
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

    #[test]
    fn parses_a_response() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\":true}").ok();
        assert_eq!(r, Some((200, json!({"a": true}))));
        assert!(parse_response(b"garbage").is_err());
    }
}
