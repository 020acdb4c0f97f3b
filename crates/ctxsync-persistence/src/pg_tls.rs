//! TLS for the LISTEN connection with libpq's meaning of `sslmode` and `sslrootcert`.
//!
//! The pool is libpq itself and reads the URL unchanged. tokio-postgres, which carries
//! LISTEN, knows only `disable`/`prefer`/`require` and no `sslrootcert`, so this module
//! reads those parameters as libpq does (URL first, then `PGSSLMODE`/`PGSSLROOTCERT`),
//! removes them from the URL it hands to tokio-postgres, and builds an OpenSSL connector
//! (the same OpenSSL libpq is built with) that accepts the servers libpq accepts:
//!
//! - any TLS mode verifies the chain when a root certificate file is in play (given, or
//!   libpq's default `~/.postgresql/root.crt` if it exists), so `require` with roots is
//!   `verify-ca`, as in libpq;
//! - only `verify-full` checks the host name;
//! - `allow` tries plain text then TLS, `prefer` TLS then plain text.
//!
//! Settings libpq would honour but this connection could not (client certificates,
//! CRLs, protocol bounds, ...) are refused, so the two connections never differ silently.
//! Not mirrored: libpq's default CRL file `~/.postgresql/root.crl`, and its fallback to
//! a certificate's common name when verify-full connects to an IP address.

use std::path::PathBuf;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::X509;
use openssl::x509::store::X509StoreBuilder;
use postgres_openssl::MakeTlsConnector;
use tokio_postgres::config::SslMode as WireMode;

use crate::error::StoreError;

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(invalid(format!(
                    "invalid sslmode {other:?} in the database URL; use disable, allow, prefer, \
                     require, verify-ca or verify-full"
                )));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Allow => "allow",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, Self::VerifyCa | Self::VerifyFull)
    }

    /// The tokio-postgres modes to try in turn, as libpq tries them.
    fn attempts(self) -> &'static [WireMode] {
        match self {
            Self::Disable => &[WireMode::Disable],
            Self::Allow => &[WireMode::Disable, WireMode::Require],
            // tokio-postgres's Prefer already goes on in plain text when the server
            // declines TLS; the second attempt covers a failed handshake, as libpq does.
            Self::Prefer => &[WireMode::Prefer, WireMode::Disable],
            Self::Require | Self::VerifyCa | Self::VerifyFull => &[WireMode::Require],
        }
    }
}

/// Where trusted roots come from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Roots {
    /// `sslrootcert=system`: OpenSSL's default store.
    System,
    /// A PEM file; `explicit` when the URL or `PGSSLROOTCERT` named it, as opposed to
    /// libpq's default, which only counts if it exists.
    File { path: PathBuf, explicit: bool },
    /// No home directory to look for the default in.
    Unknown,
}

/// The URL's TLS settings, as libpq resolves them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Settings {
    mode: SslMode,
    roots: Roots,
}

/// What the LISTEN connection needs: the URL without the parameters tokio-postgres does
/// not know, the connector, and the modes to try.
pub(crate) struct ListenTls {
    /// Only for `tokio_postgres::Config::from_str`; holds the password like the input.
    pub(crate) url: String,
    pub(crate) connector: MakeTlsConnector,
    pub(crate) attempts: &'static [WireMode],
}

/// Reads the TLS settings of `url` (with libpq's environment fallbacks) and builds the
/// LISTEN connection's TLS. Fails, before anything connects, on an unknown `sslmode`,
/// an unreadable `sslrootcert`, or a verifying mode without roots.
pub(crate) fn listen_tls(url: &str) -> Result<ListenTls, StoreError> {
    listen_tls_with(url, &|key| {
        std::env::var(key).ok().filter(|value| !value.is_empty())
    })
}

fn listen_tls_with(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ListenTls, StoreError> {
    let (settings, url) = parse(url, env)?;
    Ok(ListenTls {
        url,
        connector: connector(&settings)?,
        attempts: settings.mode.attempts(),
    })
}

fn invalid(message: String) -> StoreError {
    StoreError::InvalidInput(message)
}

/// Splits the TLS settings off `url`; returns them and the URL without them.
fn parse(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Settings, String), StoreError> {
    // libpq's `key=value` form would need a parser of its own; the store takes URLs.
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(invalid(
            "a PostgreSQL database must be given as a postgres:// or postgresql:// URL".into(),
        ));
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut sslmode, mut sslrootcert) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key)?;
        match key.as_str() {
            // libpq lets a later repetition win.
            "sslmode" => sslmode = Some(percent_decode(value)?),
            "sslrootcert" => sslrootcert = Some(percent_decode(value)?),
            // tokio-postgres implements this one itself.
            "sslnegotiation" => kept.push(pair),
            other if other.starts_with("ssl") => {
                return Err(invalid(format!(
                    "database URL parameter {other:?} is not supported (the LISTEN connection \
                     could not honour it as libpq does); only sslmode and sslrootcert are"
                )));
            }
            _ => kept.push(pair),
        }
    }
    let sslmode = sslmode.or_else(|| env("PGSSLMODE"));
    let sslrootcert = sslrootcert.or_else(|| env("PGSSLROOTCERT"));

    let (mode, roots) = match sslrootcert.as_deref() {
        Some("system") => {
            // libpq: system roots imply, and only allow, verify-full.
            let mode = match sslmode.as_deref() {
                None => SslMode::VerifyFull,
                Some(value) => SslMode::parse(value)?,
            };
            if mode != SslMode::VerifyFull {
                return Err(invalid(format!(
                    "sslmode={} may not be used with sslrootcert=system; use verify-full",
                    mode.name()
                )));
            }
            (mode, Roots::System)
        }
        Some(path) => (
            SslMode::parse(sslmode.as_deref().unwrap_or("prefer"))?,
            Roots::File {
                path: PathBuf::from(path),
                explicit: true,
            },
        ),
        None => (
            SslMode::parse(sslmode.as_deref().unwrap_or("prefer"))?,
            match env("HOME") {
                Some(home) => Roots::File {
                    path: PathBuf::from(home).join(".postgresql/root.crt"),
                    explicit: false,
                },
                None => Roots::Unknown,
            },
        ),
    };
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((Settings { mode, roots }, url))
}

