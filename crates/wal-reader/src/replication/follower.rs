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

/// A switch to the next timeline under way: stopping the old stream,
/// reading the new timeline's history, starting the new stream. Kept in
/// the follower, so a caller's `select!` dropping [`WalFollower::next`]
/// mid-switch does not lose it.
type Switching = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(WalStream, TimelineHistory)>> + Send>,
>;

pub struct WalFollower {
    stream: Option<WalStream>,
    switching: Option<(Switching, TimeLineId, Lsn)>,
    slot: Option<String>,
    timeline: TimeLineId,
    positions: StandbyPositions,
}

impl std::fmt::Debug for WalFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalFollower")
            .field("stream", &self.stream)
            .field(
                "switching_to",
                &self.switching.as_ref().map(|(_, t, l)| (t, l)),
            )
            .field("slot", &self.slot)
            .field("timeline", &self.timeline)
            .field("positions", &self.positions)
            .finish()
    }
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
            switching: None,
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
        match &self.switching {
            Some((_, _, switch_lsn)) => Some(*switch_lsn),
            None => self.stream.as_ref().map(WalStream::received_upto),
        }
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
            // The new stream gets the positions when the switch ends.
            None if self.switching.is_some() => Ok(()),
            None => Err(ReplicationError::Poisoned(
                "the follower failed earlier".into(),
            )),
        }
    }

    /// The next event. Cancel-safe: a timeline switch under way is kept
    /// and goes on at the next call.
    pub async fn next(&mut self) -> Result<FollowEvent> {
        loop {
            if let Some((switching, next_tli, switch_lsn)) = &mut self.switching {
                let (next_tli, switch_lsn) = (*next_tli, *switch_lsn);
                let switched = switching.await;
                self.switching = None;
                let (mut stream, history) = switched?;
                stream.set_all_positions(self.positions);
                let from = self.timeline;
                self.stream = Some(stream);
                self.timeline = next_tli;
                return Ok(FollowEvent::TimelineSwitch {
                    from,
                    to: next_tli,
                    switch_lsn,
                    history,
                });
            }
            let stream = self
                .stream
                .as_mut()
                .ok_or_else(|| ReplicationError::Poisoned("the follower failed earlier".into()))?;
            return match stream.next().await? {
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
                }) => {
                    self.begin_switch(next_tli, switch_lsn)?;
                    continue;
                }
                None => Err(ReplicationError::protocol(
                    "stream ended without an end-of-timeline message",
                )),
            };
        }
    }

    /// Checks the end of the old timeline and starts the switch (see
    /// [`Switching`]).
    fn begin_switch(&mut self, next_tli: TimeLineId, switch_lsn: Lsn) -> Result<()> {
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
        let slot = self.slot.clone();
        let switching = async move {
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
            let stream = client
                .start_replication(slot.as_deref(), switch_lsn, next_tli)
                .await?;
            Ok((stream, history))
        };
        self.switching = Some((Box::pin(switching), next_tli, switch_lsn));
        Ok(())
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
