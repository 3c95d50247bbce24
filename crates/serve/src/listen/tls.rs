//! TLS for serve's listeners: the server certificate, an optional client CA (mutual TLS), the
//! rustls acceptor built from them ([`Tls`]), and what a verified client certificate says about
//! its holder ([`PeerCert`]), put on every request of that connection for the authentication code.
//!
//! Only TLS 1.2 and 1.3 with rustls's safe defaults, on ring; ALPN offers `http/1.1` (serve speaks
//! nothing else). With a client CA, a certificate a client presents must chain to it; without
//! `require_client_cert` a client may present none (and its requests carry no [`PeerCert`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// `--tls-cert FILE --tls-key FILE [--tls-client-ca FILE] [--tls-require-client-cert]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The server's certificate chain, PEM (its own first).
    pub cert_file: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// The CA(s), PEM, whose client certificates are accepted; their subjects reach the requests.
    pub client_ca: Option<PathBuf>,
    /// Refuse, at the handshake, a client that presents no certificate (needs `client_ca`).
    pub require_client_cert: bool,
}

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("TLS: `{file}` ({flag}): {problem}\n  help: {help}")]
pub struct TlsError {
    /// The file.
    pub file: String,
    /// The flag that names it.
    pub flag: &'static str,
    /// What is wrong.
    pub problem: String,
    /// What to do.
    pub help: &'static str,
}

/// The acceptor of one TLS configuration (shared by every listener of a server).
#[derive(Clone)]
pub struct Tls {
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

fn certs(path: &Path, flag: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |problem: String| TlsError {
        file: path.display().to_string(),
        flag,
        problem,
        help: "give a PEM file with one or more `-----BEGIN CERTIFICATE-----` blocks",
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs: Vec<_> =
        CertificateDer::pem_slice_iter(&pem).collect::<Result<_, _>>().map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("it holds no certificate".into()));
    }
    Ok(certs)
}

impl Tls {
    /// Reads the files and builds the acceptor; a missing or unusable file, a key that does not fit
    /// the certificate, or `require_client_cert` without a client CA is an error.
    pub fn load(config: &TlsConfig) -> Result<Tls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certs(&config.cert_file, "--tls-cert")?;
        let key_err = |problem: String| TlsError {
            file: config.key_file.display().to_string(),
            flag: "--tls-key",
            problem,
            help: "give the PEM private key (PKCS#8, PKCS#1 or SEC1) of the certificate in --tls-cert",
        };
        let key_pem = std::fs::read(&config.key_file).map_err(|e| key_err(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| key_err(e.to_string()))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| key_err(e.to_string()))?;
        let builder = match &config.client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in certs(ca, "--tls-client-ca")? {
                    roots.add(c).map_err(|e| TlsError {
                        file: ca.display().to_string(),
                        flag: "--tls-client-ca",
                        problem: e.to_string(),
                        help: "give the PEM certificate of the CA that issues the clients' certificates",
                    })?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if config.require_client_cert { verifier } else { verifier.allow_unauthenticated() };
                let verifier = verifier.build().map_err(|e| TlsError {
                    file: ca.display().to_string(),
                    flag: "--tls-client-ca",
                    problem: e.to_string(),
                    help: "give the PEM certificate of the CA that issues the clients' certificates",
                })?;
                builder.with_client_cert_verifier(verifier)
            }
            None if config.require_client_cert => {
                return Err(TlsError {
                    file: config.cert_file.display().to_string(),
                    flag: "--tls-require-client-cert",
                    problem: "no client CA to check the clients' certificates against".into(),
                    help: "add --tls-client-ca FILE, the CA that issues the clients' certificates",
                });
            }
            None => builder.with_no_client_auth(),
        };
        let mut server = builder.with_single_cert(chain, key).map_err(|e| TlsError {
            file: config.key_file.display().to_string(),
            flag: "--tls-key",
            problem: format!("it does not fit the certificate: {e}"),
            help: "give the key the certificate in --tls-cert was issued for",
        })?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)) })
    }
}

