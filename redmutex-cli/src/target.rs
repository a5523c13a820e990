//! Which Redis to talk to: `--redis`, else `REDMUTEX_REDIS`, else `REDIS_URL`, else
//! localhost — and how to show a URL without its password.

use redis::aio::ConnectionManager;
use redmutex::Locker;

use crate::exit::Failure;

/// The default when nothing is configured.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The Redis URLs to use. `--redis` (repeatable) wins over the environment;
/// `REDMUTEX_REDIS` may hold several, comma-separated.
pub fn urls(flags: &[String], env: impl Fn(&str) -> Option<String>) -> Vec<String> {
    if !flags.is_empty() {
        return flags.to_vec();
    }
    if let Some(list) = env("REDMUTEX_REDIS").filter(|v| !v.trim().is_empty()) {
        return list
            .split(',')
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
            .collect();
    }
    if let Some(url) = env("REDIS_URL").filter(|v| !v.trim().is_empty()) {
        return vec![url.trim().to_owned()];
    }
    vec![DEFAULT_URL.to_owned()]
}

/// How to log in to every server, besides the URLs: `--tls-ca`, `--user`, `--password`.
#[derive(Debug, Default, Clone)]
pub struct Access {
    /// A CA (PEM) to trust for `rediss://` URLs instead of the system's roots.
    pub tls_ca: Option<Vec<u8>>,
    /// The ACL user, overriding any in the URLs.
    pub user: Option<String>,
    /// The password, overriding any in the URLs. Never printed.
    pub password: Option<String>,
}

impl Access {
    /// The client for one URL, with these credentials and this CA.
    fn client(&self, url: &str) -> Result<redis::Client, Failure> {
        use redis::IntoConnectionInfo;
        let invalid = |e: redis::RedisError| {
            Failure::usage(format!("invalid Redis URL {}: {e}", redact(url)))
        };
        let mut info = url.into_connection_info().map_err(invalid)?;
        if self.user.is_some() || self.password.is_some() {
            let mut settings = info.redis_settings().clone();
            if let Some(user) = &self.user {
                settings = settings.set_username(user);
            }
            if let Some(password) = &self.password {
                settings = settings.set_password(password);
            }
            info = info.set_redis_settings(settings);
        }
        match &self.tls_ca {
            None => redis::Client::open(info).map_err(invalid),
            Some(_) if !url.starts_with("rediss://") => Err(Failure::usage(format!(
                "--tls-ca is for rediss:// URLs, not {}",
                redact(url)
            ))),
            Some(ca) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            )
            .map_err(invalid),
        }
    }
}

/// A locker over the URLs: one URL is one server, connected now so that a wrong address
/// or password is reported at once; several are independent Redlock nodes, connected
/// lazily, because a node that is down is what the quorum is there for.
pub async fn locker(
    urls: &[String],
    access: &Access,
) -> Result<Locker<ConnectionManager>, Failure> {
    // A waiting `exec`/`acquire --wait` is woken by the holder's release rather than
    // polling; the subscriber connection is only opened if it has to wait.
    let clients = urls
        .iter()
        .map(|url| access.client(url))
        .collect::<Result<Vec<_>, _>>()?;
    let locker = if let ([url], [client]) = (urls, clients.as_slice()) {
        let conn = redmutex::connect_client(client.clone())
            .await
            .map_err(|e| connect_failure(&e, url, urls))?;
        Locker::new(conn)
    } else {
        let mut conns = Vec::with_capacity(urls.len());
        for (url, client) in urls.iter().zip(&clients) {
            conns.push(
                redmutex::connect_lazy_client(client.clone())
                    .map_err(|e| connect_failure(&e, url, urls))?,
            );
        }
        Locker::redlock(conns).map_err(|e| Failure::from_lock_error(&e, urls))?
    };
    locker
        .with_wake_up(clients)
        .map_err(|e| Failure::from_lock_error(&e, urls))
}

fn connect_failure(e: &redmutex::Error, url: &str, urls: &[String]) -> Failure {
    let mut failure = Failure::from_lock_error(e, urls);
    failure.message = format!("cannot connect to {}: {}", redact(url), failure.message);
    failure
}

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
        if let Some(password) = password(url) {
            if !password.is_empty() {
                text = text.replace(&password, "***");
            }
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

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn precedence() {
        let flags = vec!["redis://flag:1".to_owned()];
        let all = [
            ("REDMUTEX_REDIS", "redis://a:1, redis://b:2"),
            ("REDIS_URL", "redis://c:3"),
        ];
        assert_eq!(urls(&flags, env(&all)), ["redis://flag:1"]);
        assert_eq!(urls(&[], env(&all)), ["redis://a:1", "redis://b:2"]);
        assert_eq!(
            urls(&[], env(&[("REDIS_URL", "redis://c:3")])),
            ["redis://c:3"]
        );
        assert_eq!(urls(&[], env(&[("REDMUTEX_REDIS", " ")])), [DEFAULT_URL]);
        assert_eq!(urls(&[], env(&[])), [DEFAULT_URL]);
    }

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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn password() -> impl Strategy<Value = String> {
            // Upper case marks it (users and hosts here are lower case); ':' and '@' are
            // allowed inside a password and make the split harder.
            r"PW[A-Za-z0-9!$&'()*+,;=._~%@:-]{0,12}"
        }

        proptest! {
            #[test]
            fn any_text_is_a_client_or_a_usage_error(
                text in prop_oneof![
                    r"\PC{0,40}",
                    r"(redis|rediss|unix|redis\+unix|http)://[!-~]{0,30}",
                ],
                tls in any::<bool>(),
            ) {
                let access = Access {
                    tls_ca: tls.then(|| b"not a certificate".to_vec()),
                    ..Access::default()
                };
                if let Err(failure) = access.client(&text) {
                    prop_assert_eq!(failure.code, Failure::usage("").code, "{}", failure.message);
                }
                let _ = redact(&text);
                let _ = scrub(&text, std::slice::from_ref(&text));
                prop_assert!(!urls(&[], |_| Some(text.clone())).iter().any(String::is_empty));
            }

            #[test]
            fn a_password_is_never_shown(
                scheme in "redis|rediss",
                user in "[a-z]{0,8}",
                password in password(),
                host in "[a-z]{1,10}|127\\.0\\.0\\.1",
                port in proptest::option::of(1u16..),
                path in "(/[0-9]{1,2})?",
            ) {
                let port = port.map(|p| format!(":{p}")).unwrap_or_default();
                let url = format!("{scheme}://{user}:{password}@{host}{port}{path}");
                let shown = redact(&url);
                prop_assert!(!shown.contains(&password), "{url} → {shown}");
                prop_assert!(shown.starts_with(&format!("{scheme}://{user}:***@")), "{shown}");
                let message = format!("connection to {url} failed: {password} rejected");
                prop_assert!(!scrub(&message, std::slice::from_ref(&url)).contains(&password));
                if let Err(failure) = Access::default().client(&url) {
                    prop_assert!(!failure.message.contains(&password), "{}", failure.message);
                }
            }
        }
    }
}
