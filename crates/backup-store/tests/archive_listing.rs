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

/// One segment looked up by name, in each tool's layout: found when it is
/// archived (under any compression), absent when it is not, a neighbour or
/// a partial segment never standing in for it.
#[test]
fn one_segment_is_found_without_the_whole_listing() {
    use walshadow_backup_store::barman_cloud::BarmanCloud;
    use walshadow_backup_store::walg::WalG;

    let root = std::env::temp_dir().join(format!("walshadow-one-segment-{}", std::process::id()));
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let files = [
        format!("pgbackrest/archive/main/15-1/0000000100000000/000000010000000000000002-{sha}.gz"),
        format!("pgbackrest/archive/main/15-1/0000000100000000/000000010000000000000003-{sha}"),
        format!("pgbackrest/archive/main/15-1/0000000100000001/000000010000000100000000-{sha}.zst"),
        "barman/main/wals/0000000100000000/000000010000000000000002.gz".to_owned(),
        "barman/main/wals/0000000100000000/000000010000000000000003.partial".to_owned(),
        "barman/main/wals/0000000100000000/000000010000000000000004".to_owned(),
        "walg/wal_005/000000010000000000000002.lz4".to_owned(),
        "walg/wal_005/000000010000000000000003.partial.lz4".to_owned(),
        "walg/wal_005/000000010000000000000004.zst".to_owned(),
        "walg/wal_005/000000010000000000000005.lz4".to_owned(),
    ];
    for f in &files {
        let path = root.join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }
    let repo = |dir: &str| {
        Repository::open(root.join(dir).to_str().unwrap(), &Default::default()).unwrap()
    };
    let pgbackrest = PgBackRest::new(repo("pgbackrest"), "main");
    let barman = BarmanCloud::new(repo("barman"), "main");
    let walg = WalG::new(repo("walg"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = |f: Option<walshadow_backup_store::ArchivedFile>| f.map(|f| f.key);
    let pgbackrest_key = |name: &str| {
        key(rt
            .block_on(pgbackrest.archived_segment("15-1", name))
            .unwrap())
    };
    assert_eq!(
        pgbackrest_key("000000010000000000000003"),
        Some(format!(
            "archive/main/15-1/0000000100000000/000000010000000000000003-{sha}"
        ))
    );
    assert!(pgbackrest_key("000000010000000100000000").is_some());
    assert_eq!(pgbackrest_key("000000010000000000000004"), None);
    assert_eq!(pgbackrest_key("000000010000000200000000"), None);
    assert_eq!(pgbackrest_key("short"), None);

    let barman_key = |name: &str| key(rt.block_on(barman.archived_segment(name)).unwrap());
    assert_eq!(
        barman_key("000000010000000000000002").as_deref(),
        Some("main/wals/0000000100000000/000000010000000000000002.gz")
    );
    assert_eq!(barman_key("000000010000000000000003"), None);
    assert!(barman_key("000000010000000000000004").is_some());
    assert_eq!(barman_key("000000010000000100000000"), None);

    let walg_key = |name: &str| key(rt.block_on(walg.archived_segment(name)).unwrap());
    assert_eq!(
        walg_key("000000010000000000000002").as_deref(),
        Some("wal_005/000000010000000000000002.lz4")
    );
    assert_eq!(walg_key("000000010000000000000003"), None);
    assert_eq!(
        walg_key("000000010000000000000004").as_deref(),
        Some("wal_005/000000010000000000000004.zst")
    );
    assert!(walg_key("000000010000000000000005").is_some());
    assert_eq!(walg_key("000000010000000000000006"), None);
    std::fs::remove_dir_all(&root).unwrap();
}
