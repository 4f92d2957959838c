//! Live counts: one background task reads every queue's counts each refresh while at least
//! one page listens (`/events`, server-sent events), however many pages do, and nothing while
//! none does. The counts of finished jobs (a read of the whole table) are taken again only
//! every `--finished-every` seconds, and only while someone watches.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::{watch, Mutex};
use tokio_stream::wrappers::WatchStream;
use tokio_stream::StreamExt;

use crate::db::{Finished, QueueLive};
use crate::Shared;

/// What the open pages are sent each refresh.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Snapshot {
    /// Every queue's live counts.
    pub queues: Vec<QueueLive>,
    /// Finished jobs per queue (succeeded, failed, cancelled), once taken.
    pub finished: Option<Finished>,
    /// Seconds since the finished counts were taken.
    pub finished_age: Option<u64>,
    /// Why the last read failed, if it did.
    pub error: Option<String>,
}

/// The live counts and their subscribers.
pub struct Live {
    sender: watch::Sender<Arc<Snapshot>>,
    finished: Mutex<Option<(Instant, Finished)>>,
    /// Whether a read of the finished counts is under way (one at a time).
    taking_finished: std::sync::atomic::AtomicBool,
}

impl Live {
    /// No counts yet, no subscribers.
    pub fn new() -> Live {
        Live {
            sender: watch::channel(Arc::new(Snapshot::default())).0,
            finished: Mutex::new(None),
            taking_finished: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The finished counts and their age, when taken; starts taking them again in the
    /// background when they are older than `every` (or were never taken).
    pub async fn finished(&self, app: &Shared, every: Duration) -> Option<(Finished, u64)> {
        let current = self.finished.lock().await.clone();
        let stale = current
            .as_ref()
            .is_none_or(|(taken, _)| taken.elapsed() >= every);
        if stale
            && !self
                .taking_finished
                .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let app = app.clone();
            tokio::spawn(async move {
                if let Ok(finished) = app.db.finished().await {
                    *app.live.finished.lock().await = Some((Instant::now(), finished));
                }
                app.live
                    .taking_finished
                    .store(false, std::sync::atomic::Ordering::Release);
            });
        }
        current.map(|(taken, finished)| (finished, taken.elapsed().as_secs()))
    }
}

impl Default for Live {
    fn default() -> Live {
        Live::new()
    }
}

/// Starts the task that refreshes the counts every `every` while pages listen.
pub fn spawn_refresher(app: Shared, every: Duration) {
    tokio::spawn(async move {
        let finished_every = Duration::from_secs(app.options.finished_every.max(1));
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if app.live.sender.receiver_count() == 0 {
                continue;
            }
            let snapshot = match app.db.live(app.options.count_limit as i32).await {
                Ok(queues) => {
                    let finished = app.live.finished(&app, finished_every).await;
                    Snapshot {
                        queues,
                        finished_age: finished.as_ref().map(|(_, age)| *age),
                        finished: finished.map(|(f, _)| f),
                        error: None,
                    }
                }
                Err(error) => Snapshot {
                    error: Some(error.to_string()),
                    ..Snapshot::default()
                },
            };
            app.live.sender.send_replace(Arc::new(snapshot));
        }
    });
}

/// `/events`: the counts as server-sent events, one `counts` event per refresh.
pub async fn events(
    State(app): State<Shared>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receiver = app.live.sender.subscribe();
    // The first value is the last snapshot, possibly from long ago: skip it, the next
    // refresh comes within one period.
    let stream = WatchStream::from_changes(receiver).map(|snapshot| {
        let data = serde_json::to_string(&*snapshot).unwrap_or_else(|_| "{}".to_owned());
        Ok(Event::default().event("counts").data(data))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
