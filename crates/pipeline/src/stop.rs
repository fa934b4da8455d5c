//! Why a table stops: one kind per cause, each with its remedy. Only a
//! definite fault of the table's own rows or schema stops a table (a
//! ClickHouse outage or refusal of the environment pauses the stream
//! instead; see `emitter::error`). Every remedy names a command; none asks
//! to edit walshadow's state files. The operator guide lists every kind
//! with its remedy, and a test keeps the two in agreement.

/// The kinds, with their `code` (in `status`, `walshadow table list` and
/// `progress.json`) and remedy. `SCHEMA.TABLE` in a remedy stands for the
/// table's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// A column of a type walshadow cannot stream.
    UnsupportedType,
    /// The table cannot be mapped to a ClickHouse table (no key).
    NoKey,
    /// A change ClickHouse cannot follow in place: a column's type, the
    /// key, a schema walshadow recorded that no longer maps.
    SchemaChange,
    /// ClickHouse refused the DDL that follows a schema change.
    DdlRefused,
    /// A value its ClickHouse column cannot hold exactly.
    ValueOutOfRange,
    /// ClickHouse refused the rows (a definite error about their values).
    RowsRefused,
    /// A TRUNCATE of some partitions only. No longer made (such a TRUNCATE
    /// reloads the table); kept for tables an older version stopped.
    PartialTruncate,
    /// A TOAST value older than walshadow that the source would not let it
    /// read.
    ToastUnreadable,
    /// A TOAST value neither the mirror nor the source has, and no newer
    /// version of its row came.
    ToastGone,
    /// A row that cannot be decoded.
    UndecodableRow,
    /// Another table in scope streams into the same ClickHouse table, or
    /// the name is reserved.
    DestinationTaken,
    /// The config table's `initial_load` is not a mode.
    UnknownInitialLoad,
    /// A resync's table vanished before it was swapped in.
    ResyncTableGone,
    /// The config table asked for a table outside
    /// `[source] config_table_allow`.
    NotAllowed,
    /// The table's column rules would leave out a replica identity column.
    ColumnRules,
}

impl StopKind {
    pub const ALL: [StopKind; 15] = [
        StopKind::UnsupportedType,
        StopKind::NoKey,
        StopKind::SchemaChange,
        StopKind::DdlRefused,
        StopKind::ValueOutOfRange,
        StopKind::RowsRefused,
        StopKind::PartialTruncate,
        StopKind::ToastUnreadable,
        StopKind::ToastGone,
        StopKind::UndecodableRow,
        StopKind::DestinationTaken,
        StopKind::UnknownInitialLoad,
        StopKind::ResyncTableGone,
        StopKind::NotAllowed,
        StopKind::ColumnRules,
    ];

