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
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

pub(crate) fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The container a pods/log or pods/exec request names (`container`), else the Pod's first,
/// as the API server defaults it for a Pod of one container.
pub(crate) fn container_param(query: &[(String, String)], pod: &Value) -> String {
    param(query, "container")
        .or_else(|| pod["spec"]["containers"][0]["name"].as_str())
        .unwrap_or_default()
        .to_owned()
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

/// Whether `labels` satisfy `selector` (one that does not parse selects nothing; the
/// request was refused before, [`parse_selector`]).
pub(crate) fn matches_selector(labels: &Value, selector: &str) -> bool {
    parse_selector(selector)
        .is_ok_and(|requirements| requirements.iter().all(|r| r.matches(labels)))
}

/// A label selector's operator (apimachinery `pkg/selection/operator.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One requirement of a label selector (`k=v` is `k in (v)`, `k!=v` is `k notin (v)`).
#[derive(Debug, Clone)]
pub(crate) struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// `Requirement.Matches` (apimachinery `pkg/labels/selector.go`).
    fn matches(&self, labels: &Value) -> bool {
        let value = labels.get(&self.key).and_then(Value::as_str);
        let listed = |v: &str| self.values.iter().any(|w| w == v);
        let number = |v: &str| v.parse::<i64>().ok();
        let compared = || Some((value.and_then(number)?, number(self.values.first()?)?));
        match self.operator {
            Operator::In => value.is_some_and(listed),
            Operator::NotIn => value.is_none_or(|v| !listed(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan => compared().is_some_and(|(have, want)| have > want),
            Operator::LessThan => compared().is_some_and(|(have, want)| have < want),
        }
    }
}

/// A label selector's requirements (`labels.Parse`'s grammar: `k`, `!k`, `k=v`, `k==v`,
/// `k!=v`, `k>n`, `k<n`, `k in (v,...)`, `k notin (v,...)`, joined by commas), or an error
/// the API server answers 400 `BadRequest`. The real API server referees the syntax and its
/// messages (`tests/real_api_server/corpus.rs`, which also lists that the keys and values
/// are not judged: `IsQualifiedName`, `IsValidLabelValue`); the double evaluates what the
/// harness sends.
pub(crate) fn parse_selector(selector: &str) -> Result<Vec<Requirement>, String> {
    let mut requirements = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in selector.char_indices().chain([(selector.len(), ',')]) {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            // The end too (unbalanced parentheses included), unless the selector is empty.
            ',' if (depth == 0 && at < selector.len())
                || (at == selector.len() && !selector.trim().is_empty()) =>
            {
                let term = &selector[start..at];
                requirements.push(
                    requirement(term.trim())
                        .ok_or_else(|| format!("unable to parse requirement: '{term}'"))?,
                );
                start = at + 1;
            }
            _ => {}
        }
    }
    Ok(requirements)
}

/// One requirement, None when it does not parse.
fn requirement(term: &str) -> Option<Requirement> {
    let word = |w: &str| {
        let w = w.trim();
        (!w.chars()
            .any(|c| c.is_whitespace() || "=!(),<>".contains(c)))
        .then(|| w.to_owned())
    };
    let with = |key: &str, operator, values: Vec<String>| {
        Some(Requirement {
            key: word(key).filter(|k| !k.is_empty())?,
            operator,
            values,
        })
    };
    if let Some(key) = term.strip_prefix('!') {
        return with(key, Operator::DoesNotExist, Vec::new());
    }
    for (symbol, operator) in [
        ("!=", Operator::NotIn),
        ("==", Operator::In),
        ("=", Operator::In),
        (">", Operator::GreaterThan),
        ("<", Operator::LessThan),
    ] {
        if let Some((key, value)) = term.split_once(symbol) {
            let value = word(value)?;
            let numeric =
                matches!(operator, Operator::In | Operator::NotIn) || value.parse::<i64>().is_ok();
            return with(key, operator, vec![value]).filter(|_| numeric);
        }
    }
    let mut words = term.splitn(2, char::is_whitespace);
    let (key, rest) = (words.next()?, words.next().unwrap_or("").trim_start());
    if rest.is_empty() {
        return with(key, Operator::Exists, Vec::new());
    }
    let (operator, list) = match rest.strip_prefix("notin") {
        Some(list) => (Operator::NotIn, list),
        None => (Operator::In, rest.strip_prefix("in")?),
    };
    let list = list.trim().strip_prefix('(')?.strip_suffix(')')?;
    let values = list.split(',').map(word).collect::<Option<Vec<_>>>()?;
    with(key, operator, values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_parse_and_match_as_apimachinerys() {
        let labels = json!({"tier": "a", "extra": "x", "n": "5"});
        for (selector, expected) in [
            ("tier=a", true),
            ("tier==a", true),
            ("tier!=a", false),
            ("tier", true),
            ("!tier", false),
            ("missing", false),
            ("!missing", true),
            ("tier in (a,b)", true),
            ("tier in (b)", false),
            ("tier notin (b)", true),
            ("missing notin (b)", true),
            ("tier in (a),extra", true),
            ("tier,!extra", false),
            ("n>4", true),
            ("n<4", false),
            ("tier=", false),
            ("", true),
            (" tier = a , extra ", true),
        ] {
            assert_eq!(matches_selector(&labels, selector), expected, "{selector}");
        }
        for selector in [
            "tier in a",
            "tier=a b",
            "tier,",
            "=a",
            "n>x",
            "Bad Key=a",
            "a in (b",
        ] {
            assert!(parse_selector(selector).is_err(), "{selector}");
        }
    }
}
