//! `e2e-bench --catch-up N`: how fast walshadow drains a backlog.
//!
//! After the sustained mode's schema, `init`, `run` and `--accounts`
//! preload, the ClickHouse engine is stopped (walshadow pauses on its
//! inserts; the slot holds the WAL), pgbench commits about N row changes
//! (`-t`: the same script, four changes per transaction), and the engine is
//! started again. The time from then until walshadow's progress covers the
//! source's WAL is the catch-up; its rate is the rows walshadow applied
//! meanwhile per second.
//!
//! The ceiling it is set against, measured in the same run: the rows the
//! two busy tables then hold (every version not yet merged away), exported
//! as RowBinary and inserted back into empty copies of the tables, one
//! request per table, as fast as the engine takes them: what any client
//! could get from this engine for rows of this shape.

use super::*;

/// What the catch-up mode measured.
#[derive(Debug, Default, serde::Serialize)]
pub(super) struct CatchUp {
    transactions: u64,
    /// pgbench's time, ClickHouse down.
    backlog_secs: f64,
    /// Row changes committed at the source meanwhile (`pg_stat_user_tables`).
    source_changes: u64,
    /// Rows walshadow inserted from the engine's start to caught up.
    rows_applied: u64,
    catch_up_secs: f64,
    /// Rows and RowBinary bytes of the ceiling's inserts, and their time.
    ceiling_rows: u64,
    ceiling_bytes: u64,
    ceiling_secs: f64,
    /// walshadow's `VmHWM` at the end, and its CPU during the catch-up.
    peak_rss_mb: f64,
    walshadow_cpu_secs: f64,
}

impl CatchUp {
    fn rate(&self) -> f64 {
        self.rows_applied as f64 / self.catch_up_secs.max(1e-9)
    }

    fn ceiling_rate(&self) -> f64 {
        self.ceiling_rows as f64 / self.ceiling_secs.max(1e-9)
    }
}

/// The target: the catch-up at 70 % of the engine's ceiling or more.
const TARGET_SHARE: f64 = 0.7;
/// walshadow's RSS budget: `[stream] memory_mb` (256, the default) for
/// transactions, plus batches, caches and decoders; the sustained mode's
/// bound.
const RSS_BUDGET_MB: f64 = 512.0;

