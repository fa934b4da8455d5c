//! One drill as a test per PostgreSQL major.
//!
//! ```ignore
//! per_major!(crashes => kill_9_and_clickhouse_down_stay_equal: pg15, pg16, pg17, pg18);
//! per_major!(async run => shadow_follows_the_source: pg15, pg18);
//! per_major!(|m| password_auth(m, Auth::md5("pw")) => md5: pg15, pg16);
//! ```
//!
//! makes a module named after the test with one `#[test]` per listed major
//! (`kill_9_and_clickhouse_down_stay_equal::pg15`, …), each calling the drill with that
//! [`PgMajor`](crate::PgMajor). The drill is any expression callable with a `PgMajor`, seen
//! from the enclosing module; an `async` drill runs on a two-worker runtime. `cargo test pg17`
//! still picks one major's tests.

/// See the [module docs](self).
#[macro_export]
macro_rules! per_major {
    (async $drill:expr => $name:ident: $($major:ident),+ $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $major() -> impl ::std::process::Termination {
                    $crate::block_on(($drill)($crate::major!($major)))
                }
            )+
        }
    };
    ($drill:expr => $name:ident: $($major:ident),+ $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $major() -> impl ::std::process::Termination {
                    ($drill)($crate::major!($major))
                }
            )+
        }
    };
}

/// The [`PgMajor`](crate::PgMajor) a test name stands for: `pg15` … `pg18`.
#[doc(hidden)]
#[macro_export]
macro_rules! major {
    (pg15) => {
        $crate::PgMajor::V15
    };
    (pg16) => {
        $crate::PgMajor::V16
    };
    (pg17) => {
        $crate::PgMajor::V17
    };
    (pg18) => {
        $crate::PgMajor::V18
    };
}

/// Runs an async drill to its end on a fresh two-worker runtime, as
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` would.
pub fn block_on<F: std::future::Future>(drill: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a test runtime")
        .block_on(drill)
}
