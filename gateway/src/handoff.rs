//! The gate's hand-off of ready requests to the worker pool: one queue; idle workers wait on a
//! condition variable and a request wakes exactly one of them (none when one is awake anyway).
//!
//! It replaces an `mpsc::Receiver` shared behind a mutex, where the worker blocked in `recv`
//! held the mutex while the other idle workers queued on it: every request then cost a
//! contended unlock and the wake-up of the next worker (into another blocking `recv`) on top of
//! the channel's own wake-up, about two futex calls and a context switch per request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

struct State<T> {
    queue: VecDeque<T>,
    /// The sending side is gone: receivers drain the queue, then get `None`.
    closed: bool,
    /// Receivers waiting now (a notify with none waiting is a wasted syscall).
    idle: usize,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    receivers: AtomicUsize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The gate's end. Dropping it closes the queue.
pub(crate) struct Sender<T>(Arc<Shared<T>>);

/// A worker's end (one clone per worker).
pub(crate) struct Receiver<T>(Arc<Shared<T>>);

/// A new queue.
pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            closed: false,
            idle: 0,
        }),
        ready: Condvar::new(),
        receivers: AtomicUsize::new(1),
    });
    (Sender(Arc::clone(&shared)), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queues `item` for one worker; `Err(item)` when no worker is left.
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        if self.0.receivers.load(Ordering::Acquire) == 0 {
            return Err(item);
        }
        let wake = {
            let mut st = self.0.lock();
            st.queue.push_back(item);
            st.idle > 0
        };
        if wake {
            self.0.ready.notify_one();
        }
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.ready.notify_all();
    }
}

impl<T> Receiver<T> {
    /// The next item, waiting for one; `None` once the sender is gone and the queue is empty.
    pub(crate) fn recv(&self) -> Option<T> {
        let mut st = self.0.lock();
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some(item);
            }
            if st.closed {
                return None;
            }
            st.idle += 1;
            st = self
                .0
                .ready
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
            st.idle -= 1;
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.0.receivers.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(&self.0))
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.0.receivers.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_item_reaches_exactly_one_worker_and_workers_end_when_the_sender_goes() {
        let (tx, rx) = channel::<u32>();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(i) = rx.recv() {
                        got.push(i);
                    }
                    got
                })
            })
            .collect();
        drop(rx);
        for i in 0..10_000 {
            tx.send(i).unwrap();
            if i % 1000 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(tx);
        let mut all: Vec<u32> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn sending_with_no_worker_left_gives_the_item_back() {
        let (tx, rx) = channel::<&str>();
        drop(rx);
        assert_eq!(tx.send("x"), Err("x"));
    }
}
