//! Which files of a pgBackRest archive directory count as segments: only
//! `<24 hex>-<40 hex SHA-1>[.ext]`, so a stray or renamed file never
//! stands in for a missing segment.

use walshadow_backup_store::Repository;
use walshadow_backup_store::pgbackrest::PgBackRest;

#[test]
fn only_well_named_files_are_segments() {
    let root = std::env::temp_dir().join(format!("walshadow-archive-names-{}", std::process::id()));
    let dir = root.join("archive/main/15-1/0000000100000000");
    std::fs::create_dir_all(&dir).unwrap();
    let sha = "0123456789abcdef0123456789abcdef01234567";
    for name in [
        format!("000000010000000000000002-{sha}.gz"),
        format!("000000010000000000000003-{sha}"),
        format!("000000010000000000000004-{sha}.kept"),
        format!("000000010000000000000005-{}.lz4", &sha[..39]),
        "000000010000000000000006.00000028.backup".to_owned(),
        format!("00000001000000000000007-{sha}.gz"),
    ] {
        std::fs::write(dir.join(name), b"x").unwrap();
    }
    let store = PgBackRest::new(
        Repository::open(root.to_str().unwrap(), &Default::default()).unwrap(),
        "main",
    );
    let listed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(store.archived_segments("15-1"))
        .unwrap();
    let names: Vec<_> = listed.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        ["000000010000000000000002", "000000010000000000000003"]
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// pgBackRest encrypts its info files too (OpenSSL's `Salted__` header):
/// refused as an encrypted repository, not reported as a torn file.
#[test]
fn an_encrypted_repository_is_named() {
    let root = std::env::temp_dir().join(format!("walshadow-encrypted-{}", std::process::id()));
    let dir = root.join("backup/main");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("backup.info"), b"Salted__\x8f\x01\x02garbage").unwrap();
    let store = PgBackRest::new(
        Repository::open(root.to_str().unwrap(), &Default::default()).unwrap(),
        "main",
    );
    let e = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(store.backups())
        .unwrap_err()
        .to_string();
    assert!(e.contains("encrypted repository"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}
