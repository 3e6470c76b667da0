//! Is it a Docker API? What answers the Docker CLI with an HTTP error (`Error response from
//! daemon`) may be a daemon refusing this client (an authorization plugin) or any other HTTP
//! server (its 404 page): a raw `GET /_ping` tells them apart. Shared by the scenarios that
//! ask listeners (`daemon::socket_only`, `isolation::cross_session`).

/// What the Docker CLI prints when an HTTP server answered its request with an error: a
/// daemon refusing it (an authorization plugin's "authorization denied"), or any other HTTP
/// server (its 404 page).
pub const ANSWERED: &str = "Error response from daemon";

/// What Go's HTTP server answers plain HTTP on a TLS listener (`net/http`, `server.go`).
const TLS_LISTENER: &str = "Client sent an HTTP request to an HTTPS server";

/// What moby's authorization middleware answers a request a plugin refuses.
pub const DENIED_BY_PLUGIN: &str = "authorization denied by plugin";

/// The shell function `docker_ping PREFIX HOST PORT`: `GET /_ping` of HOST:PORT (HOST an IPv4
/// address, or an IPv6 one in brackets) with the first HTTP client there (curl, python3,
/// perl — Debian's essential perl-base —, wget), each run after PREFIX (word-split: `''`, or
/// `nsenter -t PID -n` for another network namespace), printing the status line, the
/// headers and the body; status 127 and a line saying so when there is none. No proxy: the
/// listener itself is asked, whatever the image's `http_proxy` says.
pub const PING_FUNCTION: &str = r#"docker_ping() {
  pre=$1; h=$2; p=$3; bare=${h#\[}; bare=${bare%\]}
  if command -v curl >/dev/null 2>&1; then $pre timeout 8 curl -sS -g -i -m 5 --noproxy '*' "http://$h:$p/_ping"
  elif command -v python3 >/dev/null 2>&1; then $pre timeout 8 python3 -c 'import sys, http.client as c
x = c.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=5); x.request("GET", "/_ping"); r = x.getresponse()
print("HTTP/1.1", r.status); [print(k + ": " + v) for k, v in r.getheaders()]; print(); print(r.read(256).decode("latin-1"))' "$bare" "$p"
  elif command -v perl >/dev/null 2>&1; then $pre timeout 8 perl -MIO::Socket::IP -e '$s = IO::Socket::IP->new(PeerHost => $ARGV[0], PeerPort => $ARGV[1], Timeout => 5) or die "connect: $@\n"; print $s "GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"; print while <$s>' "$bare" "$p"
  elif command -v wget >/dev/null 2>&1; then $pre timeout 8 wget --no-proxy -S -q -O - -T 5 "http://$h:$p/_ping" 2>&1
  else echo "no HTTP client (curl, python3, perl or wget) here"; return 127; fi
}
"#;

/// The shell function `docker_ping_unix SOCKET`: `GET /_ping` over the unix socket SOCKET (a
/// file's path, or `@NAME` for an abstract one) with the first client there that speaks unix
/// sockets (curl, python3, perl), printing what came back; status 127 and a line saying so
/// when there is none. As [`PING_FUNCTION`], for what answered the Docker CLI with an error.
pub const UNIX_PING_FUNCTION: &str = r#"docker_ping_unix() {
  s=$1; n=${s#@}
  if command -v curl >/dev/null 2>&1; then
    if [ "$n" != "$s" ]; then timeout 8 curl -sS -i -m 5 --abstract-unix-socket "$n" http://docker/_ping
    else timeout 8 curl -sS -i -m 5 --unix-socket "$s" http://docker/_ping; fi
  elif command -v python3 >/dev/null 2>&1; then timeout 8 python3 -c 'import socket, sys
a = sys.argv[1]; a = "\0" + a[1:] if a.startswith("@") else a
x = socket.socket(socket.AF_UNIX); x.settimeout(5); x.connect(a)
x.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"); d = b""
while len(d) < 4096:
    b = x.recv(4096)
    if not b: break
    d += b
print(d.decode("latin-1"))' "$s"
  elif command -v perl >/dev/null 2>&1; then timeout 8 perl -MIO::Socket::UNIX -e '$a = $ARGV[0]; $a =~ s/^\@/\0/; $s = IO::Socket::UNIX->new(Type => IO::Socket::UNIX::SOCK_STREAM(), Peer => $a) or die "connect: $!\n"; print $s "GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"; print while <$s>' "$s"
  else echo "no unix-socket HTTP client (curl, python3 or perl) here"; return 127; fi
}
"#;

