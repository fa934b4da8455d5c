//! `WalFollower`: a WAL stream that follows timeline switches.
//!
//! When the streamed timeline ends (a standby was promoted, or the start
//! was on a historic timeline) the walsender reports `(next_tli,
//! switch_lsn)`. WAL before `switch_lsn` belongs to the old timeline, WAL
//! from it on to the new one, so the follower checks that it has received
//! exactly up to `switch_lsn`, checks the switch against the new
//! timeline's history file (`TIMELINE_HISTORY`), and restarts
//! `START_REPLICATION` on `next_tli` at `switch_lsn` on the same connection.
//! The consumer sees one contiguous run of chunks with a
//! [`FollowEvent::TimelineSwitch`] between the two timelines' bytes.

use bytes::Bytes;
use walshadow_types::{Lsn, TimeLineId};

use super::client::ReplicationClient;
use super::error::{ReplicationError, Result};
use super::stream::{StandbyPositions, WalEvent, WalStream};
use super::timeline::TimelineHistory;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowEvent {
    /// WAL bytes of `timeline` at `[start, start + data.len())`, contiguous
    /// with the previous chunk (across timeline switches too).
    Wal {
        timeline: TimeLineId,
        start: Lsn,
        data: Bytes,
        /// The server's WAL end when it sent this.
        wal_end: Lsn,
    },
    /// Later chunks are on `to`; `from` ended at `switch_lsn`.
    TimelineSwitch {
        from: TimeLineId,
        to: TimeLineId,
        switch_lsn: Lsn,
        history: TimelineHistory,
    },
    /// The server's current WAL end, from a keepalive.
    ServerWalEnd(Lsn),
}

#[derive(Debug)]
pub struct WalFollower {
    stream: Option<WalStream>,
    slot: Option<String>,
    timeline: TimeLineId,
    positions: StandbyPositions,
}

impl WalFollower {
    /// Starts streaming `timeline` (must be given: the follower needs to
    /// know which timeline its bytes are on) at `start`.
    pub async fn start(
        client: ReplicationClient,
        slot: Option<&str>,
        start: Lsn,
        timeline: TimeLineId,
    ) -> Result<Self> {
        if timeline == 0 {
            return Err(ReplicationError::Config(
                "WalFollower needs an explicit start timeline (IDENTIFY_SYSTEM gives the current one)".into(),
            ));
        }
        let stream = client.start_replication(slot, start, timeline).await?;
        Ok(WalFollower {
            stream: Some(stream),
            slot: slot.map(str::to_owned),
            timeline,
            positions: StandbyPositions::default(),
        })
    }

    /// The timeline of the chunks being returned now.
    pub fn timeline(&self) -> TimeLineId {
        self.timeline
    }

    /// End of everything received.
    pub fn received_upto(&self) -> Option<Lsn> {
        self.stream.as_ref().map(WalStream::received_upto)
    }

    /// See [`WalStream::set_positions`]; kept across timeline switches.
    pub fn set_positions(&mut self, write: Lsn, flush: Lsn, apply: Lsn) {
        self.positions.advance(StandbyPositions {
            write,
            flush,
            apply,
        });
        if let Some(s) = &mut self.stream {
            s.set_all_positions(self.positions);
        }
    }

    pub async fn send_status(&mut self, reply_requested: bool) -> Result<()> {
        match &mut self.stream {
            Some(s) => s.send_status(reply_requested).await,
            None => Err(ReplicationError::Poisoned(
                "the follower failed earlier".into(),
            )),
        }
    }

    pub async fn next(&mut self) -> Result<FollowEvent> {
        let stream = self
            .stream
            .as_mut()
            .ok_or_else(|| ReplicationError::Poisoned("the follower failed earlier".into()))?;
        match stream.next().await? {
            Some(WalEvent::XLogData {
                start,
                data,
                wal_end,
                ..
            }) => Ok(FollowEvent::Wal {
                timeline: self.timeline,
                start,
                data,
                wal_end,
            }),
            Some(WalEvent::Keepalive { wal_end, .. }) => Ok(FollowEvent::ServerWalEnd(wal_end)),
            Some(WalEvent::EndOfTimeline {
                next_tli,
                switch_lsn,
            }) => self.switch(next_tli, switch_lsn).await,
            None => Err(ReplicationError::protocol(
                "stream ended without an end-of-timeline message",
            )),
        }
    }

    async fn switch(&mut self, next_tli: TimeLineId, switch_lsn: Lsn) -> Result<FollowEvent> {
        let Some(stream) = self.stream.take() else {
            return Err(ReplicationError::Poisoned(
                "the follower failed earlier".into(),
            ));
        };
        let from = self.timeline;
        let received = stream.received_upto();
        if received != switch_lsn {
            // Short: WAL of the old timeline is missing. Past: we hold bytes
            // of the old timeline that the new one does not share.
            return Err(ReplicationError::protocol(format!(
                "timeline {from} ended at {switch_lsn} but WAL was received up to {received}; the stream diverged from the server's history"
            )));
        }
        if next_tli <= from {
            return Err(ReplicationError::protocol(format!(
                "timeline {from} is followed by timeline {next_tli}, which is not newer"
            )));
        }
        let mut client = stream.stop().await?;
        let history = client.timeline_history(next_tli).await?;
        match history.switch_point(from) {
            Some(lsn) if lsn == switch_lsn => {}
            other => {
                return Err(ReplicationError::protocol(format!(
                    "history of timeline {next_tli} has timeline {from} ending at {other:?}, but the server reported {switch_lsn}"
                )));
            }
        }
        let mut stream = client
            .start_replication(self.slot.as_deref(), switch_lsn, next_tli)
            .await?;
        stream.set_all_positions(self.positions);
        self.stream = Some(stream);
        self.timeline = next_tli;
        Ok(FollowEvent::TimelineSwitch {
            from,
            to: next_tli,
            switch_lsn,
            history,
        })
    }

    /// Stops streaming and returns the client in command mode.
    pub async fn stop(mut self) -> Result<ReplicationClient> {
        match self.stream.take() {
            Some(s) => s.stop().await,
            None => Err(ReplicationError::Poisoned(
                "the follower failed earlier".into(),
            )),
        }
    }
}