pub(super) fn run(
    args: &Args,
    changes: u64,
    cluster: &Cluster,
    daemon: &mut Walshadow,
    ch: &mut ClickHouseEngine,
    state_dir: &Path,
) -> Result<CatchUp> {
    ensure!(changes >= 1000, "--catch-up must be at least 1000 changes");
    let mut fig = CatchUp::default();
    eprintln!("preloading {} accounts through walshadow …", args.accounts);
    // One probe row, so that table is checked at the end too.
    cluster.psql(&format!(
        "insert into accounts select g, 1 + (g - 1) / 100000, 0, '' from generate_series(1, {}) g;
         insert into probe values (1, clock_timestamp());
         vacuum analyze accounts",
        args.accounts
    ))?;
    wait_progress(cluster, state_dir, daemon)?;

    eprintln!("stopping the ClickHouse engine …");
    ch.stop()?;
    let stats0 = table_changes(cluster)?;
    let per_client = changes.div_ceil(CHANGES_PER_TXN * u64::from(args.clients));
    fig.transactions = per_client * u64::from(args.clients);
    let script = pgbench_script()?;
    let mut cmd = pgbench_command(args, cluster, &script, &["-t", &per_client.to_string()]);
    eprintln!(
        "committing {} transactions with ClickHouse down …",
        fig.transactions
    );
    let t = Instant::now();
    let out = cmd.output().context("running pgbench")?;
    fig.backlog_secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&script);
    if !out.status.success() {
        bail!(
            "pgbench failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    daemon.check_running()?;
    let rows0 = Progress::read(state_dir)?.context("no progress file")?;
    let rows0: BTreeMap<String, u64> = rows0
        .tables
        .iter()
        .map(|(k, t)| (k.clone(), t.rows))
        .collect();
    let cpu0 = CpuSplit::now(cluster, daemon, None).walshadow;

    eprintln!("starting the ClickHouse engine; walshadow catches up …");
    ch.start_again()?;
    let t = Instant::now();
    let rows1 = wait_progress(cluster, state_dir, daemon)?;
    fig.catch_up_secs = t.elapsed().as_secs_f64();
    fig.walshadow_cpu_secs = CpuSplit::now(cluster, daemon, None).walshadow - cpu0;
    fig.peak_rss_mb =
        proc_status_kb(daemon.run_pid().unwrap_or(0), "VmHWM").unwrap_or(0) as f64 / 1024.0;
    fig.rows_applied = load_rows(&rows1).saturating_sub(load_rows(&rows0));
    let stats1 = table_changes(cluster)?;
    fig.source_changes = LOAD_TABLES
        .iter()
        .map(|t| {
            let at = |m: &BTreeMap<String, u64>| m.get(*t).copied().unwrap_or(0);
            at(&stats1).saturating_sub(at(&stats0))
        })
        .sum();

    eprintln!("the engine's ceiling: the same tables' rows as RowBinary …");
    for t in ["accounts", "history"] {
        let copy = format!("app.ceiling_{t}");
        ch.query(&format!("DROP TABLE IF EXISTS {copy}"))?;
        ch.query(&format!("CREATE TABLE {copy} AS app.{t}"))?;
        let body = ch
            .post(
                &[("query", &format!("SELECT * FROM app.{t} FORMAT RowBinary"))],
                b"",
            )?
            .ok()?
            .body;
        let rows: u64 = ch
            .query(&format!("SELECT count() FROM app.{t}"))?
            .trim()
            .parse()?;
        let t0 = Instant::now();
        ch.insert(&format!("INSERT INTO {copy} FORMAT RowBinary"), &body)?;
        fig.ceiling_secs += t0.elapsed().as_secs_f64();
        fig.ceiling_rows += rows;
        fig.ceiling_bytes += body.len() as u64;
        ch.query(&format!("DROP TABLE {copy}"))?;
    }
    Ok(fig)
}

pub(super) fn report(args: &Args, v: &Versions, fig: &CatchUp, checks: &[Check]) -> Result<()> {
    println!(
        "Catch-up, PostgreSQL {} -> walshadow -> ClickHouse engine {}: {} transactions from {} pgbench clients committed with ClickHouse stopped, then ClickHouse started; batch_ms {}",
        v.postgres, v.clickhouse, fig.transactions, args.clients, args.batch_ms
    );
    println!(
        "{}",
        v.machine.line(
            ", shared by the source PostgreSQL, pgbench, the ClickHouse engine, walshadow and its shadow PostgreSQL"
        )
    );
    let row = |k: &str, v: String| println!("  {k:<44} {v}");
    row(
        "row changes committed, ClickHouse down",
        format!("{} in {:.1} s", fig.source_changes, fig.backlog_secs),
    );
    row(
        "rows applied, engine start to caught up",
        format!(
            "{} in {:.1} s = {:.0}/s; equals the source's count: {}",
            fig.rows_applied,
            fig.catch_up_secs,
            fig.rate(),
            if fig.rows_applied == fig.source_changes {
                "yes"
            } else {
                "NO"
            }
        ),
    );
    row(
        "the engine's ceiling (RowBinary, 1 insert/table)",
        format!(
            "{} rows, {:.1} MB in {:.2} s = {:.0}/s",
            fig.ceiling_rows,
            fig.ceiling_bytes as f64 / 1e6,
            fig.ceiling_secs,
            fig.ceiling_rate()
        ),
    );
    let share = fig.rate() / fig.ceiling_rate().max(1e-9);
    row("catch-up / ceiling", format!("{:.0} %", share * 100.0));
    row(
        "walshadow CPU during the catch-up",
        format!(
            "{:.2} s = {:.2} s per million rows",
            fig.walshadow_cpu_secs,
            fig.walshadow_cpu_secs * 1e6 / (fig.rows_applied.max(1) as f64)
        ),
    );
    row(
        "walshadow peak RSS (VmHWM)",
        format!("{:.1} MB", fig.peak_rss_mb),
    );
    for c in checks {
        row(
            &format!("verify {} (count, sums)", c.table),
            format!("source = ClickHouse FINAL: {}", c.source),
        );
    }
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "targets: catch-up >= {:.0} % of the ceiling {}, peak RSS < {RSS_BUDGET_MB:.0} MB {}",
        TARGET_SHARE * 100.0,
        met(share >= TARGET_SHARE),
        met(fig.peak_rss_mb < RSS_BUDGET_MB)
    );
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "postgres": v.postgres,
            "clickhouse": v.clickhouse,
            "mode": "catch_up",
            "settings": {
                "clients": args.clients,
                "batch_ms": args.batch_ms,
                "accounts": args.accounts,
                "changes": args.catch_up,
            },
            "verify": checks,
            "figures": fig,
            "catch_up_rows_per_s": fig.rate(),
            "ceiling_rows_per_s": fig.ceiling_rate(),
        });
        v.machine.write_json(path, "e2e", doc)?;
    }
    Ok(())
}
