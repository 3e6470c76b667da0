//! A forward proxy for tests, as a corporate one sits between a workstation and a cluster:
//! HTTP `CONNECT host:port`, or SOCKS5 (RFC 1928, no authentication, `CONNECT` to an IPv4
//! address or a name), on 127.0.0.1 (a random port), tunnelling the bytes both ways,
//! recording each target it was asked for. A client that goes around it (or cannot use it)
//! leaves no record.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub struct ConnectProxy {
    /// `http://127.0.0.1:<port>` (or `socks5://...`)
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

/// Starts an HTTP `CONNECT` proxy.
pub async fn start() -> ConnectProxy {
    serve("http", |client, seen| Box::pin(tunnel(client, seen))).await
}

/// Starts a SOCKS5 proxy.
pub async fn start_socks5() -> ConnectProxy {
    serve("socks5", |client, seen| Box::pin(socks5(client, seen))).await
}

type Handled = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

async fn serve(
    scheme: &str,
    handle: fn(TcpStream, Arc<Mutex<Vec<String>>>) -> Handled,
) -> ConnectProxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let targets = Arc::new(Mutex::new(Vec::new()));
    let seen = targets.clone();
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(handle(client, seen.clone()));
        }
    });
    ConnectProxy { url, targets, task }
}

/// One SOCKS5 connection: the no-authentication greeting, a `CONNECT`, then the tunnel.
async fn socks5(mut client: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 2];
    if client.read_exact(&mut head).await.is_err() || head[0] != 5 {
        return;
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    if client.read_exact(&mut methods).await.is_err() || !methods.contains(&0) {
        let _ = client.write_all(&[5, 0xff]).await;
        return;
    }
    if client.write_all(&[5, 0]).await.is_err() {
        return;
    }
    let mut request = [0u8; 4];
    if client.read_exact(&mut request).await.is_err() || request[..3] != [5, 1, 0] {
        return;
    }
    let host = match request[3] {
        1 => {
            let mut ip = [0u8; 4];
            if client.read_exact(&mut ip).await.is_err() {
                return;
            }
            std::net::Ipv4Addr::from(ip).to_string()
        }
        3 => {
            let mut length = [0u8; 1];
            if client.read_exact(&mut length).await.is_err() {
                return;
            }
            let mut name = vec![0u8; usize::from(length[0])];
            if client.read_exact(&mut name).await.is_err() {
                return;
            }
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => {
            // Address type not supported.
            let _ = client.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0]).await;
            return;
        }
    };
    let mut port = [0u8; 2];
    if client.read_exact(&mut port).await.is_err() {
        return;
    }
    let target = format!("{host}:{}", u16::from_be_bytes(port));
    seen.lock().unwrap().push(target.clone());
    let Ok(mut upstream) = TcpStream::connect(&target).await else {
        let _ = client.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await;
        return;
    };
    if client
        .write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0])
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
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
