//! A certificate authority made for one test (feature `tls`).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA of the test's own: its certificate to trust and server certificates it signs.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The issuer holds the private key: never printed.
        f.debug_struct("TestCa")
            .field("pem", &self.pem)
            .finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA whose common name is `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("a CA key");
        let pem = params.self_signed(&key).expect("the CA certificate").pem();
        Self {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// The CA's certificate (PEM), for a client to trust.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for `names` (DNS names or IP addresses; the first is also its
    /// common name), signed by this CA: (certificate PEM, key PEM).
    pub fn server_cert(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("server parameters");
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, first);
        }
        let key = KeyPair::generate().expect("a server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("the server certificate");
        (cert.pem(), key.serialize_pem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_server_certificates_in_pem() {
        let ca = TestCa::new("a test CA");
        assert!(ca.pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let (cert, key) = ca.server_cert(&["localhost", "127.0.0.1"]);
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.contains("PRIVATE KEY"));
        assert_ne!(cert, ca.pem());
    }
}
