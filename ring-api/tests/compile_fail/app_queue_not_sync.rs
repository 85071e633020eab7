//! A second producer by sharing the application half between threads.
use ring_api::queue_pair;

fn main() {
    let (app, _worker) = queue_pair(8, 8, None).unwrap();
    let app = &app;
    std::thread::scope(|s| {
        s.spawn(move || app.sq_capacity());
        s.spawn(move || app.sq_capacity());
    });
}
