//! Image references as the engine and a kubelet read them, checked before anything is built:
//! distribution/reference's grammar (`reference.go`, "Grammar"):
//!
//! ```text
//! reference        := name [ ":" tag ] [ "@" digest ]
//! name             := [domain '/'] remote-name
//! domain           := host [':' port-number]
//! domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
//! path-component   := alpha-numeric [separator alpha-numeric]*
//! alpha-numeric    := /[a-z0-9]+/
//! separator        := /[_.]|__|[-]*/
//! tag              := /[\w][\w.-]{0,127}/
//! digest           := algorithm ":" /[0-9a-fA-F]{32,}/
//! ```
//!
//! So a tag may hold uppercase letters (`worker:V1.2`), and so may a registry host, but a
//! repository path may not. Which first component is a registry host is Docker's rule
//! (`normalize.go`, `splitDockerDomain` as Debian's 20.10 engine vendors it): one holding a
//! `.` or a `:`, or `localhost`; otherwise it is a path component.

/// Why `reference` is not one, with the fix; Ok when it is.
pub(crate) fn check(reference: &str) -> Result<(), String> {
    let problem = |why: String, fix: &str| {
        Err(format!(
            "{reference:?} is not a valid image reference: it {why}\n  fix: {fix}"
        ))
    };
    const FORM: &str = "pass [registry/]repository[:tag][@sha256:<64 hex>]";
    if reference.is_empty() {
        return problem("is empty".into(), FORM);
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    };
    if let Some(digest) = digest
        && !valid_digest(digest)
    {
        return problem(
            format!("has a digest {digest:?} that is not algorithm:hex (at least 32 hex digits)"),
            "pass name@sha256:<64 hex> (docker inspect --format '{{index .RepoDigests 0}}' IMAGE)",
        );
    }
    // A tag follows the last ':' after the last '/' (a registry's port comes before a '/').
    let (name, tag) = match rest.rfind(':') {
        Some(colon) if !rest[colon..].contains('/') => (&rest[..colon], Some(&rest[colon + 1..])),
        _ => (rest, None),
    };
    if let Some(tag) = tag
        && !valid_tag(tag)
    {
        return problem(
            format!(
                "has a tag {tag:?} that is not 1 to 128 letters, digits, '_', '.' or '-' (not starting with '.' or '-')"
            ),
            FORM,
        );
    }
    let (domain, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
            (Some(first), rest)
        }
        _ => (None, name),
    };
    if let Some(domain) = domain
        && !valid_domain(domain)
    {
        return problem(
            format!("has a registry host {domain:?} that is not host[:port]"),
            FORM,
        );
    }
    if path.len() > 255 {
        return problem("has a repository longer than 255 characters".into(), FORM);
    }
    if path.split('/').all(valid_path_component) {
        return Ok(());
    }
    let lower = path.to_ascii_lowercase();
    if lower != path && lower.split('/').all(valid_path_component) {
        let fixed = reference.replacen(path, &lower, 1);
        return problem(
            format!(
                "has the repository {path:?}: a repository must be lowercase (a tag and a registry host may hold uppercase)"
            ),
            &format!("use {fixed:?} (retag the image: docker tag {reference} {fixed})"),
        );
    }
    problem(
        format!(
            "has the repository {path:?}, whose parts must be lowercase letters and digits joined by '.', '_', '__' or '-'"
        ),
        FORM,
    )
}

fn valid_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut i = 0;
    loop {
        // alpha-numeric
        let start = i;
        while bytes.get(i).is_some_and(alnum) {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i == bytes.len() {
            return true;
        }
        // separator: '.', '_', '__' or a run of '-'
        match bytes.get(i) {
            Some(b'.') => i += 1,
            Some(b'_') => {
                i += 1;
                if bytes.get(i) == Some(&b'_') {
                    i += 1;
                }
            }
            Some(b'-') => {
                while bytes.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => return false,
        }
    }
}

fn valid_tag(tag: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    tag.len() <= 128
        && tag.chars().next().is_some_and(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-')
}

fn valid_domain(domain: &str) -> bool {
    let (host, port) = match domain.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
        return false;
    }
    // An IPv6 host in brackets.
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host.split('.').all(|c| {
            !c.is_empty()
                && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-')
                && !c.starts_with('-')
                && !c.ends_with('-')
        })
}

fn valid_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let algorithm_ok = algorithm.split(['+', '.', '-', '_']).all(|c| {
        c.chars().next().is_some_and(|f| f.is_ascii_alphabetic())
            && c.chars().all(|ch| ch.is_ascii_alphanumeric())
    });
    algorithm_ok && hex.len() >= 32 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn references_follow_distributions_grammar() {
        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for good in [
            "w".to_owned(),
            "kandev-acceptance/worker:abc".into(),
            "worker:V1.2-RC_3".into(),
            "Registry.Example:5000/team/worker:Latest".into(),
            "localhost/w:x".into(),
            "[::1]:5000/w".into(),
            "a__b/c.d/e---f:1".into(),
            format!("registry.example/w@{digest}"),
            format!("registry.example/w:t@{digest}"),
        ] {
            assert_eq!(check(&good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-x",
            "a b",
            "/x",
            "w:",
            "w:.hidden",
            "w@sha256:0123",
            "a/-b",
            "a__-b",
            "bad_host!.example/w",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
        // An uppercase repository names the fix: its lowercase form.
        let problem = check("registry.example/Team/Worker:V1").unwrap_err();
        assert!(problem.contains("must be lowercase"), "{problem}");
        assert!(
            problem.contains("\"registry.example/team/worker:V1\""),
            "{problem}"
        );
        let problem = check("Upper/Case").unwrap_err();
        assert!(problem.contains("\"upper/case\""), "{problem}");
    }
}
