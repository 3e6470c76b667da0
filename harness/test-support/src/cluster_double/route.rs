//! A request's path and query as the API server reads them: the route (group, version,
//! resource, namespace, name, subresource), decoded query parameters, label selectors.

use serde_json::{Value, json};

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
    Equals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One requirement of a label selector.
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
        match self.operator {
            Operator::In | Operator::Equals => value.is_some_and(listed),
            Operator::NotIn | Operator::NotEquals => value.is_none_or(|v| !listed(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(want)) = (
                    value.and_then(number),
                    self.values.first().and_then(|v| number(v)),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

/// A label selector's token (`Token` in apimachinery `pkg/labels/selector.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
    End,
    /// A run of operator characters that is no operator: the lexer's message.
    Error(String),
}

impl Token {
    fn literal(&self) -> String {
        match self {
            Token::Identifier(s) | Token::Error(s) => s.clone(),
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            Token::Not => "!".into(),
            Token::Equals => "=".into(),
            Token::DoubleEquals => "==".into(),
            Token::NotEquals => "!=".into(),
            Token::GreaterThan => ">".into(),
            Token::LessThan => "<".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Comma => ",".into(),
            Token::End => String::new(),
        }
    }

    /// In a value's place `in` and `notin` are identifiers (`ParserContext` `Values`).
    fn as_value(&self) -> Token {
        match self {
            Token::In | Token::NotIn => Token::Identifier(self.literal()),
            other => other.clone(),
        }
    }
}

/// `Lexer.Lex` over the whole selector.
fn lex(selector: &str) -> Vec<Token> {
    let special = |c: u8| b"=!(),><".contains(&c);
    let white = |c: u8| b" \t\r\n".contains(&c);
    let bytes = selector.as_bytes();
    let mut at = 0;
    let mut tokens = Vec::new();
    loop {
        while at < bytes.len() && white(bytes[at]) {
            at += 1;
        }
        if at >= bytes.len() {
            tokens.push(Token::End);
            return tokens;
        }
        if special(bytes[at]) {
            // The longest run of special characters that is an operator.
            let operator = |s: &str| match s {
                "!" => Some(Token::Not),
                "!=" => Some(Token::NotEquals),
                "(" => Some(Token::Open),
                ")" => Some(Token::Close),
                "," => Some(Token::Comma),
                "=" => Some(Token::Equals),
                "==" => Some(Token::DoubleEquals),
                ">" => Some(Token::GreaterThan),
                "<" => Some(Token::LessThan),
                _ => None,
            };
            let start = at;
            let mut last: Option<(Token, usize)> = None;
            while at < bytes.len() && special(bytes[at]) {
                let run = &selector[start..=at];
                match operator(run) {
                    Some(token) => last = Some((token, at + 1)),
                    None if last.is_some() => break,
                    None => {}
                }
                at += 1;
            }
            match last {
                Some((token, end)) => {
                    tokens.push(token);
                    at = end;
                }
                None => tokens.push(Token::Error(format!(
                    "error expected: keyword found '{}'",
                    &selector[start..at]
                ))),
            }
            continue;
        }
        let start = at;
        while at < bytes.len() && !special(bytes[at]) && !white(bytes[at]) {
            at += 1;
        }
        tokens.push(match &selector[start..at] {
            "in" => Token::In,
            "notin" => Token::NotIn,
            word => Token::Identifier(word.to_owned()),
        });
    }
}

/// The tokens of a selector and where the parser is.
struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    /// `lookahead(Values)`.
    fn peek(&self) -> Token {
        self.tokens
            .get(self.at)
            .cloned()
            .unwrap_or(Token::End)
            .as_value()
    }

    /// `consume(KeyAndOperator)` (`as_value` makes it `consume(Values)`).
    fn next(&mut self) -> Token {
        let token = self.tokens.get(self.at).cloned().unwrap_or(Token::End);
        self.at += 1;
        token
    }
}

/// `labels.Parse` (apimachinery `pkg/labels/selector.go`): the selector's requirements, or
/// the parser's error (the API server answers it 400 `BadRequest`).
pub(crate) fn parse_selector(selector: &str) -> Result<Vec<Requirement>, String> {
    let mut p = Parser {
        tokens: lex(selector),
        at: 0,
    };
    let mut requirements = Vec::new();
    loop {
        match p.peek() {
            Token::Identifier(_) | Token::Not => {
                let requirement = parse_requirement(&mut p)
                    .map_err(|e| format!("unable to parse requirement: {e}"))?;
                requirements.push(requirement);
                match p.next().as_value() {
                    Token::End => return Ok(requirements),
                    Token::Comma => match p.peek() {
                        Token::Identifier(_) | Token::Not => {}
                        other => {
                            return Err(format!(
                                "found '{}', expected: identifier after ','",
                                other.literal()
                            ));
                        }
                    },
                    other => {
                        return Err(format!(
                            "found '{}', expected: ',' or 'end of string'",
                            other.literal()
                        ));
                    }
                }
            }
            Token::End => return Ok(requirements),
            other => {
                return Err(format!(
                    "found '{}', expected: !, identifier, or 'end of string'",
                    other.literal()
                ));
            }
        }
    }
}

/// `parseRequirement`, without `NewRequirement`'s key and value syntax checks
/// (`IsQualifiedName`, `IsValidLabelValue`): the harness selects on its own labels, which
/// the real API server admits (`tests/real_api_server/names.rs`), and the corpus shows the
/// real server refusing a bad key or value (issue 39).
fn parse_requirement(p: &mut Parser) -> Result<Requirement, String> {
    let mut token = p.next().as_value();
    let negated = token == Token::Not;
    if negated {
        token = p.next().as_value();
    }
    let Token::Identifier(key) = token else {
        return Err(format!("found '{}', expected: identifier", token.literal()));
    };
    if matches!(p.peek(), Token::End | Token::Comma) {
        let operator = if negated {
            Operator::DoesNotExist
        } else {
            Operator::Exists
        };
        return Ok(Requirement {
            key,
            operator,
            values: Vec::new(),
        });
    }
    let operator = match p.next() {
        Token::In => Operator::In,
        Token::NotIn => Operator::NotIn,
        Token::Equals | Token::DoubleEquals => Operator::Equals,
        Token::NotEquals => Operator::NotEquals,
        Token::GreaterThan => Operator::GreaterThan,
        Token::LessThan => Operator::LessThan,
        other => {
            return Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                other.literal()
            ));
        }
    };
    let mut values: Vec<String> = Vec::new();
    let insert = |v: &str, values: &mut Vec<String>| {
        if !values.iter().any(|w| w == v) {
            values.push(v.to_owned());
        }
    };
    match operator {
        Operator::In | Operator::NotIn => {
            let open = p.next().as_value();
            if open != Token::Open {
                return Err(format!("found '{}' expected: '('", open.literal()));
            }
            match p.peek() {
                Token::Close => {
                    p.next();
                    insert("", &mut values);
                }
                Token::Identifier(_) | Token::Comma => {
                    // `parseIdentifiersList`: empty entries are the empty value.
                    loop {
                        match p.next().as_value() {
                            Token::Identifier(v) => {
                                insert(&v, &mut values);
                                match p.peek() {
                                    Token::Comma => continue,
                                    Token::Close => break,
                                    other => {
                                        return Err(format!(
                                            "found '{}', expected: ',' or ')'",
                                            other.literal()
                                        ));
                                    }
                                }
                            }
                            Token::Comma => {
                                if values.is_empty() {
                                    insert("", &mut values);
                                }
                                match p.peek() {
                                    Token::Close => {
                                        insert("", &mut values);
                                        break;
                                    }
                                    Token::Comma => insert("", &mut values),
                                    _ => {}
                                }
                            }
                            other => {
                                return Err(format!(
                                    "found '{}', expected: ',', or identifier",
                                    other.literal()
                                ));
                            }
                        }
                    }
                    let close = p.next().as_value();
                    if close != Token::Close {
                        return Err(format!("found '{}', expected: ')'", close.literal()));
                    }
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        other.literal()
                    ));
                }
            }
        }
        _ => match p.peek() {
            Token::End | Token::Comma => insert("", &mut values),
            _ => match p.next().as_value() {
                Token::Identifier(v) => insert(&v, &mut values),
                other => {
                    return Err(format!("found '{}', expected: identifier", other.literal()));
                }
            },
        },
    }
    if matches!(operator, Operator::GreaterThan | Operator::LessThan)
        && let Some(v) = values.iter().find(|v| v.parse::<i64>().is_err())
    {
        return Err(format!(
            "values[0]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
            json!(v)
        ));
    }
    values.sort();
    Ok(Requirement {
        key,
        operator,
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for (selector, error) in [
            (
                "tier in a",
                "unable to parse requirement: found 'a' expected: '('",
            ),
            ("tier=a b", "found 'b', expected: ',' or 'end of string'"),
            ("tier,", "found '', expected: identifier after ','"),
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
        ] {
            assert_eq!(parse_selector(selector).unwrap_err(), error, "{selector}");
        }
        assert!(parse_selector("n>x").is_err());
        assert!(parse_selector("Bad Key=a").is_err());
    }
}
