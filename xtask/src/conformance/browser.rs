//! The person's browser in the conformance client: from the authorization URL ctxsync
//! answered, through the authorization server's redirects, to ctxsync's sign-in callback,
//! whose page says whether the agent signed in. The suite's authorization server asks the
//! person nothing: its `/authorize` redirects straight back with a code.

use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::http::{self, LoopbackUrl};

/// The callback's path under ctxsync's chat API URL (the redirect URI the agent names).
pub(crate) const CALLBACK_PATH: &str = "/oauth/callback";
/// How many redirects the browser follows before it gives up, as a browser would.
const MAX_REDIRECTS: usize = 5;

/// Opens `authorization_url` and follows its redirects until ctxsync's callback (on
/// `ctxsync_port`) answers, all before `deadline`; answers the callback page's text when
/// it answered 200, and fails with it otherwise.
pub(crate) fn sign_in(
    authorization_url: &LoopbackUrl,
    ctxsync_port: u16,
    deadline: Instant,
) -> Result<String> {
    let mut url = authorization_url.clone();
    for _ in 0..=MAX_REDIRECTS {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .with_context(|| format!("out of time before the browser opened {url}"))?;
        let page = http::get(&url, left)?;
        // Every listener is on loopback, each on its own port: the port and the path
        // tell ctxsync's callback from the authorization server.
        if url.port() == ctxsync_port && url.path() == CALLBACK_PATH {
            let text = page_text(&page.body);
            if page.status != 200 {
                bail!(
                    "ctxsync's sign-in callback answered {}: {text}",
                    page.status
                );
            }
            return Ok(text);
        }
        match (page.status, page.location) {
            (301 | 302 | 303 | 307 | 308, Some(location)) => {
                url = url
                    .join(&location)
                    .with_context(|| format!("following the redirect from {url}"))?;
            }
            (status, _) => bail!(
                "{url} answered {status} instead of sending the browser back to ctxsync's \
                 callback: {}",
                page_text(&page.body)
            ),
        }
    }
    bail!(
        "the browser was redirected {MAX_REDIRECTS} times without reaching ctxsync's \
         callback; the last hop was to {url}"
    )
}