/// Who a verified client certificate names: on every request of its connection as a request
/// extension (`req.extensions().get::<PeerCert>()`, or axum's `Extension<PeerCert>`), for the
/// authentication code to map to a principal. Absent on plain HTTP and when the client presented
/// no certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCert {
    /// The whole subject DN in RFC 4514 form, most significant last as that RFC writes it:
    /// `O=lab,CN=alice` for a certificate issued to `CN=alice, O=lab`.
    pub subject: String,
    /// The subject's (last) common name, `alice`.
    pub common_name: Option<String>,
    /// The DNS names of its subjectAltName extension.
    pub dns_names: Vec<String>,
}

impl PeerCert {
    /// Reads a certificate the handshake verified; `None` when its subject cannot be read.
    pub fn from_der(der: &CertificateDer<'_>) -> Option<PeerCert> {
        let cert = webpki::EndEntityCert::try_from(der).ok()?;
        let rdns = read_name(cert.subject())?;
        let common_name = rdns.iter().rev().find(|(oid, _)| oid == "CN").map(|(_, v)| v.clone());
        let subject = rdns.iter().rev().map(|(k, v)| format!("{k}={}", escape(v))).collect::<Vec<_>>().join(",");
        let dns_names = cert.valid_dns_names().map(str::to_owned).collect();
        Some(PeerCert { subject, common_name, dns_names })
    }
}

/// One DER element: tag, contents, rest.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        (bytes.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b)), rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

/// The attributes of a Name's contents (a sequence of SETs of SEQUENCE { OID, value }), in order.
fn read_name(mut input: &[u8]) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let (tag, mut set, rest) = tlv(input)?;
        if tag != 0x31 {
            return None;
        }
        input = rest;
        while !set.is_empty() {
            let (tag, attr, rest) = tlv(set)?;
            if tag != 0x30 {
                return None;
            }
            set = rest;
            let (otag, oid, after) = tlv(attr)?;
            if otag != 0x06 {
                return None;
            }
            let (vtag, value, _) = tlv(after)?;
            out.push((attribute_name(oid), value_text(vtag, value)?));
        }
    }
    Some(out)
}

fn oid_text(oid: &[u8]) -> String {
    let mut parts: Vec<u64> = Vec::new();
    let mut acc: u64 = 0;
    for (i, b) in oid.iter().enumerate() {
        acc = (acc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if i == 0 || parts.is_empty() {
                let first = (acc / 40).min(2);
                parts.push(first);
                parts.push(acc - first * 40);
            } else {
                parts.push(acc);
            }
            acc = 0;
        }
    }
    parts.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

fn attribute_name(oid: &[u8]) -> String {
    let dotted = oid_text(oid);
    let short = match dotted.as_str() {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.5" => "SERIALNUMBER",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return dotted,
    };
    short.to_owned()
}

/// The text of a directory string (UTF8, Printable, IA5, Teletex as Latin-1, BMP as UTF-16).
fn value_text(tag: u8, v: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => String::from_utf8(v.to_vec()).ok(),
        0x14 => Some(v.iter().map(|b| char::from(*b)).collect()),
        0x1e => {
            let units: Vec<u16> = v.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])).collect();
            String::from_utf16(&units).ok()
        }
        _ => Some(format!("#{}", v.iter().map(|b| format!("{b:02x}")).collect::<String>())),
    }
}

/// RFC 4514 escaping of an attribute value.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let n = v.chars().count();
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && (c == '#' || c == ' '))
            || (i + 1 == n && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_and_escapes() {
        assert_eq!(oid_text(&[0x55, 0x04, 0x03]), "2.5.4.3");
        assert_eq!(oid_text(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]), "1.2.840.113549.1.9.1");
        assert_eq!(escape("a,b"), "a\\,b");
        assert_eq!(escape(" x "), "\\ x\\ ");
        assert!(tlv(&[0x30, 0x85, 0, 0, 0, 0, 1]).is_none(), "lengths over four bytes are refused");
        assert!(read_name(&[0x31, 0x05, 0x30]).is_none(), "a truncated name is no name");
    }
}