/// A script that pings `host:port` from where it runs ([`PING_FUNCTION`]).
pub fn ping_script(host: &str, port: u16) -> String {
    format!("{PING_FUNCTION}docker_ping '' '{host}' {port}\n")
}

/// What a `/_ping` answered.
#[derive(Debug, PartialEq)]
pub enum Ping {
    /// A Docker API (what showed it: its `Api-Version`, its `Server: Docker/...`, or an
    /// authorization plugin's refusal).
    DockerApi(String),
    /// An HTTP server that is not a Docker API answered.
    Other,
    /// No HTTP answer was read (no client here, a reset, a timeout): no evidence either way.
    Unanswered(String),
}

/// Judges what answered the CLI with an HTTP error: `cli` its error output, `exit_code` and
/// `text` what [`PING_FUNCTION`] printed. A Docker API sets `Api-Version` on its answers
/// (moby's `api/server/middleware/version.go`) and `/_ping` answers `OK`; an authorization
/// plugin runs before that middleware and may refuse `/_ping` itself ("authorization denied
/// by plugin", `api/server/middleware/authorization.go`): a daemon all the same. Only an HTTP
/// status line with none of these is another server; no status line is no answer.
pub fn ping_answer(cli: &str, exit_code: Option<i32>, text: &str) -> Ping {
    if cli.contains(DENIED_BY_PLUGIN) {
        return Ping::DockerApi(format!(
            "the CLI's requests were refused: {DENIED_BY_PLUGIN} ..."
        ));
    }
    // The headers only: up to the first empty line (a body line never names a header).
    let header = |wanted: &str| {
        text.lines()
            .take_while(|l| !l.trim().is_empty())
            .find_map(|line| {
                let (name, value) = line.trim().split_once(':')?;
                name.trim()
                    .eq_ignore_ascii_case(wanted)
                    .then(|| value.trim().to_owned())
            })
    };
    if let Some(version) = header("api-version") {
        return Ping::DockerApi(format!("Api-Version {version}"));
    }
    if let Some(server) = header("server").filter(|s| s.starts_with("Docker/")) {
        return Ping::DockerApi(format!("Server {server}"));
    }
    if text.contains(DENIED_BY_PLUGIN) {
        return Ping::DockerApi(format!("its /_ping was refused: {DENIED_BY_PLUGIN} ..."));
    }
    // A TLS listener (dockerd's `--tls` among them) answers plain HTTP with Go's 400 and no
    // headers: that tells nothing of what it serves.
    if text.contains(TLS_LISTENER) {
        return Ping::Unanswered(format!(
            "a TLS listener (\"{TLS_LISTENER}\"): a plain-HTTP /_ping tells nothing"
        ));
    }
    let status_line = text.lines().any(|line| {
        line.trim_start().starts_with("HTTP/1.") || line.trim_start().starts_with("HTTP/2")
    });
    if status_line && exit_code != Some(127) {
        Ping::Other
    } else {
        Ping::Unanswered(format!(
            "no HTTP answer read (exit {}): {}",
            exit_code.map_or("none".into(), |c| c.to_string()),
            text.trim()
        ))
    }
}

/// Test support: a python3 HTTP server on this host's loopback, started with `script` and
/// `mode` as its argument (the script prints its port first); killed when dropped, however
/// the test ends.
#[cfg(test)]
pub struct PythonServer {
    child: std::process::Child,
    pub port: u16,
}

