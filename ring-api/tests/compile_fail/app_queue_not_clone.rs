//! A second producer by cloning the application half.
use ring_api::queue_pair;

fn main() {
    let (app, _worker) = queue_pair(8, 8, None).unwrap();
    let _second_producer = app.clone();
}
