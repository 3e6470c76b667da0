//! A forward proxy for tests, as a corporate one sits between a workstation and a cluster:
//! HTTP `CONNECT host:port` on 127.0.0.1 (a random port), tunnelling the bytes both ways,
//! recording each target it was asked for. A client that goes around it (or cannot use it)
//! leaves no record.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub struct ConnectProxy {
    /// `http://127.0.0.1:<port>`
    pub url: String,
    targets: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConnectProxy {
    /// The `CONNECT` targets asked so far, in order.
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

/// Starts the proxy.
pub async fn start() -> ConnectProxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let targets = Arc::new(Mutex::new(Vec::new()));
    let seen = targets.clone();
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(tunnel(client, seen.clone()));
        }
    });
    ConnectProxy { url, targets, task }
}

async fn tunnel(client: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut client = BufReader::new(client);
    let mut request = String::new();
    if client.read_line(&mut request).await.is_err() {
        return;
    }
    // The rest of the head (Host, Proxy-Authorization, ...), up to the blank line.
    loop {
        let mut line = String::new();
        match client.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let mut words = request.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        let _ = client
            .get_mut()
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    seen.lock().unwrap().push(target.to_owned());
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        let _ = client
            .get_mut()
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    if client
        .get_mut()
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