/// libpq decodes `%XX` in URL parameters (and, unlike forms, leaves `+` alone).
fn percent_decode(text: &str) -> Result<String, StoreError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| invalid("invalid percent-encoding in the database URL".into()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| invalid("a database URL parameter is not UTF-8 once decoded".into()))
}

fn tls_error(error: openssl::error::ErrorStack) -> StoreError {
    invalid(format!("setting up TLS for PostgreSQL: {error}"))
}

/// The connector for `settings`: roots, peer verification and host name checking as
/// libpq would apply them.
fn connector(settings: &Settings) -> Result<MakeTlsConnector, StoreError> {
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(tls_error)?;
    // libpq's default ssl_min_protocol_version.
    builder
        .set_min_proto_version(Some(SslVersion::TLS1_2))
        .map_err(tls_error)?;
    let verify_chain = match (&settings.roots, settings.mode) {
        // The connector is never asked to handshake; like libpq, read no roots.
        (_, SslMode::Disable) => false,
        // The builder already loaded OpenSSL's default paths.
        (Roots::System, _) => true,
        (Roots::File { path, explicit }, mode) => {
            let shown = path.display();
            match std::fs::read(path) {
                Ok(pem) => {
                    let certs = X509::stack_from_pem(&pem).map_err(|e| {
                        invalid(format!(
                            "root certificate file {shown} is not valid PEM: {e}"
                        ))
                    })?;
                    if certs.is_empty() {
                        return Err(invalid(format!(
                            "root certificate file {shown} holds no certificate"
                        )));
                    }
                    // A store of these roots only: the builder's default store would
                    // also trust the system's, which libpq does not.
                    let mut store = X509StoreBuilder::new().map_err(tls_error)?;
                    for cert in certs {
                        store.add_cert(cert).map_err(tls_error)?;
                    }
                    builder.set_cert_store(store.build());
                    true
                }
                Err(error) if *explicit => {
                    return Err(invalid(format!("cannot read sslrootcert {shown}: {error}")));
                }
                // libpq too fails on a default file that exists but cannot be loaded.
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    return Err(invalid(format!(
                        "cannot read the root certificate file {shown}: {error}"
                    )));
                }
                Err(_) if mode.verifies() => {
                    return Err(invalid(format!(
                        "sslmode={} needs a root certificate, but {shown} does not exist; \
                         name one with sslrootcert=PATH (or sslrootcert=system), or use \
                         sslmode=require, which does not verify the server",
                        mode.name()
                    )));
                }
                // libpq: no default roots, no verification.
                Err(_) => false,
            }
        }
        (Roots::Unknown, mode) if mode.verifies() => {
            return Err(invalid(format!(
                "sslmode={} needs a root certificate, and there is no home directory to \
                 find ~/.postgresql/root.crt in; name one with sslrootcert=PATH",
                mode.name()
            )));
        }
        (Roots::Unknown, _) => false,
    };
    if !verify_chain {
        builder.set_verify(SslVerifyMode::NONE);
    }
    let mut connector = MakeTlsConnector::new(builder.build());
    let check_host = settings.mode == SslMode::VerifyFull;
    connector.set_callback(move |config, _host| {
        config.set_verify_hostname(check_host);
        Ok(())
    });
    Ok(connector)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parsed(url: &str) -> Result<(Settings, String), StoreError> {
        parse(url, &no_env)
    }

    fn file(path: &str, explicit: bool) -> Roots {
        Roots::File {
            path: PathBuf::from(path),
            explicit,
        }
    }

    #[test]
    fn ssl_parameters_are_read_and_removed_for_tokio_postgres() {
        let (settings, url) =
            parsed("postgres://u:pw@h/db?sslmode=verify-ca&sslrootcert=%2Fca%20dir%2Fca.pem&connect_timeout=3")
                .unwrap();
        assert_eq!(settings.mode, SslMode::VerifyCa);
        assert_eq!(settings.roots, file("/ca dir/ca.pem", true));
        assert_eq!(url, "postgres://u:pw@h/db?connect_timeout=3");

        let error = parsed("host=h dbname=db sslmode=require").unwrap_err();
        assert!(
            error.to_string().contains("postgres:// or postgresql://"),
            "{error}"
        );

        let (settings, url) = parsed("postgresql://h/db").unwrap();
        assert_eq!(settings.mode, SslMode::Prefer, "libpq's default");
        assert_eq!(settings.roots, Roots::Unknown);
        assert_eq!(url, "postgresql://h/db");

        let (settings, url) =
            parsed("postgres://h/db?sslmode=disable&sslnegotiation=postgres&sslmode=require")
                .unwrap();
        assert_eq!(settings.mode, SslMode::Require, "the last repetition wins");
        assert_eq!(url, "postgres://h/db?sslnegotiation=postgres");
        // What is left parses for tokio-postgres.
        url.parse::<tokio_postgres::Config>().unwrap();
    }

    #[test]
    fn the_environment_fills_in_what_the_url_leaves_out() {
        let env = |key: &str| match key {
            "PGSSLMODE" => Some("verify-full".to_owned()),
            "PGSSLROOTCERT" => Some("/env/ca.pem".to_owned()),
            "HOME" => Some("/home/me".to_owned()),
            _ => None,
        };
        let (settings, _) = parse("postgres://h/db", &env).unwrap();
        assert_eq!(settings.mode, SslMode::VerifyFull);
        assert_eq!(settings.roots, file("/env/ca.pem", true));
        let (settings, _) =
            parse("postgres://h/db?sslmode=require&sslrootcert=/u.pem", &env).unwrap();
        assert_eq!(settings.mode, SslMode::Require);
        assert_eq!(settings.roots, file("/u.pem", true));
        let home_only = |key: &str| (key == "HOME").then(|| "/home/me".to_owned());
        let (settings, _) = parse("postgres://h/db", &home_only).unwrap();
        assert_eq!(settings.roots, file("/home/me/.postgresql/root.crt", false));
    }

    #[test]
    fn system_roots_mean_verify_full() {
        let (settings, _) = parsed("postgres://h/db?sslrootcert=system").unwrap();
        assert_eq!(
            settings,
            Settings {
                mode: SslMode::VerifyFull,
                roots: Roots::System
            }
        );
        let error = parsed("postgres://h/db?sslrootcert=system&sslmode=require").unwrap_err();
        assert!(error.to_string().contains("verify-full"), "{error}");
    }

    #[test]
    fn bad_settings_are_clear_errors_that_never_show_the_password() {
        let cases = [
            (
                "postgres://u:hunter2@h/db?sslmode=verify",
                "invalid sslmode \"verify\"",
            ),
            (
                "postgres://u:hunter2@h/db?sslcert=/c.pem",
                "\"sslcert\" is not supported",
            ),
            ("postgres://u:hunter2@h/db?sslmode=%zz", "percent-encoding"),
            (
                "postgres://u:hunter2@h/db?sslmode=require&sslrootcert=/nonexistent/ca.pem",
                "cannot read sslrootcert /nonexistent/ca.pem",
            ),
            (
                "postgres://u:hunter2@h/db?sslmode=verify-ca",
                "no home directory",
            ),
        ];
        for (url, needle) in cases {
            let error = match listen_tls_with(url, &no_env) {
                Ok(_) => panic!("{needle}: accepted"),
                Err(error) => error.to_string(),
            };
            assert!(
                error.contains(needle),
                "{error:?} should mention {needle:?}"
            );
            assert!(!error.contains("hunter2"), "{error:?} shows the password");
        }
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_str().unwrap().to_owned();
        let env = move |key: &str| (key == "HOME").then(|| home.clone());
        let error = listen_tls_with("postgres://h/db?sslmode=verify-full", &env)
            .err()
            .expect("no default root file");
        assert!(
            error.to_string().contains("root.crt does not exist"),
            "{error}"
        );
        std::fs::write(dir.path().join("junk.pem"), "not a certificate").unwrap();
        let junk = dir.path().join("junk.pem");
        let error = listen_tls_with(
            &format!(
                "postgres://h/db?sslmode=verify-ca&sslrootcert={}",
                junk.display()
            ),
            &no_env,
        )
        .err()
        .expect("junk roots");
        assert!(error.to_string().contains("no certificate"), "{error}");
    }

    #[test]
    fn modes_without_roots_build_and_try_what_libpq_tries() {
        for (mode, attempts) in [
            ("disable", &[WireMode::Disable][..]),
            ("allow", &[WireMode::Disable, WireMode::Require]),
            ("prefer", &[WireMode::Prefer, WireMode::Disable]),
            ("require", &[WireMode::Require]),
        ] {
            let tls = listen_tls_with(&format!("postgres://h/db?sslmode={mode}"), &no_env).unwrap();
            assert_eq!(tls.attempts, attempts, "{mode}");
        }
    }
}
