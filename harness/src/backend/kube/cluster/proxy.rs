//! Which proxy, if any, a client reaches the API server through, decided as kubectl (client-go)
//! decides it, not as kube-rs 5 does.
//!
//! client-go: a kubeconfig cluster's `proxy-url` is used as it is, whatever the environment
//! (`staging/src/k8s.io/client-go/tools/clientcmd/client_config.go`, `ClientConfig`: the
//! cluster's `ProxyURL` becomes `rest.Config.Proxy`); otherwise the transport's proxy is
//! `http.ProxyFromEnvironment` (`staging/src/k8s.io/client-go/transport/cache.go`,
//! `tlsCache.get`), which is Go's `golang.org/x/net/http/httpproxy` (`proxyForURL`,
//! `useProxy`, `config.init`): `HTTPS_PROXY` (or `https_proxy`) for an `https://` server,
//! `HTTP_PROXY` for `http://`, never for `localhost` or a loopback address, and not for a
//! host `NO_PROXY` (or `no_proxy`) matches.
//!
//! kube-rs 5 reads `HTTPS_PROXY` too but checks `NO_PROXY` against the proxy's own address
//! instead of the server's (`ConfigLoader::proxy_url`), applies it to a kubeconfig's
//! `proxy-url` as well, and proxies loopback: with `HTTPS_PROXY` set, `--backend kind`'s
//! 127.0.0.1 would go through a corporate proxy. So the harness decides and sets
//! `Config::proxy_url` itself.

use http::Uri;
use std::net::IpAddr;

/// Where the decision came from (shown in errors, so the operator knows what to change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxySource {
    /// The kubeconfig cluster's `proxy-url`.
    Kubeconfig,
    /// The environment variable named.
    Environment(&'static str),
}

impl std::fmt::Display for ProxySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxySource::Kubeconfig => write!(f, "the kubeconfig's proxy-url"),
            ProxySource::Environment(name) => write!(f, "${name}"),
        }
    }
}