#[cfg(test)]
impl PythonServer {
    pub fn start(script: &str, mode: &str) -> Self {
        let mut child = std::process::Command::new("python3")
            .args(["-c", script, mode])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("the server's port");
        let port = line.trim().parse().expect("a port");
        Self { child, port }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

#[cfg(test)]
impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_is_a_docker_apis_by_its_version_server_or_plugin_and_no_answer_is_unjudged() {
        let curl = "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nDocker-Experimental: false\r\n\r\nOK";
        assert_eq!(
            ping_answer("", Some(0), curl),
            Ping::DockerApi("Api-Version 1.41".into())
        );
        // wget -S: the headers indented on stderr, the body on stdout.
        let wget = "  HTTP/1.1 200 OK\n  Api-Version: 1.43\n  Content-Length: 2\nOK";
        assert_eq!(
            ping_answer("", Some(0), wget),
            Ping::DockerApi("Api-Version 1.43".into())
        );
        // A plugin refusing /_ping itself, before the version middleware: still a daemon.
        let refused = "HTTP/1.1 403 Forbidden\nContent-Type: application/json\n\n{\"message\":\"authorization denied by plugin opa: denied\"}";
        assert!(matches!(
            ping_answer("", Some(22), refused),
            Ping::DockerApi(_)
        ));
        // The CLI's own requests refused by a plugin: a daemon, whatever /_ping said.
        assert!(matches!(
            ping_answer(
                "Error response from daemon: authorization denied by plugin x",
                Some(124),
                ""
            ),
            Ping::DockerApi(_)
        ));
        let server = "HTTP/1.1 500 Internal Server Error\nServer: Docker/28.2.2 (linux)\n\n";
        assert!(matches!(
            ping_answer("", Some(0), server),
            Ping::DockerApi(_)
        ));
        let not_found =
            "HTTP/1.1 404 Not Found\nContent-Type: text/html\n\n<html>File not found</html>";
        assert_eq!(ping_answer("", Some(0), not_found), Ping::Other);
        // A TLS listener tells nothing; a body line is no header.
        let tls = "HTTP/1.0 400 Bad Request\n\nClient sent an HTTP request to an HTTPS server.\n";
        assert!(matches!(ping_answer("", Some(0), tls), Ping::Unanswered(_)));
        let body = "HTTP/1.1 404 Not Found\nContent-Type: text/plain\n\nApi-Version: 1.41\n";
        assert_eq!(ping_answer("", Some(0), body), Ping::Other);
        // OK alone (any health endpoint) is not a Docker API.
        assert_eq!(
            ping_answer("", Some(0), "HTTP/1.1 200 OK\n\nOK"),
            Ping::Other
        );
        // No status line: a reset, a timeout, no client. No evidence either way.
        for (code, text) in [
            (
                Some(56),
                "curl: (56) Recv failure: Connection reset by peer",
            ),
            (Some(124), ""),
            (
                Some(1),
                "Traceback (most recent call last):\nConnectionResetError",
            ),
            (
                Some(127),
                "no HTTP client (curl, python3, perl or wget) here",
            ),
        ] {
            assert!(
                matches!(ping_answer("", code, text), Ping::Unanswered(_)),
                "{code:?} {text}"
            );
        }
    }

    /// Each HTTP client [`PING_FUNCTION`] may find (alone on PATH, as in an image that has
    /// only it: the Debian companion has only perl), against a daemon refusing every request
    /// but `/_ping` and a web server answering 404: the daemon is a Docker API by its
    /// `/_ping`, the web server is not.
    #[test]
    #[ignore = "needs curl, python3, perl and wget: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
    fn every_client_the_ping_may_use_tells_a_daemon_from_a_web_server() {
        let script = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        daemon = sys.argv[1] == "daemon"
        code, body = (200, b"OK") if daemon and self.path == "/_ping" else (404, b"not found")
        self.send_response(code)
        if daemon:
            self.send_header("Api-Version", "1.41")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
        let servers: Vec<_> = ["daemon", "web"]
            .into_iter()
            .map(|mode| PythonServer::start(script, mode))
            .collect();
        let mut seen = Vec::new();
        for client in ["curl", "python3", "perl", "wget"] {
            let bin = tempfile::tempdir().unwrap();
            for tool in [client, "timeout"] {
                // The program itself, not a shim (pyenv's needs bash on PATH).
                let find = match tool {
                    "python3" => "python3 -c 'import sys; print(sys.executable)'".to_owned(),
                    _ => format!("command -v {tool}"),
                };
                let found = std::process::Command::new("sh")
                    .args(["-c", &find])
                    .output()
                    .unwrap();
                let path = String::from_utf8_lossy(&found.stdout).trim().to_owned();
                assert!(!path.is_empty(), "{tool} is not installed");
                std::os::unix::fs::symlink(&path, bin.path().join(tool)).unwrap();
            }
            for (i, server) in servers.iter().enumerate() {
                let port = server.port;
                let out = std::process::Command::new("/bin/sh")
                    .args(["-c", &ping_script("127.0.0.1", port)])
                    .env("PATH", bin.path())
                    .output()
                    .unwrap();
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let answer = ping_answer("", out.status.code(), &text);
                seen.push(format!("{client} {i}: {answer:?}"));
                let expected = if i == 0 {
                    matches!(answer, Ping::DockerApi(_))
                } else {
                    answer == Ping::Other
                };
                assert!(expected, "{client} on {port}: {answer:?} from {text}");
            }
        }
        assert_eq!(seen.len(), 8, "{seen:?}");
    }
}
