//! A fresh CA and a server certificate it signed, as both API servers the tests start use
//! them: the cluster double (DER, into rustls) and the real kube-apiserver (PEM files).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv4Addr};

/// A server certificate for `localhost`, 127.0.0.1 and the names and addresses asked for.
pub struct ServerCertificate {
    /// The CA that signed it (PEM): a kubeconfig's `certificate-authority-data`.
    pub ca_pem: String,
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
}

/// A CA named `ca_name` and a certificate `server_name` signed by it, valid for `localhost`,
/// 127.0.0.1, `names` and `ips`. As a cluster CA's (kubeadm's): strict verifiers (OpenSSL's
/// X509_STRICT, Python 3.13's default) want a CA's key usages and the leaf's authority key
/// identifier. An IP a client dials must be in the IP SANs (kube-rs's in-cluster config dials
/// `KUBERNETES_SERVICE_HOST`).
pub fn server_certificate(
    ca_name: &str,
    server_name: &str,
    names: &[&str],
    ips: &[IpAddr],
) -> anyhow::Result<ServerCertificate> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let dns = std::iter::once("localhost")
        .chain(names.iter().copied())
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let mut params = CertificateParams::new(dns)?;
    for ip in std::iter::once(IpAddr::V4(Ipv4Addr::LOCALHOST)).chain(ips.iter().copied()) {
        params.subject_alt_names.push(SanType::IpAddress(ip));
    }
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params
        .distinguished_name
        .push(DnType::CommonName, server_name);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(ServerCertificate {
        ca_pem: ca_cert.pem(),
        cert,
        key,
    })
}

/// A kubeconfig (as JSON) whose one context `context` reaches `server` (`https://...`),
/// trusting `ca_pem` and sending `token`: what both API servers the tests start write.
pub fn kubeconfig(context: &str, server: &str, ca_pem: &str, token: &str) -> serde_json::Value {
    use base64::Engine;
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {
            "server": server,
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        }}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    })
}
