//! `walshadow wal dump --source` follows a timeline switch: stream from a
//! promoted standby starting on timeline 1, get every record of timeline 1
//! up to the switch and then timeline 2's, equal to pg_waldump's reading of
//! each timeline's segments.

use std::process::Command;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, bail, ensure};
use walshadow_testkit::{
    Cluster, ClusterOptions, Lsn, PgMajor, assert_parity, parse_dump_output, wait_until,
    waldump_on_timeline,
};

fn follow_timeline_switch(major: PgMajor) -> Result<()> {
    let primary = Cluster::start(
        major,
        ClusterOptions::default()
            .wal_segment_size_mb(1)
            .conf("wal_keep_size", "1GB"),
    )?;
    primary.psql("create table t (id int primary key, v text)")?;
    // The standby holds WAL from its base backup on: start after it.
    let standby = primary.start_standby()?;
    let start = primary.insert_lsn()?;
    primary.psql("insert into t select g, md5(g::text) from generate_series(1, 5000) g")?;
    primary.psql("update t set v = v || '!' where id % 2 = 0")?;
    let target = primary.insert_lsn()?;
    wait_until(
        Duration::from_secs(60),
        "the standby to replay the workload",
        || {
            let replayed: Lsn = standby
                .query_one("select pg_last_wal_replay_lsn()")?
                .parse()?;
            Ok(replayed >= target)
        },
    )?;
    // A clean stop sends the shutdown checkpoint to the standby; the
    // primary's pg_wal stays for pg_waldump's reading of timeline 1.
    let mut primary = primary;
    primary.stop()?;
    standby.promote()?;
    ensure!(
        standby.timeline()? == 2,
        "promotion did not start timeline 2"
    );
    standby.psql("insert into t select g, 'after promotion' from generate_series(5001, 8000) g")?;
    standby.psql("delete from t where id % 3 = 0")?;
    let end = standby.insert_lsn()?;
    standby.checkpoint()?;
    standby.psql("select pg_logical_emit_message(false, 'timeline', 'end')")?;
    standby.checkpoint()?;

    let history = std::fs::read_to_string(standby.wal_dir().join("00000002.history"))?;
    let switch: Lsn = history
        .lines()
        .find_map(|l| l.split('\t').nth(1))
        .context("no switch point in 00000002.history")?
        .parse()?;
    ensure!(
        start < switch && switch < end,
        "switch {switch} outside {start}..{end}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_walshadow"))
        .args([
            "wal",
            "dump",
            "--source",
            &standby.url("postgres"),
            "--timeline",
            "1",
        ])
        .args(["--start", &start.to_string(), "--end", &end.to_string()])
        .output()?;
    if !out.status.success() {
        bail!("walshadow failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let ours = parse_dump_output(std::str::from_utf8(&out.stdout)?)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        stderr.contains("following timeline 2"),
        "no timeline switch reported: {stderr}"
    );

    // Timeline 1 from the old primary (the standby keeps only a .partial of
    // its last segment), timeline 2 from the promoted standby.
    let mut theirs = waldump_on_timeline(
        primary.install(),
        &primary.wal_dir(),
        1,
        start,
        Some(switch),
    )?;
    let after = waldump_on_timeline(standby.install(), &standby.wal_dir(), 2, switch, Some(end))?;
    ensure!(!after.is_empty(), "no records on timeline 2");
    theirs.extend(after);
    assert_parity(&ours, &theirs)?;
    Ok(())
}

per_major!(follow_timeline_switch => follows_a_timeline_switch: pg15, pg16, pg17, pg18);
