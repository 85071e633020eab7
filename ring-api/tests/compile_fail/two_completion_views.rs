//! Two completion readers at once (one from `split`, one direct) would double-consume.
use ring_api::queue_pair;

fn main() {
    let (mut app, _worker) = queue_pair(8, 8, None).unwrap();
    let (_sq, cq) = app.split();
    let other = app.completion();
    drop((cq, other));
}
