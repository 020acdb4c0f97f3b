//! Where people's browsers reach this server (`ctxsync server --public-url`): the one
//! home of that address, so page links are full URLs a person can open (and a later
//! sign-in flow finds its callback base here too).

use std::fmt;
use std::net::SocketAddr;

/// An absolute `http`/`https` URL with no credentials, query or fragment; kept without a
/// trailing slash so a path joins onto it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    /// The default when `--public-url` is not given: the HTTP listener's own address,
    /// but only on loopback (a browser on this machine reaches it as is). A wildcard or
    /// remote address says nothing of the name browsers use, so there is no default.
    pub fn for_listener(addr: SocketAddr, tls: bool) -> Option<Self> {
        let scheme = if tls { "https" } else { "http" };
        addr.ip()
            .is_loopback()
            .then(|| Self(format!("{scheme}://{addr}")))
    }

    /// `path` (starting with `/`) under this URL.
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }

    /// The URL as text, without a trailing slash.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for PublicUrl {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let url = reqwest::Url::parse(raw).map_err(|e| {
            format!("`{raw}` is not an absolute URL ({e}); give one like https://ctxsync.example")
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "`{raw}` is not an http or https URL; give the address browsers open, e.g. https://ctxsync.example"
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("`{raw}` names no host"));
        }
        // The URL is printed in every link: a password in it would be printed too.
        if !url.username().is_empty() || url.password().is_some() {
            return Err("the public URL must not carry a user name or password".to_owned());
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "`{raw}` has a query or fragment; give only the scheme, host, port and path prefix"
            ));
        }
        Ok(Self(url.as_str().trim_end_matches('/').to_owned()))
    }
}

impl fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_and_joins_paths() {
        let url: PublicUrl = "https://ctxsync.example/".parse().unwrap();
        assert_eq!(url.join("/chats/1"), "https://ctxsync.example/chats/1");
        let url: PublicUrl = "http://10.0.0.5:8080/ctxsync/".parse().unwrap();
        assert_eq!(url.as_str(), "http://10.0.0.5:8080/ctxsync");
    }

    #[test]
    fn refuses_what_is_not_a_plain_absolute_web_url_in_words() {
        for (raw, words) in [
            ("ctxsync.example", "is not an absolute URL"),
            ("/chats", "is not an absolute URL"),
            ("ftp://ctxsync.example", "is not an http or https URL"),
            ("https://ctxsync.example/?a=1", "has a query or fragment"),
            ("https://ctxsync.example/#top", "has a query or fragment"),
            (
                "https://me:pw@ctxsync.example",
                "must not carry a user name",
            ),
        ] {
            let error = raw.parse::<PublicUrl>().unwrap_err();
            assert!(error.contains(words), "{raw}: {error}");
            assert!(!error.contains("pw@"), "{raw}: {error}");
        }
    }

    #[test]
    fn defaults_only_on_loopback() {
        let loopback = PublicUrl::for_listener("127.0.0.1:4780".parse().unwrap(), false);
        assert_eq!(loopback.unwrap().as_str(), "http://127.0.0.1:4780");
        let v6 = PublicUrl::for_listener("[::1]:4780".parse().unwrap(), true);
        assert_eq!(v6.unwrap().as_str(), "https://[::1]:4780");
        assert_eq!(
            PublicUrl::for_listener("0.0.0.0:4780".parse().unwrap(), false),
            None
        );
    }
}
