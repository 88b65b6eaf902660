//! `gpugate certs generate` writes a CA and a serving pair that load.

use std::process::Command;

mod support {
    pub mod process;
}

use gpugate::server::certs::CertInfo;
use gpugate::server::tls::ReloadingCert;

#[test]
fn generate_writes_a_usable_pair() {
    let dir = std::env::temp_dir().join(format!("gpugate-certs-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    support::process::succeeds(
        Command::new(env!("CARGO_BIN_EXE_gpugate"))
            .args(["certs", "generate", "--out"])
            .arg(&dir)
            .args([
                "--dns",
                "gpugate.gpugate.svc",
                "--dns",
                "localhost",
                "--ip",
                "127.0.0.1",
                "--days",
                "10",
            ]),
    );
    let pem = std::fs::read(dir.join("tls.crt")).unwrap();
    let info = CertInfo::from_pem(&pem, &dir.join("tls.crt")).unwrap();
    assert_eq!(info.dns, ["gpugate.gpugate.svc", "localhost"]);
    assert_eq!(info.ips, [std::net::IpAddr::from([127, 0, 0, 1])]);
    let days = (info.not_after - info.not_before).whole_days();
    assert!((9..=10).contains(&days), "{days}");
    assert!(dir.join("ca.crt").exists() && dir.join("ca.key").exists());
    ReloadingCert::from_files(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn generate_refuses_bad_arguments() {
    let scratch =
        std::env::temp_dir().join(format!("gpugate-certs-cli-bad-{}", std::process::id()));
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpugate"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    assert!(run(&["certs", "generate", "--out", scratch.to_str().unwrap()]).contains("--dns"));
    assert!(
        run(&[
            "certs",
            "generate",
            "--out",
            scratch.to_str().unwrap(),
            "--dns",
            "a",
            "--days",
            "0"
        ])
        .contains("--days")
    );
    assert!(
        run(&[
            "certs",
            "generate",
            "--out",
            scratch.to_str().unwrap(),
            "--ip",
            "not-an-ip"
        ])
        .contains("not-an-ip")
    );
    let e = run(&[
        "certs",
        "generate",
        "--out",
        scratch.to_str().unwrap(),
        "--dns",
        "bad name!",
    ]);
    assert!(e.contains("is not a DNS name"), "{e}");
    assert!(
        !scratch.join("tls.crt").exists(),
        "nothing is written on error"
    );
}
