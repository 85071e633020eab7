//! Two consumers of the submission ring: the worker half is not `Sync` either.
use ring_api::WorkerQueue;

fn assert_sync<T: Sync>() {}

fn main() {
    assert_sync::<WorkerQueue>();
}
