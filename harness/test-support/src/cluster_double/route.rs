//! A request's path and query as the API server reads them: the route (group, version,
//! resource, namespace, name, subresource), decoded query parameters, label selectors.

use serde_json::Value;

/// A parsed API path.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

impl Route {
    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.group, self.resource)
    }
    pub(crate) fn resource_with_sub(&self) -> String {
        match &self.sub {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// `a=b&c=d` decoded (`%XX`, `+`).
pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

pub(crate) fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

pub(crate) fn parse_route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => (String::new(), (*version).to_owned(), rest),
        ["apis", group, version, rest @ ..] => ((*group).to_owned(), (*version).to_owned(), rest),
        _ => return None,
    };
    let owned = |s: Option<&&str>| s.map(|s| (*s).to_owned());
    Some(match rest {
        ["namespaces", ns, resource, more @ ..] => Route {
            group,
            version,
            resource: (*resource).to_owned(),
            namespace: Some((*ns).to_owned()),
            name: owned(more.first()),
            sub: owned(more.get(1)),
        },
        [resource, more @ ..] => Route {
            group,
            version,
            resource: (*resource).to_owned(),
            namespace: None,
            name: owned(more.first()),
            sub: owned(more.get(1)),
        },
        [] => return None,
    })
}

/// `k=v,k!=v,k` (the equality-based selector forms).
pub(crate) fn matches_selector(labels: &Value, selector: &str) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                labels[k.trim()].as_str() != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                labels[k.trim()].as_str() == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                labels.get(k.trim()).is_none()
            } else {
                labels.get(term).is_some()
            }
        })
}
