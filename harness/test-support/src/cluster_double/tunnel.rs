//! The Pod side of a port-forward tunnel, shared by the websocket and the SPDY forms: the
//! bytes read from the Pod's port relayed as they come, then why the connection failed.

use futures_util::StreamExt;
use kandev_harness::backend::local::attach::{Exit, Output};

/// The largest frame the double sends.
pub(crate) const FRAME: usize = 32 * 1024;
/// At most this much of a tunnel's stderr goes into its error message.
const MAX_ERROR: usize = 4096;

/// The Pod side of one port-forward tunnel, for the websocket and the SPDY forms alike: each
/// chunk the bridge reads from the Pod's port goes to `relay` as it comes (`false`: the client
/// is gone, and so is the tunnel: `None`); then why the connection failed, if it did (the
/// bridge's error, or its stderr when it exited non-zero).
pub(crate) async fn pod_side<Relayed: std::future::Future<Output = bool>>(
    mut output: std::pin::Pin<Box<dyn futures_util::Stream<Item = anyhow::Result<Output>> + Send>>,
    exit: Exit,
    mut relay: impl FnMut(Vec<u8>) -> Relayed,
) -> Option<Option<String>> {
    let mut stderr = Vec::new();
    let mut failure = None;
    while let Some(chunk) = output.next().await {
        match chunk {
            Ok(Output::Stdout(bytes)) => {
                if !relay(bytes).await {
                    return None;
                }
            }
            Ok(Output::Stderr(bytes)) => {
                let room = MAX_ERROR.saturating_sub(stderr.len());
                stderr.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            Err(e) => {
                failure = Some(format!("{e:#}"));
                break;
            }
        }
    }
    Some(match (failure, exit.code().await) {
        (Some(e), _) => Some(e),
        (None, Ok(Some(0))) => None,
        (None, Ok(_)) => Some(String::from_utf8_lossy(&stderr).trim().to_owned()),
        (None, Err(e)) => Some(format!("{e:#}")),
    })
}