/// What a person reads on a page: the body's text without tags, its five common
/// entities undone, its whitespace collapsed; `(empty page)` when there is none.
fn page_text(html: &str) -> String {
    // The head repeats the title the body's heading says.
    let body = html.find("<body").map_or(html, |start| &html[start..]);
    let mut text = String::with_capacity(body.len());
    let mut in_tag = false;
    for c in body.chars() {
        match c {
            '<' => in_tag = true,
            // A tag ends a word: `<h1>A</h1><p>B</p>` reads "A B".
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&amp;", "&");
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        "(empty page)".to_owned()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_page_reads_as_its_words() {
        for (html, words) in [
            (
                "<!doctype html>\n<html><head><title>Sign-in failed</title></head>\
                 <body><main><h1>Sign-in failed</h1><p>the agent said &quot;no&quot; &amp; \
                 gave up</p></main></body></html>\n",
                "Sign-in failed the agent said \"no\" & gave up",
            ),
            ("plain words,\n  no markup", "plain words, no markup"),
            ("<p></p>", "(empty page)"),
            ("", "(empty page)"),
        ] {
            assert_eq!(page_text(html), words);
        }
    }

    /// A loopback listener answering each connection with the next of `answers`, the
    /// request lines it was sent kept for the test.
    fn serve(answers: Vec<String>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = std::thread::spawn(move || {
            let mut requests = Vec::new();
            for answer in answers {
                let (mut stream, _) = listener.accept().unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    let n = stream.read(&mut buf).unwrap();
                    assert!(n > 0, "the request ended before its headers");
                    request.extend_from_slice(&buf[..n]);
                }
                let request = String::from_utf8(request).unwrap();
                requests.push(request.lines().next().unwrap_or_default().to_owned());
                stream.write_all(answer.as_bytes()).unwrap();
            }
            requests
        });
        (port, served)
    }

    fn answer(status: &str, location: Option<&str>, body: &str) -> String {
        let location = location
            .map(|l| format!("Location: {l}\r\n"))
            .unwrap_or_default();
        format!(
            "HTTP/1.1 {status}\r\n{location}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn follows_redirects_to_the_callback() {
        let page = "<html><body><h1>Signed in to scenario</h1></body></html>";
        // One listener plays both: the port says which is the callback.
        let (port, served) = serve(vec![
            answer("302 Found", Some("/tenant1/authorize?again=1"), ""),
            answer(
                "303 See Other",
                Some("/oauth/callback?code=test-auth-code&state=s"),
                "",
            ),
            answer("200 OK", None, page),
        ]);
        let start =
            LoopbackUrl::parse(&format!("http://localhost:{port}/authorize?state=s")).unwrap();
        assert_eq!(
            sign_in(&start, port, soon()).unwrap(),
            "Signed in to scenario"
        );
        assert_eq!(
            served.join().unwrap(),
            [
                "GET /authorize?state=s HTTP/1.1",
                "GET /tenant1/authorize?again=1 HTTP/1.1",
                "GET /oauth/callback?code=test-auth-code&state=s HTTP/1.1",
            ]
        );
    }

    #[test]
    fn a_refusing_callback_fails_with_its_words() {
        let page = "<html><head><title>Sign-in to scenario failed</title></head><body>\
                    <h1>Sign-in to scenario failed</h1><p>the token endpoint answered 401</p>\
                    </body></html>";
        let (port, served) = serve(vec![answer("502 Bad Gateway", None, page)]);
        let callback = LoopbackUrl::parse(&format!(
            "http://127.0.0.1:{port}/oauth/callback?code=c&state=s"
        ))
        .unwrap();
        let error = sign_in(&callback, port, soon()).unwrap_err().to_string();
        assert_eq!(
            error,
            "ctxsync's sign-in callback answered 502: Sign-in to scenario failed the token \
             endpoint answered 401"
        );
        served.join().unwrap();
    }

    #[test]
    fn an_authorization_server_that_does_not_redirect_fails() {
        let (port, served) = serve(vec![answer("400 Bad Request", None, "invalid_request")]);
        let start =
            LoopbackUrl::parse(&format!("http://127.0.0.1:{port}/authorize?state=s")).unwrap();
        // Another port: the callback is never reached.
        let error = sign_in(&start, port.wrapping_add(1), soon())
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "http://127.0.0.1:{port}/authorize answered 400 instead of sending the browser \
                 back to ctxsync's callback: invalid_request"
            )
        );
        served.join().unwrap();
    }

    #[test]
    fn the_browser_stops_after_five_redirects_and_never_leaves_loopback() {
        let again = || answer("302 Found", Some("/authorize?again"), "");
        let (port, served) = serve((0..=MAX_REDIRECTS).map(|_| again()).collect());
        let start = LoopbackUrl::parse(&format!("http://127.0.0.1:{port}/authorize")).unwrap();
        let error = sign_in(&start, port.wrapping_add(1), soon())
            .unwrap_err()
            .to_string();
        assert!(error.contains("redirected 5 times"), "{error}");
        assert_eq!(served.join().unwrap().len(), MAX_REDIRECTS + 1);

        let (port, served) = serve(vec![answer(
            "302 Found",
            Some("https://idp.example.com/login?state=s"),
            "",
        )]);
        let start = LoopbackUrl::parse(&format!("http://127.0.0.1:{port}/authorize")).unwrap();
        let error = format!(
            "{:#}",
            sign_in(&start, port.wrapping_add(1), soon()).unwrap_err()
        );
        assert!(
            error.contains("https://idp.example.com/login is https"),
            "{error}"
        );
        assert!(!error.contains("state=s"), "{error}");
        served.join().unwrap();
    }
}
