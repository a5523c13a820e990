//! How a URL or a message is shown: without passwords, and with Redlock nodes named by
//! their address rather than their position.

/// The node's URL, redacted, for messages about node `node` of a Redlock locker.
pub fn node_name(urls: &[String], node: usize) -> String {
    urls.get(node)
        .map_or_else(|| format!("node {node}"), |url| redact(url))
}

/// `text` (a library message) as the CLI shows it: Redlock nodes, which the library names
/// by position (`node 2:`), named by their redacted address, and no password anywhere.
pub fn name_nodes(text: &str, urls: &[String]) -> String {
    let mut text = text.to_owned();
    if urls.len() > 1 {
        for node in 0..urls.len() {
            let name = node_name(urls, node);
            text = text.replace(&format!("node {node}:"), &format!("{name}:"));
        }
    }
    scrub(&text, urls)
}

/// The URL with any password replaced by `***`: `redis://user:***@host:6379/0`.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let redacted = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        // `redis://password@host` is read as a password by some clients.
        None if !userinfo.is_empty() => "***".to_owned(),
        None => String::new(),
    };
    format!("{}{}{}", &url[..scheme_end], redacted, &rest[at..])
}

/// Removes every occurrence of the passwords in `urls` from `text` (error messages of
/// the Redis client may quote the address they failed on).
pub fn scrub(text: &str, urls: &[String]) -> String {
    let mut text = text.to_owned();
    for url in urls {
        if let Some(password) = password(url)
            && !password.is_empty()
        {
            text = text.replace(&password, "***");
        }
    }
    text
}

fn password(url: &str) -> Option<String> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    Some(match userinfo.find(':') {
        Some(colon) => userinfo[colon + 1..].to_owned(),
        None => userinfo.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_named_by_their_redacted_url() {
        let two = vec!["redis://:pw@a:1".to_owned(), "redis://b:2".to_owned()];
        assert_eq!(node_name(&two, 0), "redis://:***@a:1");
        assert_eq!(node_name(&two, 1), "redis://b:2");
        assert_eq!(node_name(&two, 7), "node 7");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://:s3cret@host:6379/0"),
            "redis://:***@host:6379/0"
        );
        assert_eq!(
            redact("rediss://user:p@ss@host:6380"),
            "rediss://user:***@host:6380"
        );
        assert_eq!(redact("redis://onlypass@host"), "redis://***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("not a url"), "not a url");
        let urls = vec!["redis://u:hunter2@h:1".to_owned()];
        assert_eq!(
            scrub("failed on redis://u:hunter2@h:1: refused", &urls),
            "failed on redis://u:***@h:1: refused"
        );
    }
}
