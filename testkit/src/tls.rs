//! Certificates for TLS test servers, made with the `openssl` command-line tool: a CA of
//! the test's own and a server certificate it signed for `127.0.0.1` / `localhost`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate authority's files in a directory: `NAME.crt` (PEM) and `NAME.key`.
#[derive(Clone, Debug)]
pub struct TestCa {
    /// The CA certificate (PEM): what clients must trust.
    pub cert: PathBuf,
    key: PathBuf,
}

impl TestCa {
    /// Creates a new self-signed CA in `dir` (P-256 key, valid for two days).
    ///
    /// # Panics
    /// When `openssl` is missing or fails; the message says which.
    pub fn generate(dir: &Path, name: &str) -> TestCa {
        fs::create_dir_all(dir).expect("create the certificate directory");
        let ca = TestCa {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        let subject = format!("/CN={name}");
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &subject,
            "-keyout",
            path(&ca.key),
            "-out",
            path(&ca.cert),
        ]);
        ca
    }

    /// Issues a server certificate for `127.0.0.1` and `localhost` into `dir`: returns the
    /// certificate and key paths.
    pub fn issue_server(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let key = dir.join("server.key");
        let request = dir.join("server.csr");
        let cert = dir.join("server.crt");
        let extensions = dir.join("server.ext");
        fs::write(&extensions, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
            .expect("write the extension file");
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            path(&key),
            "-out",
            path(&request),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            path(&request),
            "-CA",
            path(&self.cert),
            "-CAkey",
            path(&self.key),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            path(&extensions),
            "-out",
            path(&cert),
        ]);
        (cert, key)
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn openssl(args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run openssl ({e}); install it (Debian: apt-get install openssl)")
        });
    assert!(
        output.status.success(),
        "openssl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}