    pub fn code(self) -> &'static str {
        match self {
            StopKind::UnsupportedType => "unsupported_type",
            StopKind::NoKey => "no_key",
            StopKind::SchemaChange => "schema_change",
            StopKind::DdlRefused => "ddl_refused",
            StopKind::ValueOutOfRange => "value_out_of_range",
            StopKind::RowsRefused => "rows_refused",
            StopKind::PartialTruncate => "partial_truncate",
            StopKind::ToastUnreadable => "toast_unreadable",
            StopKind::ToastGone => "toast_gone",
            StopKind::UndecodableRow => "undecodable_row",
            StopKind::DestinationTaken => "destination_taken",
            StopKind::UnknownInitialLoad => "unknown_initial_load",
            StopKind::ResyncTableGone => "resync_table_gone",
            StopKind::NotAllowed => "not_allowed",
            StopKind::ColumnRules => "column_rules",
        }
    }

    /// The remedy, with `SCHEMA.TABLE` for the table.
    pub fn remedy_template(self) -> &'static str {
        match self {
            StopKind::UnsupportedType => {
                "leave the column out (exclude_columns = [\"COLUMN\"] or unsupported_columns = \"skip\" in [table.\"SCHEMA.TABLE\"]) and restart walshadow, or change the column's type on the source to one walshadow streams; then run `walshadow table resync SCHEMA.TABLE`; or opt the table out"
            }
            StopKind::NoKey => {
                "give the source table a primary key (or REPLICA IDENTITY FULL / USING INDEX), then run `walshadow table resync SCHEMA.TABLE`"
            }
            StopKind::SchemaChange => {
                "run `walshadow table resync SCHEMA.TABLE`: the table is loaded again with its new shape and swapped in"
            }
            StopKind::DdlRefused => {
                "run `walshadow table resync SCHEMA.TABLE`: the table is made again from the source's catalog, loaded and swapped in"
            }
            StopKind::ValueOutOfRange => {
                "say what the column writes instead: out_of_range_columns = { COLUMN = \"clamp\" } (or \"null\", \"string\") in [table.\"SCHEMA.TABLE\"] (restart walshadow) or the config table row's out_of_range_columns; or change the value on the source; then run `walshadow table resync SCHEMA.TABLE`"
            }
            StopKind::RowsRefused => {
                "fix what ClickHouse names (the column, or the source value), then run `walshadow table resync SCHEMA.TABLE`"
            }
            StopKind::PartialTruncate => "run `walshadow table resync SCHEMA.TABLE`",
            StopKind::ToastUnreadable => {
                "give walshadow's source role read access to TOAST relations (a superuser, or GRANT pg_read_all_data), then run `walshadow table resync SCHEMA.TABLE`"
            }
            StopKind::ToastGone => "run `walshadow table resync SCHEMA.TABLE`",
            StopKind::UndecodableRow => {
                "report it with the LSN; `walshadow table resync SCHEMA.TABLE` loads the table again meanwhile"
            }
            StopKind::DestinationTaken => {
                "name another ClickHouse table for it: the config table's destination column, or destination = \"…\" in its [table.\"…\"] section"
            }
            StopKind::UnknownInitialLoad => {
                "set the config table's initial_load for it to none, copy or base_backup"
            }
            StopKind::ResyncTableGone => "run `walshadow table resync SCHEMA.TABLE` again",
            StopKind::NotAllowed => {
                "if it should stream, add a pattern for it to [source] config_table_allow (or pin it in the config file) and restart; otherwise delete its config table row"
            }
            StopKind::ColumnRules => {
                "change the rule the message names in [table.\"SCHEMA.TABLE\"] (exclude_columns, out_of_range, rename_columns, column_types, order_by, partition_by; a replica identity column can be neither left out nor NULL or clamped) and restart walshadow, or in an opted-in table's config table row; or give the source table another key; then run `walshadow table resync SCHEMA.TABLE`"
            }
        }
    }

    /// The remedy for table `key`.
    pub fn remedy(self, key: &str) -> String {
        self.remedy_template().replace("SCHEMA.TABLE", key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator guide lists every kind with its remedy, word for word.
    #[test]
    fn operator_guide_lists_every_stop_kind() {
        let guide = include_str!("../../../docs/operator-guide.md");
        for kind in StopKind::ALL {
            let row = guide
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", kind.code())))
                .unwrap_or_else(|| {
                    panic!("no row for `{}` in docs/operator-guide.md", kind.code())
                });
            assert!(
                row.contains(kind.remedy_template()),
                "docs/operator-guide.md's row for `{}` does not give its remedy:\n{row}\nexpected:\n{}",
                kind.code(),
                kind.remedy_template()
            );
        }
        let codes: Vec<&str> = StopKind::ALL.iter().map(|k| k.code()).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len(), "codes are unique");
    }

    #[test]
    fn no_remedy_edits_state_files() {
        for kind in StopKind::ALL {
            let r = kind.remedy("public.t");
            assert!(
                !r.contains("progress.json") && !r.contains("SCHEMA.TABLE"),
                "{r}"
            );
        }
    }
}
