//! Which Redis to talk to: `--redis`, else `REDMUTEX_REDIS`, else `REDIS_URL`, else
//! localhost, and how to log in to it.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redmutex::Locker;
use tokio::time::Instant;

use crate::exit::Failure;
use crate::redact::redact;

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
/// or password is reported at once — a server that refuses or does not answer (it may be
/// restarting) is waited for, at most `wait_redis`, saying so on stderr; several are
/// independent Redlock nodes, connected lazily, because a node that is down is what the
/// quorum is there for (the caller waits for a quorum of them).
pub async fn locker(
    urls: &[String],
    access: &Access,
    wait_redis: Duration,
) -> Result<Locker<ConnectionManager>, Failure> {
    // A waiting `exec`/`acquire --wait` is woken by the holder's release rather than
    // polling; the subscriber connection is only opened if it has to wait.
    let clients = urls
        .iter()
        .map(|url| access.client(url))
        .collect::<Result<Vec<_>, _>>()?;
    let locker = if let ([url], [client]) = (urls, clients.as_slice()) {
        Locker::new(connect_within(client, url, wait_redis).await?)
    } else {
        let mut conns = Vec::with_capacity(urls.len());
        for (url, client) in urls.iter().zip(&clients) {
            conns.push(
                redmutex::connection::connect_lazy_client(client.clone())
                    .map_err(|e| connect_failure(&e, url, urls))?,
            );
        }
        Locker::redlock(conns).map_err(|e| Failure::from_lock_error(&e, urls))?
    };
    locker
        .with_wake_up(clients)
        .map_err(|e| Failure::from_lock_error(&e, urls))
}

/// Connects to the one server, trying again every half second while its errors are
/// transient (refused, reset, no answer), at most `within`; a wrong password or a refusal
/// for good ends it at once.
async fn connect_within(
    client: &redis::Client,
    url: &str,
    within: Duration,
) -> Result<ConnectionManager, Failure> {
    let give_up = Instant::now() + within;
    let mut said = false;
    loop {
        let attempt = redmutex::connection::connect_client(client.clone());
        // A silent server would hold one attempt past `within` (the connection's own
        // timeout): the wait ends when it said it would.
        let answered = match within.is_zero() {
            true => Ok(attempt.await),
            false => tokio::time::timeout_at(give_up, attempt).await,
        };
        let error = match answered {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) => e,
            Err(_) => {
                let message = format!("cannot connect to {}: no answer", redact(url));
                let waited = format!("{message} (waited {within:?})");
                return Err(Failure::new(crate::exit::UNAVAILABLE, waited));
            }
        };
        let left = give_up.saturating_duration_since(Instant::now());
        if !error.is_transient() || left.is_zero() {
            let mut failure = connect_failure(&error, url, &[url.to_owned()]);
            if said {
                failure.message = format!("{} (waited {within:?})", failure.message);
            }
            return Err(failure);
        }
        if !said {
            let why = crate::redact::scrub(&error.to_string(), &[url.to_owned()]);
            crate::output::say(&format!(
                "waiting up to {within:?} for Redis at {}: {why}",
                redact(url)
            ));
            said = true;
        }
        tokio::time::sleep(crate::reach::ASK_EVERY.min(left)).await;
    }
}

fn connect_failure(e: &redmutex::Error, url: &str, urls: &[String]) -> Failure {
    let mut failure = Failure::from_lock_error(e, urls);
    failure.message = format!("cannot connect to {}: {}", redact(url), failure.message);
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::scrub;

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
