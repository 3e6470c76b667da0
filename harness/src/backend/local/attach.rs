//! Streams into the local backend's Pods as a kubelet serves them: a command with its stdin,
//! stdout and stderr attached while it runs (what `pods/exec` relays), and a byte tunnel to a
//! port in the Pod's network namespace (what `pods/portforward` relays). The backend's own
//! [`Backend::exec`](crate::backend::Backend::exec) collects a command's output and returns
//! it when the command ends; a server relaying streams (the wire-level cluster double of the
//! test support) uses these instead, so that bytes flow as they are produced and a slow
//! reader slows the writer (nothing is buffered beyond the engine's and the sockets' own
//! buffers).

use super::engine::{other, verified_container};
use crate::backend::{PodRef, Result};
use anyhow::anyhow;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::time::Duration;
use tokio::io::AsyncWrite;

/// Where the infra container (which holds the Pod's network namespace) has the mock agent,
/// whose `bridge HOST:PORT` verb copies stdin to a TCP connection and the connection to stdout
/// and whose `tunnel` verb multiplexes many such connections.
const BRIDGE: &str = "/kandev-mock-agent";

/// Bytes a command wrote, in the order it wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// A command running with its streams attached.
pub struct Attached {
    /// The command's stdin; shutting it down ends the command's stdin. When stdin was not
    /// asked for, writes go nowhere.
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
    /// The command's output as it comes; ends once the command has ended and its output is
    /// drained.
    pub output: Pin<Box<dyn Stream<Item = anyhow::Result<Output>> + Send>>,
    /// The command's exit code, once `output` has ended.
    pub exit: Exit,
}

/// The exit code of an attached command.
pub struct Exit {
    docker: Docker,
    id: String,
}

impl Exit {
    /// The exit of the engine's exec `id`.
    pub(super) fn of(docker: Docker, id: String) -> Self {
        Self { docker, id }
    }

    /// The exit code (`None`: the engine recorded none). The output stream can end a moment
    /// before the engine records the exit, so this waits (bounded) for the command to stop.
    pub async fn code(&self) -> anyhow::Result<Option<i64>> {
        for _ in 0..250 {
            let inspect = self.docker.inspect_exec(&self.id).await?;
            if inspect.running != Some(true) {
                return Ok(inspect.exit_code);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(anyhow!(
            "the command's output ended but it still runs after 5 s"
        ))
    }
}

/// Streams into the Pods the local backend made on one engine (each container checked by the
/// Pod's UID before anything runs in it).
#[derive(Clone)]
pub struct PodStreams {
    docker: Docker,
}

impl PodStreams {
    pub fn new(docker: Docker) -> Self {
        Self { docker }
    }

    /// Runs `argv` in `container` of `pod` (as the container's user) with its output attached,
    /// and its stdin when `stdin` is set.
    pub async fn exec(
        &self,
        pod: &PodRef,
        container: &str,
        argv: Vec<String>,
        stdin: bool,
    ) -> Result<Attached> {
        let name = verified_container(&self.docker, pod, container).await?;
        self.attach(&name, argv, stdin)
            .await
            .map_err(|e| other(format!("exec in {}/{container}", pod.name), e))
    }

    /// A byte tunnel to `port` on 127.0.0.1 in the Pod's network namespace, as a kubelet's
    /// port-forward dials it there: the infra container (which holds the namespace) runs the
    /// mock agent's `bridge`, whose stdin is the tunnel's input and whose stdout its output.
    /// A refused connection ends it with a non-zero exit and the reason on stderr.
    pub async fn port(&self, pod: &PodRef, port: u16) -> Result<Attached> {
        let name = verified_container(&self.docker, pod, "infra").await?;
        let argv = vec![
            BRIDGE.to_owned(),
            "bridge".to_owned(),
            format!("127.0.0.1:{port}"),
        ];
        self.attach(&name, argv, true)
            .await
            .map_err(|e| other(format!("port-forward to {}:{port}", pod.name), e))
    }

    /// The Pod's port-forward tunnel: the mock agent's `tunnel` in the infra container, its
    /// stdin and stdout carrying framed connections (`kandev_agent_wire::tunnel`'s frames; `tunnel.rs`).
    pub(super) async fn tunnel(&self, pod: &PodRef) -> Result<Attached> {
        let name = verified_container(&self.docker, pod, "infra").await?;
        let argv = vec![BRIDGE.to_owned(), "tunnel".to_owned()];
        self.attach(&name, argv, true)
            .await
            .map_err(|e| other(format!("port-forward tunnel to {}", pod.name), e))
    }

    async fn attach(
        &self,
        engine_name: &str,
        argv: Vec<String>,
        stdin: bool,
    ) -> anyhow::Result<Attached> {
        let created = self
            .docker
            .create_exec(
                engine_name,
                CreateExecOptions {
                    cmd: Some(argv),
                    attach_stdin: Some(stdin),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        let options = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: Some(1 << 20),
        };
        match self.docker.start_exec(&created.id, Some(options)).await? {
            StartExecResults::Attached { output, input } => Ok(Attached {
                input,
                output: Box::pin(output.filter_map(|chunk| async move {
                    match chunk {
                        Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                            Some(Ok(Output::Stdout(message.to_vec())))
                        }
                        Ok(LogOutput::StdErr { message }) => {
                            Some(Ok(Output::Stderr(message.to_vec())))
                        }
                        Ok(LogOutput::StdIn { .. }) => None,
                        Err(e) => Some(Err(e.into())),
                    }
                })),
                exit: Exit::of(self.docker.clone(), created.id),
            }),
            StartExecResults::Detached => Err(anyhow!("the engine started the exec detached")),
        }
    }
}
