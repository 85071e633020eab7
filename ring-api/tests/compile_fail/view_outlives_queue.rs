//! A view cannot outlive (or be moved away from) the half it borrows.
use ring_api::queue_pair;

fn main() {
    let (mut app, _worker) = queue_pair(8, 8, None).unwrap();
    let sq = app.submission();
    let moved = app;
    drop(sq);
    drop(moved);
}
