//! TLS to the control plane (rustls): which certificate authorities the agent trusts, the
//! client configuration, and a refused server certificate put into words for the log.

use std::error::Error;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::{CertificateError, ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tracing::{debug, warn};

use crate::error::PublishError;

/// The certificates of every file, in order; each file may hold several. An unreadable
/// file, one without a certificate, or a certificate that cannot be a trust anchor is an
/// error naming the file.
pub(crate) fn load_ca_files(files: &[PathBuf]) -> Result<RootCertStore, PublishError> {
    let mut roots = RootCertStore::empty();
    for path in files {
        let fail = |reason: String| PublishError::CaCertFile {
            path: path.clone(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
        let mut found = 0usize;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| fail(format!("not valid PEM: {e}")))?;
            found += 1;
            roots
                .add(cert)
                .map_err(|e| fail(format!("certificate {found} cannot be trusted: {e}")))?;
        }
        if found == 0 {
            return Err(fail(
                "holds no certificate (expected PEM `BEGIN CERTIFICATE` sections)".into(),
            ));
        }
    }
    Ok(roots)
}

/// The client configuration for `https://`: the platform's roots plus `extra` (already
/// loaded by [`load_ca_files`]), TLS 1.3 and 1.2, ALPN `h2`. The platform's roots failing
/// to load is fatal only when nothing else would be trusted.
pub(crate) fn client_config(
    url: &str,
    extra: RootCertStore,
) -> Result<Arc<ClientConfig>, PublishError> {
    let mut roots = extra;
    let platform = rustls_native_certs::load_native_certs();
    let (added, ignored) = roots.add_parsable_certificates(platform.certs);
    let errors: Vec<String> = platform.errors.iter().map(ToString::to_string).collect();
    if added == 0 {
        let reason = if errors.is_empty() {
            "none found".to_owned()
        } else {
            errors.join("; ")
        };
        if roots.is_empty() {
            return Err(PublishError::NoTrustedCertificates {
                url: url.to_owned(),
                reason,
            });
        }
        warn!(
            reason,
            "the platform's trusted certificates could not be loaded; trusting only the given CA certificate files"
        );
    } else if !errors.is_empty() || ignored > 0 {
        // Usual on some systems (an odd file in the certificate directory); the rest works.
        debug!(
            added,
            ignored,
            errors = errors.join("; "),
            "some of the platform's trusted certificates were skipped"
        );
    }
    // An explicit provider: the process-wide default panics when several are linked.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PublishError::TlsSetup {
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Why the server's certificate was refused: `reason` in plain words, `detail` as rustls
/// says it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CertificateProblem {
    pub reason: &'static str,
    pub detail: String,
}

/// The certificate refusal somewhere in a connect error's chain, if that is what it was.
pub(crate) fn certificate_problem(error: &(dyn Error + 'static)) -> Option<CertificateProblem> {
    let rustls::Error::InvalidCertificate(problem) = find_rustls_error(error)? else {
        return None;
    };
    let reason = match problem {
        CertificateError::UnknownIssuer => "unknown issuer",
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "certificate not valid for this name"
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired",
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "not yet valid"
        }
        CertificateError::Revoked => "revoked",
        _ => "other",
    };
    Some(CertificateProblem {
        reason,
        detail: problem.to_string(),
    })
}

fn find_rustls_error<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(found) = error.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        // `io::Error::source` skips the error it wraps (tokio-rustls puts rustls's there).
        if let Some(found) = error
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
            .and_then(|inner| find_rustls_error(inner))
        {
            return Some(found);
        }
        next = error.source();
    }
    None
}

/// Whether `host` (as in a URL, IPv6 in brackets) names this machine, so plain http to it
/// never crosses a network.
pub(crate) fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let name = bare.trim_end_matches('.').to_ascii_lowercase();
    // RFC 6761: `localhost` and its subdomains always resolve to loopback.
    name == "localhost" || name.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("transport error")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    fn check(problem: CertificateError, expect: Option<&str>) {
        let wrapped = Outer(io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(problem),
        ));
        assert_eq!(certificate_problem(&wrapped).map(|p| p.reason), expect);
    }

    #[test]
    fn certificate_refusals_are_found_in_the_chain_and_worded() {
        check(CertificateError::UnknownIssuer, Some("unknown issuer"));
        check(
            CertificateError::NotValidForName,
            Some("certificate not valid for this name"),
        );
        check(CertificateError::Expired, Some("expired"));
        check(CertificateError::NotValidYet, Some("not yet valid"));
        check(CertificateError::Revoked, Some("revoked"));
        check(CertificateError::BadSignature, Some("other"));

        let other = Outer(io::Error::new(
            io::ErrorKind::InvalidData,
            "corrupt message",
        ));
        assert_eq!(certificate_problem(&other), None);
        let handshake = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::NoApplicationProtocol,
        );
        assert_eq!(certificate_problem(&handshake), None);
    }

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "LOCALHOST.",
            "a.localhost",
            "127.0.0.1",
            "127.3.4.5",
            "[::1]",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "example.com",
            "10.0.0.1",
            "[::2]",
            "localhost.example.com",
            "0.0.0.0",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }
}