/// The proxy to reach `server` through: the kubeconfig's `proxy-url` when set, else the
/// environment's (read through `env`, so tests need not change the process's), unless the
/// server is loopback or `NO_PROXY` matches it. An address that is no proxy URL is an error
/// naming where it came from.
pub fn proxy_for(
    server: &Uri,
    kubeconfig_proxy: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<(Uri, ProxySource)>, (ProxySource, String)> {
    let nonempty = |name: &'static str| {
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (v, name))
    };
    if let Some(proxy) = kubeconfig_proxy.filter(|p| !p.trim().is_empty()) {
        return parse(proxy, ProxySource::Kubeconfig).map(Some);
    }
    let (value, name) = match server.scheme_str() {
        Some("https") => match nonempty("HTTPS_PROXY").or_else(|| nonempty("https_proxy")) {
            Some(found) => found,
            None => return Ok(None),
        },
        Some("http") => match nonempty("HTTP_PROXY").or_else(|| nonempty("http_proxy")) {
            Some(found) => found,
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let no_proxy = nonempty("NO_PROXY")
        .or_else(|| nonempty("no_proxy"))
        .map(|(v, _)| v)
        .unwrap_or_default();
    if !use_proxy(server, &no_proxy) {
        return Ok(None);
    }
    parse(&value, ProxySource::Environment(name)).map(Some)
}

/// A proxy address as Go reads one (`parseProxy`): a URL of scheme `http`, `https` or
/// `socks5`, or a bare `host:port`, taken as `http://`.
fn parse(value: &str, source: ProxySource) -> Result<(Uri, ProxySource), (ProxySource, String)> {
    let value = value.trim();
    let with_scheme = if value.contains("://") {
        value.to_owned()
    } else {
        format!("http://{value}")
    };
    let uri: Uri = with_scheme
        .parse()
        .map_err(|e| (source.clone(), format!("{value:?} is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https" | "socks5") if uri.host().is_some() => Ok((uri, source)),
        Some("http" | "https" | "socks5") => {
            Err((source, format!("{value:?} names no proxy host")))
        }
        other => Err((
            source,
            format!(
                "{value:?} has the scheme {:?}; a proxy is http://, https:// or socks5://",
                other.unwrap_or_default()
            ),
        )),
    }
}

/// Whether a client reaches `server` through the environment's proxy, as Go's `useProxy`
/// decides with `no_proxy` (comma-separated: `*`; CIDRs; IPs with an optional port; domains,
/// each matching itself and its subdomains, `.domain` and `*.domain` only subdomains, with an
/// optional port).
fn use_proxy(server: &Uri, no_proxy: &str) -> bool {
    let Some(host) = server.host() else {
        return true;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let port = server
        .port_u16()
        .unwrap_or(if server.scheme_str() == Some("http") {
            80
        } else {
            443
        })
        .to_string();
    let ip = host.parse::<IpAddr>().ok();
    if host == "localhost" || ip.is_some_and(|ip| ip.is_loopback()) {
        return false;
    }
    for entry in no_proxy.split(',') {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.is_empty() {
            continue;
        }
        if entry == "*" {
            return false;
        }
        if let Some((network, bits)) = entry.split_once('/')
            && let (Ok(network), Ok(bits)) = (network.parse::<IpAddr>(), bits.parse::<u8>())
        {
            if ip.is_some_and(|ip| in_network(ip, network, bits)) {
                return false;
            }
            continue;
        }
        let (entry_host, entry_port) = split_host_port(&entry);
        if entry_host.is_empty() {
            continue;
        }
        let port_matches = entry_port.is_none_or(|p| p == port);
        if let Ok(entry_ip) = entry_host.parse::<IpAddr>() {
            if ip == Some(entry_ip) && port_matches {
                return false;
            }
            continue;
        }
        let entry_host = entry_host.strip_prefix('*').unwrap_or(entry_host);
        let (suffix, match_host) = match entry_host.strip_prefix('.') {
            Some(_) => (entry_host.to_owned(), false),
            None => (format!(".{entry_host}"), true),
        };
        if (host.ends_with(&suffix) || (match_host && host == suffix[1..])) && port_matches {
            return false;
        }
    }
    true
}

/// `NO_PROXY` and `no_proxy` as Go reads them, where kube-rs 5 would refuse them: Go skips an
/// empty entry (`httpproxy.config.init`: `if len(p) == 0 { continue }`), so `a,b,` or `a,,b`
/// is what shells and `.env` files often leave behind; kube-rs's `NoProxy::from_str` fails
/// with "comma-separated value is empty" whenever any proxy is set (`ConfigLoader::proxy_url`,
/// inside `Config::from_custom_kubeconfig`, before the harness decides with [`proxy_for`]),
/// and every client fails (a value of blanks only too: "unexpected empty input"). The
/// variable Go reads (`NO_PROXY`, else `no_proxy`) when it has an empty entry, with its value
/// without them, or both unset when nothing is left (`None`); the caller hands them to the
/// harness's own process again (`cli::main`), as the environment cannot be changed without
/// `unsafe` once threads may read it. Nothing else is rewritten: an entry is matched as Go
/// matches it, by [`proxy_for`].
pub fn tolerant_no_proxy(
    env: impl Fn(&str) -> Option<String>,
) -> Vec<(&'static str, Option<String>)> {
    // Go reads the first of NO_PROXY, no_proxy that is not empty (`getEnvAny`), blanks and
    // all; kube-rs too, but it refuses a blank one ("unexpected empty input").
    let (name, value) = match env("NO_PROXY").filter(|v| !v.is_empty()) {
        Some(value) => ("NO_PROXY", value),
        None => match env("no_proxy").filter(|v| !v.is_empty()) {
            Some(value) => ("no_proxy", value),
            None => return Vec::new(),
        },
    };
    let entries: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if !entries.is_empty() && entries.len() == value.split(',').count() {
        return Vec::new();
    }
    if !entries.is_empty() {
        return vec![(name, Some(entries.join(",")))];
    }
    // Nothing left: unset, and so the other spelling too, which Go ignored while this one
    // was set (it would otherwise be read in its place).
    vec![("NO_PROXY", None), ("no_proxy", None)]
}

/// `host:port`, `[v6]:port` or a bare host (Go's `net.SplitHostPort`, falling back to the
/// whole entry as the host).
fn split_host_port(entry: &str) -> (&str, Option<&str>) {
    if let Some(rest) = entry.strip_prefix('[')
        && let Some((host, after)) = rest.split_once(']')
    {
        return (host, after.strip_prefix(':'));
    }
    match entry.rsplit_once(':') {
        // One colon: host and port; more: a bare IPv6 address.
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        _ => (entry, None),
    }
}

fn in_network(ip: IpAddr, network: IpAddr, bits: u8) -> bool {
    match (ip, network) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn decide(server: &str, kubeconfig: Option<&str>, env: &[(&str, &str)]) -> Option<String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        proxy_for(&server.parse().unwrap(), kubeconfig, |name| {
            env.get(name).cloned()
        })
        .unwrap()
        .map(|(uri, _)| uri.to_string())
    }

    const PROXY: (&str, &str) = ("HTTPS_PROXY", "http://proxy.corp:3128");

    #[test]
    fn the_environments_proxy_is_used_unless_no_proxy_or_loopback_says_otherwise() {
        let remote = "https://api.cluster.example:6443";
        assert_eq!(
            decide(remote, None, &[PROXY]).as_deref(),
            Some("http://proxy.corp:3128/")
        );
        assert_eq!(
            decide(remote, None, &[("https_proxy", "proxy.corp:3128")]).as_deref(),
            Some("http://proxy.corp:3128/"),
            "a bare host:port is http://"
        );
        assert_eq!(decide(remote, None, &[]), None);
        // Kind's API server and the double: loopback is never proxied (Go's `useProxy`).
        for local in [
            "https://127.0.0.1:6443",
            "https://localhost:6443",
            "https://[::1]:6443",
        ] {
            assert_eq!(decide(local, None, &[PROXY]), None, "{local}");
        }
        // HTTPS_PROXY is for https:// servers, HTTP_PROXY for http://.
        assert_eq!(decide("http://api.cluster.example", None, &[PROXY]), None);
        assert!(
            decide(
                "http://api.cluster.example",
                None,
                &[("HTTP_PROXY", "socks5://s:1080")]
            )
            .is_some()
        );
        for (no_proxy, proxied) in [
            ("cluster.example", false),
            (".cluster.example", false),
            ("*.cluster.example", false),
            ("api.cluster.example", false),
            ("api.cluster.example:6443", false),
            ("api.cluster.example:443", true),
            ("other.example, cluster.example", false),
            ("luster.example", true),
            ("*", false),
            ("", true),
        ] {
            assert_eq!(
                decide(remote, None, &[PROXY, ("NO_PROXY", no_proxy)]).is_some(),
                proxied,
                "NO_PROXY={no_proxy:?}"
            );
        }
        // `.domain` matches subdomains only; `no_proxy` is read when NO_PROXY is unset.
        assert!(
            decide(
                "https://cluster.example",
                None,
                &[PROXY, ("no_proxy", ".cluster.example")]
            )
            .is_some()
        );
        let ip = "https://10.1.2.3:6443";
        for (no_proxy, proxied) in [
            ("10.0.0.0/8", false),
            ("10.1.2.3", false),
            ("10.1.2.3:6443", false),
            ("10.1.2.3:443", true),
            ("192.168.0.0/16", true),
        ] {
            assert_eq!(
                decide(ip, None, &[PROXY, ("NO_PROXY", no_proxy)]).is_some(),
                proxied,
                "NO_PROXY={no_proxy:?}"
            );
        }
    }

    #[test]
    fn a_kubeconfig_proxy_url_wins_over_the_environment_and_no_proxy() {
        assert_eq!(
            decide(
                "https://127.0.0.1:6443",
                Some("socks5://jump:1080"),
                &[PROXY, ("NO_PROXY", "*")]
            )
            .as_deref(),
            Some("socks5://jump:1080/")
        );
    }

    #[test]
    fn a_proxy_that_is_no_url_is_named_with_where_it_came_from() {
        let env = |name: &str| (name == "HTTPS_PROXY").then(|| "ftp://proxy:21".to_owned());
        let (source, problem) = proxy_for(&"https://api:6443".parse().unwrap(), None, env)
            .err()
            .unwrap();
        assert_eq!(source, ProxySource::Environment("HTTPS_PROXY"));
        assert!(
            problem.contains("http://, https:// or socks5://"),
            "{problem}"
        );
        let (source, _) = proxy_for(
            &"https://api:6443".parse().unwrap(),
            Some("http://"),
            |_| None,
        )
        .err()
        .unwrap();
        assert_eq!(source, ProxySource::Kubeconfig);
    }

    #[test]
    fn no_proxy_loses_only_its_empty_entries_and_is_left_alone_without_them() {
        let fixes = |env: &[(&str, &str)]| {
            let env: HashMap<String, String> = env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            tolerant_no_proxy(|name| env.get(name).cloned())
        };
        // A trailing comma, a doubled one, blanks between: the entries stay, in order.
        assert_eq!(
            fixes(&[("NO_PROXY", "example.com, 10.0.0.0/8,"), ("no_proxy", "a")]),
            vec![("NO_PROXY", Some("example.com,10.0.0.0/8".to_owned()))]
        );
        // no_proxy only where NO_PROXY is unset or empty, as Go reads them.
        assert_eq!(
            fixes(&[("NO_PROXY", ""), ("no_proxy", " a,, b ")]),
            vec![("no_proxy", Some("a,b".to_owned()))]
        );
        // Nothing left (or blanks only, which kube-rs refuses): both unset, so that no_proxy,
        // which Go ignored, is not read in NO_PROXY's place.
        for nothing in [", ,", "  "] {
            assert_eq!(
                fixes(&[("NO_PROXY", nothing), ("no_proxy", "api.example.com")]),
                vec![("NO_PROXY", None), ("no_proxy", None)]
            );
        }
        // Nothing to drop, an empty or unset variable: nothing done, so the harness runs
        // itself again at most once.
        assert!(fixes(&[("NO_PROXY", "example.com,.internal:6443")]).is_empty());
        assert!(fixes(&[("NO_PROXY", ""), ("no_proxy", "")]).is_empty());
        assert!(fixes(&[]).is_empty());
        // What it leaves is decided as before: Go skips an empty entry too.
        let server: Uri = "https://api.example.com:6443".parse().unwrap();
        for (given, cleaned) in [("example.com,", "example.com"), (",,*", "*")] {
            assert_eq!(use_proxy(&server, given), use_proxy(&server, cleaned));
            assert!(!use_proxy(&server, cleaned));
        }
    }
}
